// csv_log_writer and format_row: exact row format, concurrent appends, growth,
// open errors, durability when the writing process dies, and the hostile cases:
// several processes on one path, truncation under the writer, a full disk,
// SIGBUS that is not the log's.

#include <gpumem/csv_log_writer.hpp>
#include <gpumem/detail/fault_overlay.hpp>
#include <gpumem/error.hpp>

#include <support/csv_log_reader.hpp>
#include <support/temp_file.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

std::string format(log_row const& row) {
  char buf[max_row_bytes];
  auto const n = format_row(buf, row);
  EXPECT_LE(n, max_row_bytes);
  return std::string{buf, n};
}

std::string split_csv_field(std::string const& line, std::size_t i) {
  return test::split_csv(line.substr(0, line.size() - 1)).at(i);
}

log_row example_row() {
  return log_row{.thread_id = 140245,
                 .time_ns = 1763733727123456789,
                 .utc_offset_s = 0,
                 .action = log_action::allocate,
                 .pointer = reinterpret_cast<void const*>(std::uintptr_t{0x7f3a40000000}),
                 .size = 1048576,
                 .stream = 0x1,
                 .device = 0,
                 .entry = "cudaMalloc",
                 .duration_ns = 412,
                 .result = nullptr,
                 .reserved = 2097152};
}

TEST(FormatRow, MatchesTheDocumentedExample) {
  EXPECT_EQ(format(example_row()),
            "140245,14:02:07.123456,allocate,0x7f3a40000000,1048576,0x1,0,cudaMalloc,1763733727123456789,412,"
            "CUDA_SUCCESS,2097152,\n");
}

// The Stack column comes last, after RMM's six columns and gpumem's others:
// hex without 0x, empty when no stack was recorded.
TEST(FormatRow, StackIdIsTheLastColumnInHex) {
  auto row = example_row();
  row.stack = 0x9c1e07a2f3b4d5e6;
  EXPECT_EQ(split_csv_field(format(row), 12), "9c1e07a2f3b4d5e6");
  row.stack = 0x1;
  EXPECT_EQ(split_csv_field(format(row), 12), "1");
  row.stack = 0xabc;
  EXPECT_EQ(split_csv_field(format(row), 12), "abc");
  row.stack = 0;
  EXPECT_EQ(split_csv_field(format(row), 12), "");
  EXPECT_EQ(csv_log_header.rfind("Thread,Time,Action,Pointer,Size,Stream,", 0), 0U);
  EXPECT_TRUE(csv_log_header.ends_with(",Reserved,Stack\n"));
}

TEST(FormatRow, NullPointerNullStreamFailureAndDefaults) {
  auto row = example_row();
  row.action = log_action::allocate_failure;
  row.pointer = nullptr;
  row.stream = 0;
  row.device = -1;
  row.entry = nullptr;
  row.result = "CUDA_ERROR_OUT_OF_MEMORY";
  row.reserved = -1;  // unknown: empty
  EXPECT_EQ(format(row),
            "140245,14:02:07.123456,allocate failure,(nil),1048576,0,-1,allocate,1763733727123456789,412,"
            "CUDA_ERROR_OUT_OF_MEMORY,,\n");
  row.action = log_action::free;
  row.stream = 0x2;
  row.size = 0;
  EXPECT_EQ(format(row),
            "140245,14:02:07.123456,free,(nil),0,0x2,-1,free,1763733727123456789,412,CUDA_ERROR_OUT_OF_MEMORY,,\n");
  row.reserved = 0;
  EXPECT_EQ(split_csv_field(format(row), 11), "0");
}

// A call whose duration was not measured: DurationNs empty, the rest unchanged.
TEST(FormatRow, AnUnmeasuredDurationIsAnEmptyField) {
  auto row = example_row();
  row.duration_ns = log_row::unmeasured;
  EXPECT_EQ(format(row),
            "140245,14:02:07.123456,allocate,0x7f3a40000000,1048576,0x1,0,cudaMalloc,1763733727123456789,,"
            "CUDA_SUCCESS,2097152,\n");
  row.duration_ns = 0;
  EXPECT_EQ(split_csv_field(format(row), 9), "0");
}

TEST(FormatRow, LocalOffsetWrapsAroundMidnight) {
  auto row = example_row();
  row.utc_offset_s = 10 * 3600;  // 14:02:07 UTC is 00:02:07 the next day at UTC+10
  EXPECT_EQ(split_csv_field(format(row), 1), "00:02:07.123456");
  row.utc_offset_s = -(14 * 3600 + 2 * 60 + 8);  // one second before midnight
  EXPECT_EQ(split_csv_field(format(row), 1), "23:59:59.123456");
  row.time_ns = 5;  // microseconds truncate, not round
  row.utc_offset_s = 0;
  EXPECT_EQ(split_csv_field(format(row), 1), "00:00:00.000000");
}

// format_row memoizes per thread the text of the thread id and of the second
// (Time's HH:MM:SS, TimeNs's seconds): rows that alternate them must not mix.
TEST(FormatRow, InterleavedThreadsSecondsAndOffsetsKeepTheirOwnText) {
  auto const a = example_row();
  auto b = example_row();
  b.thread_id = 7;
  b.time_ns += 1'000'000'000 + 1000;  // the next second
  b.utc_offset_s = 3600;
  auto c = a;
  c.utc_offset_s = -3600;  // same second as a, another offset
  std::string const line_a =
      "140245,14:02:07.123456,allocate,0x7f3a40000000,1048576,0x1,0,cudaMalloc,1763733727123456789,412,"
      "CUDA_SUCCESS,2097152,\n";
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(format(a), line_a);
    EXPECT_EQ(format(b),
              "7,15:02:08.123457,allocate,0x7f3a40000000,1048576,0x1,0,cudaMalloc,1763733728123457789,412,"
              "CUDA_SUCCESS,2097152,\n");
    EXPECT_EQ(split_csv_field(format(c), 1), "13:02:07.123456");
  }
  auto early = a;
  early.time_ns = 999'999'999;  // below one second: TimeNs has no leading zeros
  EXPECT_EQ(split_csv_field(format(early), 8), "999999999");
  early.time_ns = 1'000'000'007;  // one second: zero-padded fraction
  EXPECT_EQ(split_csv_field(format(early), 8), "1000000007");
  EXPECT_EQ(format(a), line_a);
}

// Pointer, Size and Reserved are remembered per thread too: each row must show its own.
TEST(FormatRow, PointerSizeAndReservedFollowEveryRow) {
  auto row = example_row();
  for (std::uint64_t v : {1ULL, 1ULL, 123456789ULL, 7ULL, 0ULL, 18446744073709551615ULL, 7ULL}) {
    row.size = v;
    row.reserved = static_cast<std::int64_t>(v >> 1);
    row.pointer = reinterpret_cast<void const*>(static_cast<std::uintptr_t>(v));
    auto const line = format(row);
    EXPECT_EQ(split_csv_field(line, 4), std::to_string(v));
    EXPECT_EQ(split_csv_field(line, 11), std::to_string(v >> 1));
    std::ostringstream hex;
    hex << "0x" << std::hex << v;
    EXPECT_EQ(split_csv_field(line, 3), v == 0 ? "(nil)" : hex.str());
  }
  row.reserved = -1;
  EXPECT_EQ(split_csv_field(format(row), 11), "");
  row.reserved = 3;
  EXPECT_EQ(split_csv_field(format(row), 11), "3");
}

TEST(FormatRow, NamesAreSanitizedAndCut) {
  auto row = example_row();
  row.entry = "evil,entry\n\"x\"";
  row.result = "";
  auto const line = format(row);
  auto const f = test::split_csv(line.substr(0, line.size() - 1));
  ASSERT_EQ(f.size(), csv_log_columns);
  EXPECT_EQ(f[7], "evil_entry__x_");
  EXPECT_EQ(f[10], "");

  std::string const long_name(200, 'a');
  row.entry = long_name.c_str();
  row.result = long_name.c_str();
  row.thread_id = UINT64_MAX;
  row.size = SIZE_MAX;
  row.time_ns = INT64_MIN;
  row.duration_ns = UINT64_MAX;
  row.device = INT32_MIN;
  row.pointer = reinterpret_cast<void const*>(UINTPTR_MAX);
  row.stream = UINTPTR_MAX;
  row.action = log_action::allocate_failure;
  row.reserved = INT64_MAX;
  row.stack = UINT64_MAX;
  auto const worst = format(row);
  auto const g = test::split_csv(worst.substr(0, worst.size() - 1));
  ASSERT_EQ(g.size(), csv_log_columns);
  EXPECT_EQ(g[0], "18446744073709551615");
  EXPECT_EQ(g[3], "0xffffffffffffffff");
  EXPECT_EQ(g[6], "-2147483648");
  EXPECT_EQ(g[7], std::string(64, 'a'));
  EXPECT_EQ(g[8], "-9223372036854775808");
  EXPECT_EQ(g[10], std::string(64, 'a'));
  EXPECT_EQ(g[11], "9223372036854775807");
}

TEST(IncompleteMarker, NamesTheCountAndAReasonWithoutSeparators) {
  char line[csv_log_writer::marker_bytes];
  auto const n = format_incomplete_marker(line, sizeof line, 18446744073709551615ULL, "cut, twice\nand\rmore");
  EXPECT_EQ((std::string{line, n}),
            "#gpumem incomplete,dropped_rows=18446744073709551615,reason=cut  twice and more\n");
}

TEST(IncompleteMarker, ALongReasonIsCutToTheBufferAndTooSmallABufferGetsNothing) {
  char line[64];
  std::string const reason(200, 'x');
  auto const n = format_incomplete_marker(line, sizeof line, 3, reason);
  ASSERT_EQ(n, sizeof line);
  std::string const text{line, n};
  EXPECT_EQ(text.rfind("#gpumem incomplete,dropped_rows=3,reason=xxx", 0), 0U);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(format_incomplete_marker(line, 40, 3, "why"), 0U);  // not room for the count's 20 digits
}

TEST(CsvLogWriter, WritesHeaderAndRowsAndTruncatesOnClose) {
  test::temp_file tmp;
  csv_log_writer w{tmp.path()};
  EXPECT_EQ(w.path(), tmp.path());
  for (int i = 0; i < 3; ++i) {
    auto row = example_row();
    row.size = static_cast<std::size_t>(i);
    w.write(row);
  }
  w.flush();
  // Sizes 0..2 are six digits shorter than the example's 1048576.
  auto const expected_bytes = csv_log_header.size() + 3 * (format(example_row()).size() - 6);
  EXPECT_EQ(w.bytes_written(), expected_bytes);
  w.close();
  w.close();               // idempotent
  w.write(example_row());  // dropped after close
  EXPECT_EQ(w.bytes_written(), expected_bytes);

  struct stat st {};
  ASSERT_EQ(::stat(tmp.path().c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), expected_bytes);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.header + "\n", csv_log_header);
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.bad_lines, 0u);
  ASSERT_EQ(log.rows.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(log.rows[i][4], std::to_string(i));
}

TEST(CsvLogWriter, ConcurrentWritersLoseNothingAcrossGrowth) {
  test::temp_file tmp;
  constexpr int threads = 4;
  constexpr int per_thread = 20000;  // ~2.6 MB: several growth steps of the file
  {
    csv_log_writer w{tmp.path()};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&w, t] {
        for (int i = 0; i < per_thread; ++i) {
          auto row = example_row();
          row.thread_id = static_cast<std::uint64_t>(t);
          row.size = static_cast<std::size_t>(i);
          w.write(row);
        }
      });
    }
    for (auto& th : pool) th.join();
    EXPECT_EQ(w.dropped_rows(), 0u);
  }  // destructor closes
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.bad_lines, 0u);
  ASSERT_EQ(log.rows.size(), static_cast<std::size_t>(threads * per_thread));
  // Each thread's rows appear in its own order, none missing or duplicated.
  std::vector<std::size_t> next(threads, 0);
  for (auto const& r : log.rows) {
    auto const t = std::stoul(r[0]);
    ASSERT_LT(t, static_cast<unsigned long>(threads));
    EXPECT_EQ(std::stoul(r[4]), next[t]);
    ++next[t];
  }
  for (auto n : next) EXPECT_EQ(n, static_cast<std::size_t>(per_thread));
}

// Threads of this process named `name` (/proc/self/task/*/comm).
int threads_named(std::string const& name) {
  int n = 0;
  for (auto const& e : std::filesystem::directory_iterator{"/proc/self/task"}) {
    std::ifstream comm{e.path() / "comm"};
    std::string s;
    if (std::getline(comm, s) && s == name) ++n;
  }
  return n;
}

TEST(CsvLogWriter, PrefaultHelperRunsWhileOpenAndIsJoinedAtClose) {
  test::temp_file tmp;
  int const before = threads_named("gpumem-log");
  csv_log_writer w{tmp.path()};
  EXPECT_EQ(threads_named("gpumem-log"), before + 1);
  for (int i = 0; i < 5000; ++i) w.write(example_row());  // crosses several wake-up boundaries
  w.close();
  // Joined: the kernel may list the finished task a moment longer.
  for (int i = 0; i < 100 && threads_named("gpumem-log") != before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  EXPECT_EQ(threads_named("gpumem-log"), before);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.rows.size(), 5000u);
}

TEST(CsvLogWriter, UnwritablePathThrowsLogicErrorNamingPathAndReason) {
  std::string const path = "/nonexistent-gpumem-dir/x/log.csv";
  try {
    csv_log_writer w{path};
    FAIL() << "expected gpumem::logic_error";
  } catch (logic_error const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
}

TEST(CsvLogWriter, ForkedChildAppendsToTheSameLog) {
  test::temp_file tmp;
  csv_log_writer w{tmp.path()};
  w.write(example_row());
  pid_t const child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (int i = 0; i < 500; ++i) w.write(example_row());
    w.close();  // a child's close must not truncate the parent's log
    ::_exit(0);
  }
  for (int i = 0; i < 500; ++i) w.write(example_row());
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  w.write(example_row());
  w.close();
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.bad_lines, 0u);
  EXPECT_EQ(log.rows.size(), 1002u);
}

TEST(CsvLogWriter, OrderlyExitTruncatesToTheRowsWritten) {
  test::temp_file tmp;
  pid_t const child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto* w = new csv_log_writer{tmp.path()};  // never destroyed: only the atexit hook can truncate
    for (int i = 0; i < 10; ++i) w->write(example_row());
    std::exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.rows.size(), 10u);
  EXPECT_EQ(log.file_bytes, csv_log_header.size() + 10 * format(example_row()).size());
}

// The child logs exactly `rows` rows, then dies by `how`; every row must be there.
void expect_rows_survive(int how, int rows) {
  test::temp_file tmp;
  pid_t const child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    csv_log_writer w{tmp.path()};
    for (int i = 0; i < rows; ++i) {
      auto row = example_row();
      row.size = static_cast<std::size_t>(i);
      w.write(row);
    }
    if (how == SIGABRT) std::abort();
    std::signal(how, SIG_DFL);
    ::raise(how);
    ::_exit(99);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), how);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.header + "\n", csv_log_header);
  EXPECT_EQ(log.bad_lines, 0u);
  ASSERT_EQ(log.rows.size(), static_cast<std::size_t>(rows));
  for (int i = 0; i < rows; ++i) EXPECT_EQ(log.rows[static_cast<std::size_t>(i)][4], std::to_string(i));
  EXPECT_GT(log.nul_bytes, 0u);  // never truncated: the reserved tail is NUL
}

// ---------------------------------------------------------------------------
// Hostile conditions. Each case that could kill a process runs in a forked child,
// so a regression shows as a failed test, not as a dead test binary.

// Notifier lines: kept in this process, and copied to g_note_fd (a pipe to the
// parent) when a forked child sets it.
std::mutex g_notes_mutex;
std::vector<std::string> g_notes;
int g_note_fd = -1;

void capture_note(std::string_view line) noexcept {
  if (g_note_fd >= 0) {
    std::string const l = std::string{line} + "\n";
    (void)!::write(g_note_fd, l.data(), l.size());
    return;
  }
  std::lock_guard lock{g_notes_mutex};
  g_notes.emplace_back(line);
}

std::vector<std::string> take_notes() {
  std::lock_guard lock{g_notes_mutex};
  return std::exchange(g_notes, {});
}

struct child_result {
  int status = 0;
  std::vector<std::string> notes;  ///< notifier lines the child sent
};

/// Runs `body` in a forked child (its return value is the exit code) and
/// collects the notifier lines it sends.
template <class F>
child_result in_child(F&& body) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  pid_t const pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    g_note_fd = fds[1];
    ::_exit(body());
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  child_result r;
  ::waitpid(pid, &r.status, 0);
  std::istringstream lines{text};
  for (std::string l; std::getline(lines, l);) r.notes.push_back(l);
  return r;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string{"killed by "} + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

log_row numbered_row(std::uint64_t writer, std::size_t i) {
  auto row = example_row();
  row.thread_id = writer;
  row.size = i;
  return row;
}

/// "dropped_rows=N" of a marker line; -1 if `line` is not a marker.
long long marker_dropped(std::string const& line) {
  if (!line.starts_with(csv_log_incomplete_prefix)) return -1;
  auto const at = line.find("dropped_rows=");
  return at == std::string::npos ? -1 : std::stoll(line.substr(at + 13));
}

void truncate_file(std::string const& path, off_t size = 0) {
  // As ": > path" (size 0) or truncate -s does it: through the path, by another party.
  if (size == 0) {
    int const fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
    ASSERT_GE(fd, 0);
    ::close(fd);
  } else {
    ASSERT_EQ(::truncate(path.c_str(), size), 0);
  }
}

TEST(CsvLogWriter, SecondWriterOnAPathInUseMovesToItsPidFile) {
  test::temp_file tmp;
  take_notes();
  csv_log_writer first{tmp.path(), &capture_note};
  EXPECT_EQ(first.path(), tmp.path());
  EXPECT_TRUE(take_notes().empty());
  csv_log_writer second{tmp.path(), &capture_note};
  std::string const moved = tmp.path() + "." + std::to_string(::getpid());
  EXPECT_EQ(second.requested_path(), tmp.path());
  EXPECT_EQ(second.path(), moved);
  auto const notes = take_notes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("'" + tmp.path() + "' is in use by another process"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("logs to '" + moved + "'"), std::string::npos) << notes[0];
  for (std::size_t i = 0; i < 100; ++i) {
    first.write(numbered_row(1, i));
    second.write(numbered_row(2, i));
  }
  first.close();
  second.close();
  for (auto const& [path, id] : {std::pair{tmp.path(), 1UL}, std::pair{moved, 2UL}}) {
    auto const log = test::read_csv_log(path);
    EXPECT_EQ(log.header + "\n", csv_log_header);
    EXPECT_EQ(log.nul_bytes, 0u);
    ASSERT_EQ(log.rows.size(), 100u) << path;
    for (auto const& r : log.rows) EXPECT_EQ(std::stoul(r[0]), id);
  }
  // Closed: the path is free again, and a new writer empties it.
  csv_log_writer third{tmp.path(), &capture_note};
  EXPECT_EQ(third.path(), tmp.path());
  third.close();
  EXPECT_EQ(test::read_csv_log(tmp.path()).rows.size(), 0u);
}

// Four processes (torchrun's ranks with one --log) open one path at once, three
// runs: nobody dies, every process's rows are complete, in one file each.
TEST(CsvLogWriterProcesses, ConcurrentProcessesOnOnePathNeverDieAndKeepTheirRows) {
  constexpr int processes = 4;
  constexpr std::size_t rows = 3000;  // several pages, a growth or two
  for (int run = 0; run < 3; ++run) {
    test::temp_file tmp;
    // All open the log at once and keep it open until all have written (ranks of
    // one job overlap; a process that opens a path nobody holds any more starts
    // it afresh, as a rerun does).
    int go[2];
    int written[2];
    int done[2];
    ASSERT_EQ(::pipe(go), 0);
    ASSERT_EQ(::pipe(written), 0);
    ASSERT_EQ(::pipe(done), 0);
    std::vector<pid_t> pids;
    for (int p = 0; p < processes; ++p) {
      pid_t const pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(go[1]);
        ::close(done[1]);
        char c = 0;
        (void)!::read(go[0], &c, 1);
        g_note_fd = -1;
        csv_log_writer w{tmp.path(), &capture_note};
        for (std::size_t i = 0; i < rows; ++i) w.write(numbered_row(static_cast<std::uint64_t>(::getpid()), i));
        (void)!::write(written[1], "w", 1);
        (void)!::read(done[0], &c, 1);
        w.close();
        ::_exit(0);
      }
      pids.push_back(pid);
    }
    ::close(go[0]);
    ::close(done[0]);
    ::close(written[1]);
    ::close(go[1]);  // EOF: go
    for (int p = 0; p < processes; ++p) {
      char c = 0;
      if (::read(written[0], &c, 1) != 1) break;  // a child died: its status says why
    }
    ::close(written[0]);
    ::close(done[1]);  // EOF: finish
    for (pid_t pid : pids) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "run " << run << ": " << describe(status);
    }
    // Every file in the folder is a well-formed log; together they hold each
    // process's rows exactly once, in order, one process per file.
    std::map<unsigned long, std::size_t> next;
    int files = 0;
    for (auto const& e : std::filesystem::directory_iterator{tmp.dir()}) {
      ++files;
      auto const log = test::read_csv_log(e.path().string());
      EXPECT_EQ(log.header + "\n", csv_log_header) << e.path();
      EXPECT_EQ(log.nul_bytes, 0u) << e.path();
      EXPECT_EQ(log.bad_lines, 0u) << e.path();
      EXPECT_TRUE(log.metadata.empty()) << e.path();
      std::set<unsigned long> writers;
      for (auto const& r : log.rows) {
        auto const pid = std::stoul(r[0]);
        writers.insert(pid);
        EXPECT_EQ(std::stoul(r[4]), next[pid]++) << e.path();
      }
      EXPECT_EQ(writers.size(), 1u) << e.path();
    }
    EXPECT_EQ(files, processes);
    ASSERT_EQ(next.size(), static_cast<std::size_t>(processes));
    for (auto const& [pid, n] : next) EXPECT_EQ(n, rows) << "pid " << pid;
  }
}

// Waits until the helper thread has allocated the file a MiB or more past the
// write offset (it grows it 4 MiB ahead): then no growth is under way when the
// test truncates the file, and the helper grows it no further before the log
// has moved on by a MiB. False if that did not happen.
bool wait_until_allocated_ahead(csv_log_writer const& w) {
  for (int i = 0; i < 30000; ++i) {
    struct stat st {};
    if (::stat(w.path().c_str(), &st) == 0 &&
        static_cast<std::uint64_t>(st.st_size) >= w.bytes_written() + (std::uint64_t{1} << 20)) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  return false;
}

// ": > log" while the writer runs: the process goes on; the log restarts with its
// header and a marker, and the rows written after the truncation are there.
TEST(CsvLogWriterHostile, TruncationWhileWritingKeepsTheProgramAndTheLaterRows) {
  test::temp_file tmp;
  constexpr std::size_t before = 3000;
  constexpr std::size_t after = 3000;
  auto const r = in_child([&] {
    csv_log_writer w{tmp.path(), &capture_note};
    for (std::size_t i = 0; i < before; ++i) w.write(numbered_row(1, i));
    if (!wait_until_allocated_ahead(w)) return 4;  // (a truncation during a growth is a test of its own)
    truncate_file(tmp.path());
    for (std::size_t i = 0; i < after; ++i) w.write(numbered_row(2, i));
    w.close();
    return w.truncations() == 1 ? 0 : 3;
  });
  ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << describe(r.status);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.header + "\n", csv_log_header);
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.bad_lines, 0u);
  // The rows after the truncation, in order; at most the first is lost (the one
  // whose page the truncation took), and then it is counted.
  std::size_t expect = 0;
  for (auto const& row : log.rows) {
    EXPECT_EQ(row[0], "2");
    auto const i = std::stoul(row[4]);
    if (expect == 0 && i == 1) expect = 1;  // row 0 lost
    EXPECT_EQ(i, expect++);
  }
  EXPECT_GE(log.rows.size(), after - 1);
  ASSERT_FALSE(log.metadata.empty());
  EXPECT_EQ(log.last_line, log.metadata.back());
  EXPECT_EQ(marker_dropped(log.last_line), static_cast<long long>(after - log.rows.size())) << log.last_line;
  EXPECT_NE(log.last_line.find("reason=truncated by another program"), std::string::npos) << log.last_line;
  // Told once, when it was found.
  int truncation_notes = 0;
  for (auto const& n : r.notes) {
    truncation_notes += n.find("was truncated by another program while in use (to 0 bytes)") != std::string::npos;
  }
  EXPECT_EQ(truncation_notes, 1);
}

// Truncated several times, once to a size inside a row, by a forked child of the
// writer (which has no helper thread: its writes repair the log themselves).
TEST(CsvLogWriterHostile, RepeatedTruncationsInAForkedChildAndACutMidRow) {
  test::temp_file tmp;
  auto const r = in_child([&] {
    csv_log_writer w{tmp.path(), &capture_note};
    w.write(numbered_row(1, 0));
    if (!wait_until_allocated_ahead(w)) return 4;  // (a truncation during a growth is a test of its own)
    pid_t const pid = ::fork();
    if (pid == 0) {
      for (std::uint64_t round = 0; round < 3; ++round) {
        for (std::size_t i = 0; i < 500; ++i) w.write(numbered_row(10 + round, i));
        truncate_file(tmp.path());
      }
      for (std::size_t i = 0; i < 500; ++i) w.write(numbered_row(20, i));
      truncate_file(tmp.path(), static_cast<off_t>(w.bytes_written() - 50));  // inside the last row
      for (std::size_t i = 0; i < 500; ++i) w.write(numbered_row(30, i));
      // 0, or what was seen: truncations found * 10 + rows dropped (at most one per truncation).
      ::_exit(w.truncations() == 4 && w.dropped_rows() <= 4
                  ? 0
                  : static_cast<int>(w.truncations() * 10 + std::min<std::uint64_t>(w.dropped_rows(), 9)));
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    w.close();
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
  });
  ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << describe(r.status);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.header + "\n", csv_log_header);
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.bad_lines, 1u);  // the row cut in the middle, ended by the repair
  std::map<std::string, std::size_t> per_writer;
  for (auto const& row : log.rows) ++per_writer[row[0]];
  EXPECT_EQ(per_writer.size(), 2u);  // nothing from before the third truncation
  EXPECT_GE(per_writer["20"], 498u);
  // Rows stored between a cut inside a page and its discovery land past the new
  // end of the file in that page: lost, uncounted (at most a page of rows).
  EXPECT_GE(per_writer["30"], 500u - 4096u / 80u);
  std::size_t next30 = 500 - per_writer["30"];
  for (auto const& row : log.rows) {
    if (row[0] == "30") { EXPECT_EQ(std::stoul(row[4]), next30++); }
  }
  auto const dropped = marker_dropped(log.last_line);
  EXPECT_GE(dropped, 0) << log.last_line;
  EXPECT_LE(dropped, 4) << log.last_line;
}

// ---------------------------------------------------------------------------
// Forced interleavings of a repair (csv_log_writer::repair_point): a hook holds a
// thread at a named point until another thread reaches the next one, so a race
// that takes the right microseconds in the wild happens on every run.

std::atomic<int> g_stage{0};
std::atomic<bool> g_stuck{false};  // a wait gave up: the interleaving was not reached
thread_local bool t_held_writer = false;

// Async-signal-safe (it runs in the SIGBUS handler): atomics, clock_gettime, sched_yield.
void wait_stage(int stage) noexcept {
  timespec start{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  while (g_stage.load() < stage) {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > 30) {  // not a timing assertion: a broken script must not hang CI
      g_stuck.store(true);
      return;
    }
    ::sched_yield();
  }
}

bool advance(int from, int to) noexcept { return g_stage.compare_exchange_strong(from, to); }

/// Pages of `path`'s mappings in this process that map something else: gaps in the
/// file offsets they cover, counted from 0 (the log's windows map consecutive
/// ranges of the file, so they cover it from 0 without a gap unless a page was
/// overlaid). -1 when the file is not mapped at all.
long long pages_overlaid_in_mapping(std::string const& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  auto const name = "/" + std::filesystem::path{path}.filename().string();
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // file offsets mapped
  std::ifstream maps{"/proc/self/maps"};
  for (std::string line; std::getline(maps, line);) {
    unsigned long long begin = 0, end = 0, offset = 0, inode = 0;
    char perms[8] = {};
    unsigned major = 0, minor = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %x:%x %llu", &begin, &end, perms, &offset, &major, &minor,
                    &inode) != 7) {
      continue;
    }
    if (inode != st.st_ino || !line.ends_with(name)) continue;
    ranges.emplace_back(offset, offset + (end - begin));
  }
  if (ranges.empty()) return -1;
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t covered = 0;
  std::uint64_t gaps = 0;
  for (auto const& [from, to] : ranges) {
    if (from > covered) gaps += from - covered;
    covered = std::max(covered, to);
  }
  return static_cast<long long>(gaps / 4096);
}

// Exit codes of the forced-interleaving children.
constexpr int exit_not_reached = 4;     // the hooks' script did not play out
constexpr int exit_overlaid_base = 10;  // + pages still overlaid after the faulting row returned

// Checks the file a forced-interleaving child left: the header, no NUL, no bad
// line, the rows of writer 2 numbered from `first` on, in order, and every row
// written after the truncation either in the file or counted in the marker.
void expect_later_rows_kept_or_counted(std::string const& path, std::size_t first, std::size_t written_after) {
  auto const log = test::read_csv_log(path);
  EXPECT_EQ(log.header + "\n", csv_log_header);
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.bad_lines, 0u);
  std::size_t expect = first;
  for (auto const& row : log.rows) {
    ASSERT_EQ(row[0], "2");
    ASSERT_EQ(std::stoul(row[4]), expect) << "rows " << expect << " to " << std::stoul(row[4]) - 1 << " are missing";
    ++expect;
  }
  ASSERT_FALSE(log.metadata.empty());
  EXPECT_EQ(log.last_line, log.metadata.back());
  EXPECT_NE(log.last_line.find("reason=truncated by another program"), std::string::npos) << log.last_line;
  EXPECT_EQ(static_cast<long long>(log.rows.size()) + marker_dropped(log.last_line),
            static_cast<long long>(written_after))
      << log.last_line << "; " << log.rows.size() << " rows";
}

// A writer's fault on a truncated page is caught, but its anonymous page is mapped
// only after the repair (here the helper thread's) mapped the windows from the
// file again. The row was reserved before the truncation was repaired, so it is
// lost and counted; the page must not stay anonymous: the later rows walk over it
// again (the log restarts at the top of the file) and would vanish uncounted.
TEST(CsvLogWriterHostile, AFaultOverlaidAfterTheRepairRemappedLosesNoLaterRow) {
  test::temp_file tmp;
  constexpr std::size_t before = 3000;  // ~320 KB: the later rows pass the faulting page again
  constexpr std::size_t after = 4000;
  auto const r = in_child([&] {
    csv_log_writer w{tmp.path(), &capture_note};
    for (std::size_t i = 0; i < before; ++i) w.write(numbered_row(1, i));
    if (!wait_until_allocated_ahead(w)) return exit_not_reached;
    csv_log_writer::set_repair_hook_for_testing([](csv_log_writer::repair_point p) noexcept {
      using rp = csv_log_writer::repair_point;
      if (p == rp::truncation_seen) wait_stage(1);  // the repair begins once the writer faulted
      if (p == rp::fault_caught && t_held_writer && advance(0, 1)) wait_stage(2);  // ... held until the remap
      if (p == rp::remapped && advance(1, 2)) wait_stage(3);                       // ... then overlaid
      if (p == rp::fault_overlaid && t_held_writer) advance(2, 3);
    });
    truncate_file(tmp.path());
    // The first row after the truncation faults; the helper finds the truncation by itself.
    std::thread{[&] {
      t_held_writer = true;
      w.write(numbered_row(2, 0));
    }}.join();
    csv_log_writer::set_repair_hook_for_testing(nullptr);
    if (g_stuck.load() || g_stage.load() != 3) return exit_not_reached;
    auto const overlaid = pages_overlaid_in_mapping(tmp.path());
    for (std::size_t i = 1; i < after; ++i) w.write(numbered_row(2, i));
    w.close();
    return overlaid == 0 ? 0 : exit_overlaid_base + static_cast<int>(std::clamp(overlaid, -1LL, 100LL));
  });
  ASSERT_TRUE(WIFEXITED(r.status)) << describe(r.status);
  ASSERT_NE(WEXITSTATUS(r.status), exit_not_reached) << "the forced interleaving did not happen";
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << "pages of the log's mapping still anonymous after the repair: "
                                      << WEXITSTATUS(r.status) - exit_overlaid_base;
  // Row 2/0 was reserved before the repair: lost and counted.
  expect_later_rows_kept_or_counted(tmp.path(), 1, after);
}

// As CI once saw it: the repair (the helper's) lets reservations go on before the
// file is whole again; a row reserved right then, at the new top of the file,
// faults, and its anonymous page is mapped only after the repair's remap. Its
// writer must store it again into the file, and the rows after it (the same page)
// must reach the file.
TEST(CsvLogWriterHostile, ARowReservedDuringTheRepairFaultingAfterItsRemapIsStoredAgain) {
  test::temp_file tmp;
  constexpr std::size_t before = 3000;
  constexpr std::size_t after = 3000;
  auto const r = in_child([&] {
    csv_log_writer w{tmp.path(), &capture_note};
    for (std::size_t i = 0; i < before; ++i) w.write(numbered_row(1, i));
    if (!wait_until_allocated_ahead(w)) return exit_not_reached;
    csv_log_writer::set_repair_hook_for_testing([](csv_log_writer::repair_point p) noexcept {
      using rp = csv_log_writer::repair_point;
      if (p == rp::resumed && advance(0, 1)) wait_stage(2);                        // the writer goes now
      if (p == rp::fault_caught && t_held_writer && advance(1, 2)) wait_stage(3);  // held until the remap
      if (p == rp::remapped && advance(2, 3)) wait_stage(4);                       // ... then overlaid
      if (p == rp::fault_overlaid && t_held_writer) advance(3, 4);
    });
    std::thread writer{[&] {
      t_held_writer = true;
      wait_stage(1);
      w.write(numbered_row(2, 0));
    }};
    truncate_file(tmp.path());  // the helper finds it (nobody else writes meanwhile)
    writer.join();
    csv_log_writer::set_repair_hook_for_testing(nullptr);
    if (g_stuck.load() || g_stage.load() != 4) return exit_not_reached;
    auto const overlaid = pages_overlaid_in_mapping(tmp.path());
    for (std::size_t i = 1; i < after; ++i) w.write(numbered_row(2, i));
    w.close();
    return overlaid == 0 ? 0 : exit_overlaid_base + static_cast<int>(std::clamp(overlaid, -1LL, 100LL));
  });
  ASSERT_TRUE(WIFEXITED(r.status)) << describe(r.status);
  ASSERT_NE(WEXITSTATUS(r.status), exit_not_reached) << "the forced interleaving did not happen";
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << "pages of the log's mapping still anonymous after the repair: "
                                      << WEXITSTATUS(r.status) - exit_overlaid_base;
  expect_later_rows_kept_or_counted(tmp.path(), 0, after);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(marker_dropped(log.last_line), 0) << log.last_line;  // row 2/0 was reserved after the restart
}

// fork() while another thread's SIGBUS handler is between counting its overlay
// and mapping it: in the child that thread is gone, and its overlay either mapped
// already or never will be. The child's rows must reach the file (not wait on it).
TEST(CsvLogWriterHostile, AForkWhileAnotherThreadMapsItsPageLeavesTheChildLogging) {
  test::temp_file tmp;
  constexpr std::size_t before = 3000;
  constexpr std::size_t child_rows = 20;
  constexpr std::size_t after = 1000;
  auto const r = in_child([&] {
    csv_log_writer w{tmp.path(), &capture_note};
    for (std::size_t i = 0; i < before; ++i) w.write(numbered_row(1, i));
    if (!wait_until_allocated_ahead(w)) return exit_not_reached;
    csv_log_writer::set_repair_hook_for_testing([](csv_log_writer::repair_point p) noexcept {
      using rp = csv_log_writer::repair_point;
      if (p == rp::truncation_seen) wait_stage(1);  // the repair begins once the writer faulted
      if (p == rp::fault_caught && t_held_writer && advance(0, 1)) wait_stage(3);  // held past the fork
      if (p == rp::remapped) advance(1, 2);  // the helper repaired the truncation meanwhile
    });
    truncate_file(tmp.path());
    std::thread held{[&] {
      t_held_writer = true;
      w.write(numbered_row(2, 0));  // reserved before the repair: lost, counted
    }};
    wait_stage(2);
    auto const dropped = w.dropped_rows();
    pid_t const pid = ::fork();
    if (pid == 0) {
      for (std::size_t i = 0; i < child_rows; ++i) w.write(numbered_row(3, i));
      ::_exit(w.dropped_rows() == dropped ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    g_stage.store(3);
    held.join();
    csv_log_writer::set_repair_hook_for_testing(nullptr);
    if (g_stuck.load()) return exit_not_reached;
    auto const overlaid = pages_overlaid_in_mapping(tmp.path());
    for (std::size_t i = 1; i <= after; ++i) w.write(numbered_row(2, i));
    w.close();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 3;  // the child dropped rows (or died)
    return overlaid == 0 ? 0 : exit_overlaid_base + static_cast<int>(std::clamp(overlaid, -1LL, 100LL));
  });
  ASSERT_TRUE(WIFEXITED(r.status)) << describe(r.status);
  ASSERT_NE(WEXITSTATUS(r.status), exit_not_reached) << "the forced interleaving did not happen";
  EXPECT_NE(WEXITSTATUS(r.status), 3) << "the forked child dropped its rows";
  EXPECT_EQ(WEXITSTATUS(r.status), 0);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.header + "\n", csv_log_header);
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.bad_lines, 0u);
  std::map<std::string, std::size_t> next{{"2", 1}, {"3", 0}};
  for (auto const& row : log.rows) {
    ASSERT_TRUE(next.contains(row[0])) << "writer " << row[0];
    ASSERT_EQ(std::stoul(row[4]), next[row[0]]++) << "writer " << row[0];
  }
  EXPECT_EQ(next["3"], child_rows);
  EXPECT_EQ(next["2"], after + 1);
  EXPECT_EQ(marker_dropped(log.last_line), 1) << log.last_line;  // row 2/0
}

// The helper repairs a truncation and, about to write its note, loses its core
// (a loaded machine) while the program exits: nothing stops the helper at exit,
// so the exit's close must wait for the note, or the program's stderr never says
// what happened to its log (only the close's own "is incomplete" would).
TEST(CsvLogWriterHostile, ARepairsNoteIsWrittenWhenTheProgramExitsRightAfterTheRepair) {
  test::temp_file tmp;
  auto const r = in_child([&] {
    // Never destroyed, as the shim's log: the program exits with it open. In
    // static storage, so that the leak checker sees it reachable.
    alignas(csv_log_writer) static unsigned char storage[sizeof(csv_log_writer)];
    auto* const w = new (storage) csv_log_writer{tmp.path(), &capture_note};
    for (std::size_t i = 0; i < 3000; ++i) w->write(numbered_row(1, i));
    if (!wait_until_allocated_ahead(*w)) return exit_not_reached;
    csv_log_writer::set_repair_hook_for_testing([](csv_log_writer::repair_point p) noexcept {
      if (p == csv_log_writer::repair_point::noting && advance(0, 1)) {
        timespec const preempted{0, 300'000'000};
        ::nanosleep(&preempted, nullptr);
      }
    });
    truncate_file(tmp.path());  // the helper finds it (nobody writes meanwhile)
    wait_stage(1);
    if (g_stuck.load()) return exit_not_reached;
    std::exit(0);  // the atexit hook finishes the log
  });
  ASSERT_TRUE(WIFEXITED(r.status)) << describe(r.status);
  ASSERT_NE(WEXITSTATUS(r.status), exit_not_reached) << "the helper did not repair the truncation";
  // The exit status says no more than that: under ThreadSanitizer it is 66, the
  // helper (never joined at exit, by design) reported as a leaked thread.
  std::string const repaired = "' was truncated by another program while in use (to 0 bytes)";
  std::string const incomplete = "' is incomplete (truncated by another program while in use): 0 rows dropped";
  ASSERT_EQ(r.notes.size(), 2U) << ::testing::PrintToString(r.notes);
  EXPECT_NE(r.notes[0].find(repaired), std::string::npos) << r.notes[0];
  EXPECT_NE(r.notes[1].find(incomplete), std::string::npos) << r.notes[1];
}

// ": > log" just after a growth of the file checked that it was whole, before it
// allocated more: the growth makes the file as long as before (zeros where the
// erased rows were), so its size no longer shows the truncation. The header must
// be written again and a marker added; the rows stored since stay where they are.
std::string g_truncate_path;
std::atomic<bool> g_truncate_armed{false};
std::atomic<bool> g_truncated{false};

TEST(CsvLogWriterHostile, TruncationWhileTheFileGrowsIsRepairedToo) {
  test::temp_file tmp;
  constexpr std::size_t most_before = 500000;  // ~55 MB: the file grows long before (by 64 MiB at most)
  constexpr std::size_t after = 3000;
  auto const r = in_child([&] {
    csv_log_writer w{tmp.path(), &capture_note};
    g_truncate_path = tmp.path();
    g_truncate_armed.store(true);
    csv_log_writer::set_repair_hook_for_testing([](csv_log_writer::repair_point p) noexcept {
      if (p == csv_log_writer::repair_point::growing && g_truncate_armed.exchange(false)) {
        int const fd = ::open(g_truncate_path.c_str(), O_WRONLY | O_TRUNC);
        if (fd >= 0) ::close(fd);
        g_truncated.store(true);
      }
    });
    // Writer 1 until the file was cut in a growth (the helper grows it ahead, or
    // this thread when it reaches the end of what is allocated), then writer 2.
    for (std::size_t i = 0; i < most_before && !g_truncated.load(); ++i) w.write(numbered_row(1, i));
    for (std::size_t i = 0; i < after; ++i) w.write(numbered_row(2, i));
    csv_log_writer::set_repair_hook_for_testing(nullptr);
    bool const truncated = g_truncated.load();
    w.close();
    return truncated ? 0 : exit_not_reached;
  });
  ASSERT_TRUE(WIFEXITED(r.status)) << describe(r.status);
  ASSERT_NE(WEXITSTATUS(r.status), exit_not_reached) << "the file did not grow while the rows were written";
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.header + "\n", csv_log_header);
  // Writer 1's rows since the truncation (those before it are NULs now; the helper
  // may have grown the file before the first row), then all of writer 2's, written
  // after it. A row of writer 1 being copied the moment the file was cut, and
  // still being copied once the growth had lengthened it, may be left without its
  // start (documented): one malformed line, that row missing.
  std::map<std::string, std::size_t> next;
  std::size_t missing = 0;
  for (auto const& row : log.rows) {
    ASSERT_TRUE(row[0] == "1" || row[0] == "2") << row[0];
    ASSERT_TRUE(row[0] == "2" || !next.contains("2")) << "writer 1 after writer 2";
    auto const i = std::stoul(row[4]);
    next.emplace(row[0], row[0] == "1" ? i : 0);
    ASSERT_GE(i, next[row[0]]) << "writer " << row[0];
    missing += i - next[row[0]];
    next[row[0]] = i + 1;
  }
  EXPECT_EQ(next["2"], after);
  missing += after - next["2"];
  EXPECT_LE(log.bad_lines, 1u);
  EXPECT_LE(missing, log.bad_lines);  // (the cut row can be the first of writer 1's that are left)
  ASSERT_FALSE(log.metadata.empty());
  EXPECT_EQ(log.last_line, log.metadata.back());
  EXPECT_NE(log.last_line.find("reason=truncated by another program"), std::string::npos) << log.last_line;
  EXPECT_EQ(marker_dropped(log.last_line), 0) << log.last_line;
  int truncation_notes = 0;
  for (auto const& n : r.notes) truncation_notes += n.find("was truncated by another program") != std::string::npos;
  EXPECT_EQ(truncation_notes, 1);
}

// RLIMIT_FSIZE stands in for a full disk (fallocate fails as on a full file
// system; the writer never exceeds the limit, so no SIGXFSZ is raised).
TEST(CsvLogWriterHostile, DiskFullDropsCountsAndMarksTheLogWithoutNuls) {
  test::temp_file tmp;
  constexpr rlim_t limit = 64 << 10;
  constexpr std::size_t rows = 5000;  // ~650 KB of rows
  auto const r = in_child([&] {
    rlimit lim{limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 2;
    csv_log_writer w{tmp.path(), &capture_note};
    for (std::size_t i = 0; i < rows; ++i) w.write(numbered_row(1, i));
    auto const dropped = w.dropped_rows();
    w.close();
    return dropped > 0 && dropped < rows ? 0 : 3;
  });
  ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << describe(r.status);
  struct stat st {};
  ASSERT_EQ(::stat(tmp.path().c_str(), &st), 0);
  EXPECT_LE(static_cast<rlim_t>(st.st_size), limit);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.bad_lines, 0u);
  ASSERT_GT(log.rows.size(), 300u);  // the file was used up to its limit
  for (std::size_t i = 0; i < log.rows.size(); ++i) EXPECT_EQ(log.rows[i][4], std::to_string(i));
  EXPECT_EQ(log.last_line,
            "#gpumem incomplete,dropped_rows=" + std::to_string(rows - log.rows.size()) + ",reason=File too large");
  ASSERT_EQ(r.notes.size(), 2u);
  EXPECT_NE(r.notes[0].find("cannot grow (File too large): rows are dropped from now on"), std::string::npos)
      << r.notes[0];
  EXPECT_NE(r.notes[1].find("is incomplete (File too large): " + std::to_string(rows - log.rows.size()) +
                            " rows dropped; its last line says so"),
            std::string::npos)
      << r.notes[1];
}

// The marker written when rows start being dropped is in the file even if the
// process is killed afterwards.
TEST(CsvLogWriterHostile, MarkerSurvivesAKillAfterRowsWereDropped) {
  test::temp_file tmp;
  constexpr rlim_t limit = 32 << 10;
  auto const r = in_child([&] {
    rlimit lim{limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 2;
    csv_log_writer w{tmp.path(), &capture_note};
    for (std::size_t i = 0; i < 2000; ++i) w.write(numbered_row(1, i));
    ::raise(SIGKILL);
    return 3;
  });
  ASSERT_TRUE(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL) << describe(r.status);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.bad_lines, 0u);
  ASSERT_EQ(log.metadata.size(), 1u);
  EXPECT_EQ(log.last_line, log.metadata[0]);
  EXPECT_GE(marker_dropped(log.last_line), 1);
}

// The guard acts only on the log's own pages: any other SIGBUS reaches the
// handler the program installed, or kills as before.
sigjmp_buf g_jump;
volatile sig_atomic_t g_own_handler_calls = 0;
void own_sigbus_handler(int) {
  g_own_handler_calls = g_own_handler_calls + 1;
  siglongjmp(g_jump, 1);
}

// Touches a page of a file mapping past the end of the file: a real SIGBUS.
void touch_truncated_mapping(std::string const& path) {
  int const fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ::ftruncate(fd, 8192) != 0) ::_exit(20);
  auto* p = static_cast<volatile char*>(::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (p == MAP_FAILED || ::ftruncate(fd, 0) != 0) ::_exit(21);
  p[4096] = 1;
}

TEST(CsvLogWriterHostile, OtherSigbusStillReachesTheProgramsHandler) {
  test::temp_file tmp;
  auto const r = in_child([&] {
    struct sigaction sa {};
    sa.sa_handler = own_sigbus_handler;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
    csv_log_writer w{tmp.path(), &capture_note};  // installs the guard over the program's handler
    w.write(example_row());
    if (sigsetjmp(g_jump, 1) == 0) touch_truncated_mapping(tmp.dir() + "/other");
    if (sigsetjmp(g_jump, 1) == 0) ::raise(SIGBUS);
    w.write(example_row());
    w.close();
    return g_own_handler_calls == 2 ? 0 : 10 + g_own_handler_calls;
  });
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << describe(r.status);
  EXPECT_EQ(test::read_csv_log(tmp.path()).rows.size(), 2u);
}

TEST(CsvLogWriterHostile, OtherSigbusStillKillsByDefault) {
  test::temp_file tmp;
  auto const r = in_child([&] {
    csv_log_writer w{tmp.path(), &capture_note};
    touch_truncated_mapping(tmp.dir() + "/other");
    return 0;
  });
  EXPECT_TRUE(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGBUS) << describe(r.status);
  auto const sent = in_child([&] {
    csv_log_writer w{tmp.path(), &capture_note};
    ::raise(SIGBUS);
    return 0;
  });
  EXPECT_TRUE(WIFSIGNALED(sent.status) && WTERMSIG(sent.status) == SIGBUS) << describe(sent.status);
}

// A handler set after the guard through sigbus_sigaction (what the shim's sigaction
// and signal hooks call): the guard stays in front, the handler gets every other
// SIGBUS with its own flags, and the program reads back what it set.
TEST(CsvLogWriterHostile, AHandlerSetAfterTheGuardIsChainedToAndReadsBackAsSet) {
  test::temp_file tmp;
  auto const r = in_child([&] {
    csv_log_writer w{tmp.path(), &capture_note};  // installs the guard
    w.write(example_row());
    struct sigaction act {};
    act.sa_handler = own_sigbus_handler;
    act.sa_flags = SA_RESETHAND;  // one-shot: spent after the first delivery
    sigemptyset(&act.sa_mask);
    struct sigaction old {};
    if (detail::sigbus_sigaction(&act, &old, &::sigaction) != 0) return 30;
    if (old.sa_handler != SIG_DFL) return 31;  // what the program had before the guard
    struct sigaction now {};
    if (detail::sigbus_sigaction(nullptr, &now, &::sigaction) != 0 || now.sa_handler != own_sigbus_handler) {
      return 32;
    }
    if (sigsetjmp(g_jump, 1) == 0) touch_truncated_mapping(tmp.dir() + "/other");
    if (g_own_handler_calls != 1) return 33;
    if (detail::sigbus_sigaction(nullptr, &now, &::sigaction) != 0 || now.sa_handler != SIG_DFL) return 34;
    // The log's own faults never reach it: truncate the log and write on.
    if (detail::sigbus_sigaction(&act, nullptr, &::sigaction) != 0) return 35;
    if (!wait_until_allocated_ahead(w)) return 37;  // (a truncation during a growth is a test of its own)
    truncate_file(tmp.path());
    for (int i = 0; i < 100; ++i) w.write(example_row());
    w.close();
    return g_own_handler_calls == 1 && w.truncations() == 1 ? 0 : 36;
  });
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << describe(r.status);
}

// A thread that blocks SIGBUS would be killed by the kernel at its first store into
// a page the truncation took: the writer lets SIGBUS through around its stores and
// leaves the thread's mask as it was.
TEST(CsvLogWriterHostile, AThreadThatBlocksSigbusSurvivesATruncation) {
  test::temp_file tmp;
  auto const r = in_child([&] {
    // A thread of its own: it blocks SIGBUS before its first row, as a server's
    // worker does. (The forked main thread has logged rows in earlier tests, and a
    // thread's mask is read once: a program linking gpumem must block first.)
    int result = 0;
    std::thread{[&] {
      sigset_t bus;
      sigemptyset(&bus);
      sigaddset(&bus, SIGBUS);
      if (::pthread_sigmask(SIG_BLOCK, &bus, nullptr) != 0) {
        result = 40;
        return;
      }
      csv_log_writer w{tmp.path(), &capture_note};
      for (std::size_t i = 0; i < 2000; ++i) w.write(numbered_row(1, i));
      if (!wait_until_allocated_ahead(w)) {
        result = 43;
        return;
      }
      truncate_file(tmp.path());
      for (std::size_t i = 0; i < 2000; ++i) w.write(numbered_row(2, i));
      w.close();
      sigset_t now;
      if (::pthread_sigmask(SIG_BLOCK, nullptr, &now) != 0 || sigismember(&now, SIGBUS) != 1) {
        result = 41;
        return;
      }
      result = w.truncations() == 1 ? 0 : 42;
    }}.join();
    return result;
  });
  ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << describe(r.status);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_GE(log.rows.size(), 1999u);
}

TEST(CsvLogWriter, NotARegularFileIsRefusedNamingWhatItIs) {
  test::temp_file tmp;
  for (auto const& [path, what] : {std::pair<std::string, std::string>{tmp.dir(), "Is a directory"},
                                   {"/dev/full", "it is a character device, not a regular file"}}) {
    try {
      csv_log_writer w{path, &capture_note};
      ADD_FAILURE() << "expected gpumem::logic_error for " << path;
    } catch (logic_error const& e) {
      EXPECT_EQ(std::string{e.what()}, "gpumem: cannot write the allocation log '" + path + "': " + what);
    }
  }
}

TEST(CsvLogWriterCrash, RowsSurviveSigkill) { expect_rows_survive(SIGKILL, 1000); }
TEST(CsvLogWriterCrash, RowsSurviveSigsegv) { expect_rows_survive(SIGSEGV, 777); }
TEST(CsvLogWriterCrash, RowsSurviveAbort) { expect_rows_survive(SIGABRT, 12345); }

}  // namespace
}  // namespace gpumem
