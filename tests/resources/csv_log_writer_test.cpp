// csv_log_writer and format_row: exact row format, concurrent appends, open
// errors, durability when the writing process dies (with its journal recovered),
// and what others may do to the file: several processes on one path, truncation
// and renaming under the writer, a full disk. The writer touches no signal.

#include <gpumem/csv_log_writer.hpp>
#include <gpumem/error.hpp>
#include <gpumem/row_journal.hpp>

#include <support/csv_log_reader.hpp>
#include <support/temp_file.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sched.h>
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
                 .pointer = std::uintptr_t{0x7f3a40000000},
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
  row.pointer = 0;
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
    row.pointer = static_cast<std::uintptr_t>(v);
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
  row.pointer = UINTPTR_MAX;
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
  char line[max_marker_bytes];
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

TEST(CsvLogWriter, WritesHeaderAndRowsAndRemovesTheJournalOnClose) {
  test::temp_file tmp;
  csv_log_writer w{tmp.path()};
  EXPECT_EQ(w.path(), tmp.path());
  ASSERT_NE(w.journal(), nullptr) << "rows are queued in a journal by default";
  EXPECT_TRUE(std::filesystem::exists(tmp.path() + ".journal"));
  for (int i = 0; i < 3; ++i) {
    auto row = example_row();
    row.size = static_cast<std::size_t>(i);
    w.write(row);
  }
  w.flush();
  // Sizes 0..2 are six digits shorter than the example's 1048576.
  auto const expected_bytes = csv_log_header.size() + 3 * (format(example_row()).size() - 6);
  w.close();
  w.close();               // idempotent
  w.write(example_row());  // dropped after close
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + ".journal"));

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

TEST(CsvLogWriter, ConcurrentWritersLoseNothing) {
  test::temp_file tmp;
  constexpr int threads = 4;
  constexpr int per_thread = 40000;  // more rows than the journal's ring holds
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
    w.close();  // a child's close must not end the parent's log
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
  EXPECT_TRUE(log.metadata.empty());
}

TEST(CsvLogWriter, OrderlyExitFormatsEveryQueuedRowAndRemovesTheJournal) {
  test::temp_file tmp;
  pid_t const child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    row_journal::hold_rows_for_testing(true);  // only the exit hook formats them
    auto* w = new csv_log_writer{tmp.path()};  // never destroyed
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
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + ".journal"));
}

// The child logs exactly `rows` rows, then dies by `how`: every row is in the log
// once the journal it left is recovered (as gpumem-report and gpumem-replay do).
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
  journal_recovery const rec = recover_journal(tmp.path());
  EXPECT_TRUE(rec.error.empty()) << rec.error;
  EXPECT_EQ(rec.lost, 0u);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.header + "\n", csv_log_header);
  EXPECT_EQ(log.bad_lines, 0u);
  EXPECT_EQ(log.nul_bytes, 0u);
  ASSERT_EQ(log.rows.size(), static_cast<std::size_t>(rows));
  for (int i = 0; i < rows; ++i) EXPECT_EQ(log.rows[static_cast<std::size_t>(i)][4], std::to_string(i));
}

TEST(CsvLogWriterCrash, RowsSurviveSigkill) { expect_rows_survive(SIGKILL, 1000); }
TEST(CsvLogWriterCrash, RowsSurviveSigsegv) { expect_rows_survive(SIGSEGV, 777); }
TEST(CsvLogWriterCrash, RowsSurviveAbort) { expect_rows_survive(SIGABRT, 12345); }
TEST(CsvLogWriterCrash, RowsSurviveAKillWithEverythingStillQueued) {
  row_journal::hold_rows_for_testing(true);
  expect_rows_survive(SIGKILL, 5000);
  row_journal::hold_rows_for_testing(false);
}

// ---------------------------------------------------------------------------
// What others do to the file. Each case that could kill a process runs in a
// forked child, so a regression shows as a failed test, not a dead test binary.

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

// ": > log" (or logrotate's copytruncate) while the writer runs: the process
// goes on; the log restarts with its header and a marker, the rows written after
// the truncation are all there, and it is said once.
TEST(CsvLogWriterHostile, TruncationKeepsTheProgramAndEveryLaterRow) {
  test::temp_file tmp;
  auto const r = in_child([&] {
    csv_log_writer w{tmp.path(), &capture_note};
    for (std::size_t i = 0; i < 3000; ++i) w.write(numbered_row(1, i));
    w.flush();
    truncate_file(tmp.path());
    for (std::size_t i = 0; i < 3000; ++i) w.write(numbered_row(2, i));
    w.close();
    return w.truncations() == 1 && w.dropped_rows() == 0 ? 0 : 3;
  });
  ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << describe(r.status);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.header + "\n", csv_log_header);
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.bad_lines, 0u);
  ASSERT_EQ(log.rows.size(), 3000u);
  for (std::size_t i = 0; i < log.rows.size(); ++i) {
    EXPECT_EQ(log.rows[i][0], "2");
    EXPECT_EQ(log.rows[i][4], std::to_string(i));
  }
  EXPECT_EQ(log.last_line, log.metadata.back());
  EXPECT_EQ(marker_dropped(log.last_line), 0);
  EXPECT_NE(log.last_line.find("reason=truncated by another program while in use"), std::string::npos);
  ASSERT_EQ(r.notes.size(), 2u);
  EXPECT_NE(r.notes[0].find("was truncated by another program while in use (to 0 bytes): its earlier rows are gone"),
            std::string::npos)
      << r.notes[0];
  EXPECT_NE(r.notes[1].find("is incomplete (truncated by another program while in use)"), std::string::npos)
      << r.notes[1];
}

// Emptied while rows are being written, at a different moment each round: a cut
// that falls between the writer's reading of the size and its write must not
// leave the rows at the top of the file without the header. After each round
// (nothing being written then) the file is empty or starts with the header.
TEST(CsvLogWriterHostile, ATruncationRacingTheWritesStillRestartsWithTheHeader) {
  test::temp_file tmp;
  auto const r = in_child([&] {
    constexpr int rounds = 150;
    csv_log_writer w{tmp.path(), &capture_note};
    int headless = 0;
    for (int round = 0; round < rounds; ++round) {
      std::atomic<bool> cut{false};
      std::thread writer{[&] {
        // Rows until the cut and 80 after it; a flush every 20 rows adds direct
        // appends to the helper's batches.
        for (std::size_t i = 0, after = 0; !cut.load() || after++ < 80; ++i) {
          w.write(numbered_row(1, i));
          if (i % 20 == 19) w.flush();
        }
        w.flush();
      }};
      std::this_thread::sleep_for(std::chrono::microseconds{(round * 37) % 300});
      truncate_file(tmp.path());
      cut = true;
      writer.join();
      std::ifstream in{tmp.path(), std::ios::binary};
      std::string head(csv_log_header.size(), '\0');
      in.read(head.data(), static_cast<std::streamsize>(head.size()));
      headless += head != csv_log_header;
    }
    w.close();
    std::fprintf(stderr, "rounds without the header after the cut: %d of %d\n", headless, rounds);
    return headless == 0 ? 0 : 3;
  });
  ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << describe(r.status);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.header + "\n", csv_log_header);
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.bad_lines, 0u);
}

// Emptied, then cut inside a row, twice over: the cut row is ended (a malformed
// line readers skip) and every later row is whole.
TEST(CsvLogWriterHostile, RepeatedTruncationsAndACutMidRow) {
  test::temp_file tmp;
  auto const r = in_child([&] {
    csv_log_writer w{tmp.path(), &capture_note};
    std::size_t n = 0;
    for (int round = 0; round < 4; ++round) {
      for (int i = 0; i < 200; ++i) w.write(numbered_row(1, n++));
      w.flush();
      struct stat st {};
      if (::stat(tmp.path().c_str(), &st) != 0) return 2;
      truncate_file(tmp.path(), round % 2 == 0 ? 0 : st.st_size - 40);  // odd: inside the last row
    }
    for (int i = 0; i < 200; ++i) w.write(numbered_row(1, n++));
    w.close();
    return w.truncations() == 4 ? 0 : 3;
  });
  ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << describe(r.status);
  auto const log = test::read_csv_log(tmp.path());
  EXPECT_EQ(log.header + "\n", csv_log_header);
  EXPECT_EQ(log.nul_bytes, 0u);
  EXPECT_EQ(log.bad_lines, 1u);  // row 799, which the last cut went through
  ASSERT_EQ(log.rows.size(), 399u);
  EXPECT_EQ(log.rows.front()[4], "600");
  EXPECT_EQ(log.rows.back()[4], "999");
}

// Renamed (logrotate without copytruncate) or deleted: rows keep going to the
// open file, under its new name.
TEST(CsvLogWriterHostile, RenamedLogKeepsItsRows) {
  test::temp_file tmp;
  std::string const moved = tmp.path() + ".1";
  csv_log_writer w{tmp.path(), &capture_note};
  for (std::size_t i = 0; i < 100; ++i) w.write(numbered_row(1, i));
  w.flush();
  ASSERT_EQ(std::rename(tmp.path().c_str(), moved.c_str()), 0);
  for (std::size_t i = 100; i < 200; ++i) w.write(numbered_row(1, i));
  w.close();
  EXPECT_FALSE(std::filesystem::exists(tmp.path()));
  auto const log = test::read_csv_log(moved);
  EXPECT_EQ(log.rows.size(), 200u);
  EXPECT_TRUE(log.metadata.empty());
  std::remove(moved.c_str());
}

// A full disk, as RLIMIT_FSIZE (the same failure, no mount needed): rows that do
// not fit are dropped and counted, never a torn row, never SIGXFSZ.
TEST(CsvLogWriterHostile, DiskFullDropsCountsAndMarksTheLog) {
  test::temp_file tmp;
  constexpr rlim_t limit = 64 << 10;
  constexpr std::size_t rows = 5000;  // ~650 KB of rows
  auto const r = in_child([&] {
    csv_log_writer w{tmp.path(), &capture_note};  // its journal allocated before the limit
    rlimit lim{limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 2;
    for (std::size_t i = 0; i < rows; ++i) w.write(numbered_row(1, i));
    w.flush();
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
    csv_log_writer w{tmp.path(), &capture_note};
    rlimit lim{limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 2;
    for (std::size_t i = 0; i < 2000; ++i) w.write(numbered_row(1, i));
    w.flush();
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

// Every signal's action and the thread's mask, as the program set them.
struct signal_state {
  std::vector<std::pair<void*, int>> actions;  // handler, flags
  sigset_t mask{};
  bool operator==(signal_state const& o) const {
    return actions == o.actions && std::memcmp(&mask, &o.mask, sizeof mask) == 0;
  }
};
signal_state signals_now() {
  signal_state s;
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction a {};
    ::sigaction(sig, nullptr, &a);
    s.actions.emplace_back(reinterpret_cast<void*>(a.sa_handler), a.sa_flags);
  }
  ::pthread_sigmask(SIG_BLOCK, nullptr, &s.mask);
  return s;
}

// The log installs no handler and blocks nothing: opening, writing, a truncation
// and closing leave every signal as the program set it.
TEST(CsvLogWriterHostile, TheLogTouchesNoSignal) {
  test::temp_file tmp;
  signal_state const before = signals_now();
  {
    csv_log_writer w{tmp.path(), &capture_note};
    for (std::size_t i = 0; i < 1000; ++i) w.write(numbered_row(1, i));
    w.flush();
    EXPECT_TRUE(signals_now() == before);
    truncate_file(tmp.path());
    for (std::size_t i = 0; i < 1000; ++i) w.write(numbered_row(1, i));
    w.flush();
  }
  EXPECT_TRUE(signals_now() == before);
  (void)take_notes();
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

}  // namespace
}  // namespace gpumem
