// csv_log_writer and format_row: exact row format, concurrent appends, growth,
// open errors, and durability when the writing process dies.

#include <gpumem/csv_log_writer.hpp>
#include <gpumem/error.hpp>

#include <support/csv_log_reader.hpp>
#include <support/temp_file.hpp>

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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
                 .result = nullptr};
}

TEST(FormatRow, MatchesTheDocumentedExample) {
  EXPECT_EQ(format(example_row()),
            "140245,14:02:07.123456,allocate,0x7f3a40000000,1048576,0x1,0,cudaMalloc,1763733727123456789,412,"
            "CUDA_SUCCESS\n");
}

TEST(FormatRow, NullPointerNullStreamFailureAndDefaults) {
  auto row = example_row();
  row.action = log_action::allocate_failure;
  row.pointer = nullptr;
  row.stream = 0;
  row.device = -1;
  row.entry = nullptr;
  row.result = "CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_EQ(format(row),
            "140245,14:02:07.123456,allocate failure,(nil),1048576,0,-1,allocate,1763733727123456789,412,"
            "CUDA_ERROR_OUT_OF_MEMORY\n");
  row.action = log_action::free;
  row.stream = 0x2;
  row.size = 0;
  EXPECT_EQ(format(row),
            "140245,14:02:07.123456,free,(nil),0,0x2,-1,free,1763733727123456789,412,CUDA_ERROR_OUT_OF_MEMORY\n");
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
      "CUDA_SUCCESS\n";
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(format(a), line_a);
    EXPECT_EQ(format(b),
              "7,15:02:08.123457,allocate,0x7f3a40000000,1048576,0x1,0,cudaMalloc,1763733728123457789,412,"
              "CUDA_SUCCESS\n");
    EXPECT_EQ(split_csv_field(format(c), 1), "13:02:07.123456");
  }
  auto early = a;
  early.time_ns = 999'999'999;  // below one second: TimeNs has no leading zeros
  EXPECT_EQ(split_csv_field(format(early), 8), "999999999");
  early.time_ns = 1'000'000'007;  // one second: zero-padded fraction
  EXPECT_EQ(split_csv_field(format(early), 8), "1000000007");
  EXPECT_EQ(format(a), line_a);
}

TEST(FormatRow, NamesAreSanitizedAndCut) {
  auto row = example_row();
  row.entry = "evil,entry\n\"x\"";
  row.result = "";
  auto const line = format(row);
  auto const f = test::split_csv(line.substr(0, line.size() - 1));
  ASSERT_EQ(f.size(), 11u);
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
  auto const worst = format(row);
  auto const g = test::split_csv(worst.substr(0, worst.size() - 1));
  ASSERT_EQ(g.size(), 11u);
  EXPECT_EQ(g[0], "18446744073709551615");
  EXPECT_EQ(g[3], "0xffffffffffffffff");
  EXPECT_EQ(g[6], "-2147483648");
  EXPECT_EQ(g[7], std::string(64, 'a'));
  EXPECT_EQ(g[8], "-9223372036854775808");
  EXPECT_EQ(g[10], std::string(64, 'a'));
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
  w.close();  // idempotent
  w.write(example_row());  // dropped after close
  EXPECT_EQ(w.bytes_written(), expected_bytes);

  struct stat st{};
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

TEST(CsvLogWriterCrash, RowsSurviveSigkill) { expect_rows_survive(SIGKILL, 1000); }
TEST(CsvLogWriterCrash, RowsSurviveSigsegv) { expect_rows_survive(SIGSEGV, 777); }
TEST(CsvLogWriterCrash, RowsSurviveAbort) { expect_rows_survive(SIGABRT, 12345); }

}  // namespace
}  // namespace gpumem
