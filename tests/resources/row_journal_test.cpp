// row_journal: queued rows reach the log once each, in order, from many threads;
// a full ring is drained by its callers; a crash leaves the queued rows for
// recover_journal, which completes the log exactly (no row twice, none lost
// unless its writer died storing it, and then counted).
#include <gpumem/csv_log_writer.hpp>
#include <gpumem/detail/log_clock.hpp>
#include <gpumem/row_journal.hpp>

#include <support/csv_log_reader.hpp>
#include <support/temp_file.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

// Byte offsets in the journal file (row_journal.cpp's file_header): tests that
// play a crash at a chosen moment write these fields.
constexpr off_t header_bytes = 20480;
constexpr off_t batch_first_at = 72;
constexpr off_t batch_bytes_at = 80;
constexpr off_t batch_offset_at = 88;
constexpr off_t batch_count_at = 96;

// Row `seq` of thread `thread`: Size carries the sequence number, so order and
// uniqueness can be checked from the log.
log_row make_row(std::uint64_t thread, std::uint64_t seq) {
  return log_row{.thread_id = thread,
                 .time_ns = 1'700'000'000'000'000'000 + static_cast<std::int64_t>(seq) * 1000,
                 .action = seq % 2 == 0 ? log_action::allocate : log_action::free,
                 .pointer = 0x7f0000000000ULL + seq * 256,
                 .size = seq,
                 .stream = seq % 3,
                 .device = static_cast<int>(seq % 4),
                 .entry = seq % 2 == 0 ? "cudaMalloc" : "cuMemFree_v2",
                 .duration_ns = seq % 1000,
                 .result = seq % 7 == 6 ? "CUDA_ERROR_OUT_OF_MEMORY" : nullptr,
                 .reserved = static_cast<std::int64_t>(seq * 2),
                 .stack = seq % 5 == 0 ? 0 : seq};
}

// Every row of the log, by thread: the Size column of each in file order.
std::map<std::string, std::vector<std::uint64_t>> sizes_by_thread(csv_log_contents const& log) {
  std::map<std::string, std::vector<std::uint64_t>> out;
  for (auto const& row : log.rows) out[row[0]].push_back(std::stoull(row[4]));
  return out;
}

void expect_rows(csv_log_contents const& log, std::uint64_t threads, std::uint64_t per_thread) {
  EXPECT_EQ(log.bad_lines, 0U);
  EXPECT_EQ(log.nul_bytes, 0U);
  ASSERT_EQ(log.rows.size(), threads * per_thread);
  auto const by_thread = sizes_by_thread(log);
  ASSERT_EQ(by_thread.size(), threads);
  for (auto const& [thread, sizes] : by_thread) {
    ASSERT_EQ(sizes.size(), per_thread) << "thread " << thread;
    for (std::uint64_t i = 0; i < per_thread; ++i) ASSERT_EQ(sizes[i], i) << "thread " << thread << " row " << i;
  }
  // The fields survive the record: one row checked whole.
  auto const& r = log.rows.front();
  std::uint64_t const seq = std::stoull(r[4]);
  log_row const want = make_row(std::stoull(r[0]), seq);
  EXPECT_EQ(r[7], want.entry);
  EXPECT_EQ(r[10], want.result != nullptr ? want.result : "CUDA_SUCCESS");
  EXPECT_EQ(r[11], std::to_string(want.reserved));
}

std::string read_file(std::string const& path) {
  std::ifstream in{path, std::ios::binary};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool exists(std::string const& path) { return ::access(path.c_str(), F_OK) == 0; }

TEST(RowJournal, RowsFromManyThreadsReachTheLogOnceEachInOrder) {
  temp_file f;
  constexpr std::uint64_t threads = 8;
  constexpr std::uint64_t per_thread = 20000;  // 160000 rows: more than the ring holds
  {
    csv_log_writer log{f.path()};
    row_journal& journal = *log.journal();
    EXPECT_TRUE(exists(f.path() + ".journal"));
    std::vector<std::thread> ts;
    for (std::uint64_t t = 0; t < threads; ++t) {
      ts.emplace_back([&journal, t] {
        for (std::uint64_t i = 0; i < per_thread; ++i) ASSERT_TRUE(journal.push(make_row(1000 + t, i)));
      });
    }
    for (auto& t : ts) t.join();
    journal.close();
    EXPECT_EQ(journal.rows_formatted(), threads * per_thread) << "closed: nothing is left queued";
    EXPECT_FALSE(journal.push(make_row(1, 0))) << "a closed journal queues nothing";
    EXPECT_FALSE(exists(f.path() + ".journal")) << "an orderly close removes the journal";
    EXPECT_EQ(log.dropped_rows(), 0U);
  }
  expect_rows(read_csv_log(f.path()), threads, per_thread);
}

TEST(RowJournal, CallersDrainAFullRingThemselves) {
  temp_file f;
  constexpr std::uint64_t threads = 4;
  constexpr std::uint64_t per_thread = row_journal::ring_slots;  // 4 rings' worth
  {
    row_journal::hold_rows_for_testing(true);  // no helper: only full-ring callers format
    csv_log_writer log{f.path()};
    row_journal::hold_rows_for_testing(false);
    row_journal& journal = *log.journal();
    std::vector<std::thread> ts;
    for (std::uint64_t t = 0; t < threads; ++t) {
      ts.emplace_back([&journal, t] {
        for (std::uint64_t i = 0; i < per_thread; ++i) ASSERT_TRUE(journal.push(make_row(2000 + t, i)));
      });
    }
    for (auto& t : ts) t.join();
    EXPECT_GE(journal.rows_formatted(), (threads - 1) * row_journal::ring_slots)
        << "all but the last ring's worth were formatted by callers that found the ring full";
    journal.close();
  }
  expect_rows(read_csv_log(f.path()), threads, per_thread);
}

TEST(RowJournal, AForkedChildWritesDirectly) {
  temp_file f;
  {
    csv_log_writer log{f.path()};
    row_journal& journal = *log.journal();
    ASSERT_TRUE(journal.push(make_row(7, 0)));
    pid_t const child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // The ring belongs to the parent, whose helper the child does not have.
      bool const queued = journal.push(make_row(8, 0));
      if (!queued) log.write(make_row(8, 0));
      ::_exit(queued ? 1 : 0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child's push must answer false";
    journal.close();
  }
  auto const log = read_csv_log(f.path());
  ASSERT_EQ(log.rows.size(), 2U);
  EXPECT_EQ(sizes_by_thread(log).size(), 2U);
}

// A child opens a log whose journal holds its rows (no helper), pushes
// `rows` rows and waits; `play_crash` runs while it is alive, then it is killed.
// in_ticks: the rows are queued as the shim queues them, as two counter values
// (the row's duration_ns ticks apart), for the formatter to convert.
template <class WhileAlive>
void crash_with_queued_rows(std::string const& path, std::uint64_t rows, WhileAlive while_alive,
                            bool in_ticks = false) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t const child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    try {
      row_journal::hold_rows_for_testing(true);
      auto* log = new csv_log_writer{path};
      auto* journal = log->journal();
      if (journal == nullptr) ::_exit(4);
      for (std::uint64_t i = 0; i < rows; ++i) {
        log_row const row = make_row(3000, i);
        std::uint64_t const start = detail::log_ticks();
        if (!(in_ticks ? journal->push(row, start, start + row.duration_ns) : journal->push(row))) ::_exit(2);
      }
    } catch (...) { ::_exit(3); }
    char const c = 'r';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the child could not queue its rows";
  ::close(ready[0]);
  while_alive();
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
}

TEST(RowJournal, RecoveryAppendsWhatADeadWriterLeftQueued) {
  temp_file f;
  crash_with_queued_rows(f.path(), 1000, [&] {
    journal_recovery const early = recover_journal(f.path());
    EXPECT_TRUE(early.found);
    EXPECT_TRUE(early.writer_alive) << "the writer still holds the log: recovery must wait";
    EXPECT_EQ(early.rows, 0U);
  });
  EXPECT_EQ(read_csv_log(f.path()).rows.size(), 0U) << "the dead writer's rows were all still queued";
  journal_recovery const r = recover_journal(f.path());
  EXPECT_TRUE(r.found);
  EXPECT_FALSE(r.writer_alive);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.rows, 1000U);
  EXPECT_EQ(r.lost, 0U);
  EXPECT_FALSE(exists(f.path() + ".journal"));
  expect_rows(read_csv_log(f.path()), 1, 1000);

  journal_recovery const again = recover_journal(f.path());
  EXPECT_FALSE(again.found) << "nothing left to recover";
}

TEST(RowJournal, ARecordItsWriterNeverFinishedIsCountedLost) {
  temp_file f;
  crash_with_queued_rows(f.path(), 100, [] {});
  // Record 50's writer died between reserving it and storing its stamp.
  int const fd = ::open((f.path() + ".journal").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  std::uint64_t const zero = 0;
  ASSERT_EQ(::pwrite(fd, &zero, sizeof zero, header_bytes + 50 * 64), static_cast<ssize_t>(sizeof zero));
  ::close(fd);

  journal_recovery const r = recover_journal(f.path());
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.rows, 99U);
  EXPECT_EQ(r.lost, 1U);
  auto const log = read_csv_log(f.path());
  EXPECT_EQ(log.rows.size(), 99U);
  EXPECT_EQ(log.bad_lines, 0U);
  EXPECT_EQ(log.last_line.rfind(std::string{csv_log_incomplete_prefix} + "dropped_rows=1,", 0), 0U) << log.last_line;
}

class RowJournalCrash : public ::testing::TestWithParam<bool> {};  // rows queued in ticks or in ns
INSTANTIATE_TEST_SUITE_P(RowJournal, RowJournalCrash, ::testing::Values(false, true),
                         [](auto const& test_info) { return test_info.param ? "ticks" : "ns"; });

TEST_P(RowJournalCrash, ABatchCutShortByTheCrashIsCompletedInPlace) {
  temp_file a;
  temp_file b;
  crash_with_queued_rows(
      a.path(), 100, [] {}, GetParam());
  // The same crash recovered untouched: the expected log.
  std::filesystem::copy_file(a.path(), b.path());
  std::filesystem::copy_file(a.path() + ".journal", b.path() + ".journal");
  ASSERT_EQ(recover_journal(b.path()).rows, 100U);
  std::string const expected = read_file(b.path());

  // Play the formatter dying while it copied rows [0, 40) into the log: the
  // batch noted in the journal, half of its bytes in the file, `tail` not moved.
  std::size_t const start = csv_log_header.size();
  std::size_t end = start;
  for (int i = 0; i < 40; ++i) end = expected.find('\n', end) + 1;
  std::uint64_t const fields[4] = {0, end - start, start, 40};  // first, bytes, offset, count
  int const jfd = ::open((a.path() + ".journal").c_str(), O_RDWR);
  ASSERT_GE(jfd, 0);
  off_t const at[4] = {batch_first_at, batch_bytes_at, batch_offset_at, batch_count_at};
  for (int i = 0; i < 4; ++i) ASSERT_EQ(::pwrite(jfd, &fields[i], 8, at[i]), 8);
  ::close(jfd);
  int const lfd = ::open(a.path().c_str(), O_RDWR);
  ASSERT_GE(lfd, 0);
  auto const half = (end - start) / 2;
  ASSERT_EQ(::pwrite(lfd, expected.data() + start, half, static_cast<off_t>(start)), static_cast<ssize_t>(half));
  ::close(lfd);

  journal_recovery const r = recover_journal(a.path());
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(read_file(a.path()), expected) << "each row once, the cut batch completed where it began";
}

TEST(RowJournal, RowsQueuedInTicksGetTheirCountersWallClockTime) {
  temp_file f;
  std::vector<detail::row_time> want;
  {
    csv_log_writer log{f.path()};
    row_journal& journal = *log.journal();
    for (std::uint64_t i = 0; i < 3000; ++i) {
      std::uint64_t const start = detail::log_ticks();
      std::uint64_t const end = start + 1000 + i;
      ASSERT_TRUE(journal.push(make_row(1, i), start, end));
      want.push_back(detail::log_row_time(start, end));  // the calling thread's own conversion
      if (i % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // new anchors on both sides
    }
    journal.close();
    log.close();
  }
  auto const log = read_csv_log(f.path());
  ASSERT_EQ(log.rows.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    auto const& r = log.rows[i];
    ASSERT_EQ(std::stoull(r[4]), i);
    // Two anchors of the same clock, each within about a microsecond of it.
    EXPECT_NEAR(static_cast<double>(std::stoll(r[8])), static_cast<double>(want[i].start_ns), 100'000.0) << i;
    EXPECT_NEAR(static_cast<double>(std::stoull(r[9])), static_cast<double>(want[i].duration_ns),
                1.0 + 0.01 * static_cast<double>(want[i].duration_ns))
        << i;
  }
}

// Rows whose duration was not measured (pushed with their start alone, or with
// log_row::unmeasured) keep an empty DurationNs, formatted and recovered alike;
// a measured row between them keeps its duration.
TEST(RowJournal, UnmeasuredDurationsStayEmptyFormattedAndRecovered) {
  temp_file f;
  {
    csv_log_writer log{f.path()};
    row_journal& journal = *log.journal();
    std::uint64_t const start = detail::log_ticks();
    ASSERT_TRUE(journal.push(make_row(1, 0), start, 0));
    ASSERT_TRUE(journal.push(make_row(1, 1), start, start + 1000));
    auto row = make_row(1, 2);
    row.duration_ns = log_row::unmeasured;
    ASSERT_TRUE(journal.push(row));
    row = make_row(1, 3);
    row.duration_ns = 0xffff'ffffU;  // the record's mark for "not measured": too long to queue
    EXPECT_FALSE(journal.push(row));
    journal.close();
    log.close();
  }
  auto const log = read_csv_log(f.path());
  ASSERT_EQ(log.rows.size(), 3U);
  EXPECT_EQ(log.rows[0][9], "");
  EXPECT_FALSE(log.rows[1][9].empty());
  EXPECT_EQ(log.rows[2][9], "");
  EXPECT_NEAR(static_cast<double>(std::stoll(log.rows[0][8])), static_cast<double>(std::stoll(log.rows[1][8])),
              1'000'000.0);
}

TEST(RowJournal, RowsQueuedInTicksAreRecoveredWithTheJournalsAnchor) {
  temp_file f;
  auto const before = std::chrono::system_clock::now();
  crash_with_queued_rows(
      f.path(), 1000, [] {}, true);
  auto const after = std::chrono::system_clock::now();
  journal_recovery const r = recover_journal(f.path());
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.rows, 1000U);
  auto const log = read_csv_log(f.path());
  expect_rows(log, 1, 1000);
  auto const ns = [](auto t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  };
  std::int64_t previous = 0;
  for (auto const& row : log.rows) {
    std::int64_t const t = std::stoll(row[8]);
    EXPECT_GE(t, ns(before) - 1'000'000);  // the child's wall clock, not the rows' made-up TimeNs
    EXPECT_LE(t, ns(after) + 1'000'000);
    EXPECT_GE(t, previous);
    previous = t;
  }
}

TEST(RowJournal, RecoveryLeavesAForeignFileAlone) {
  temp_file f;
  { std::ofstream{f.path()} << csv_log_header << "1,2\n"; }
  { std::ofstream{f.path() + ".journal"} << "not a journal"; }
  journal_recovery const r = recover_journal(f.path());
  EXPECT_TRUE(r.found);
  EXPECT_NE(r.error.find("not a journal of this gpumem version"), std::string::npos) << r.error;
  EXPECT_EQ(read_file(f.path()), std::string{csv_log_header} + "1,2\n");
  EXPECT_TRUE(exists(f.path() + ".journal")) << "kept: it may belong to another tool";
}

TEST(RowJournal, AWriterOpeningThePathReplacesAStaleJournal) {
  temp_file f;
  crash_with_queued_rows(f.path(), 10, [] {});
  ASSERT_TRUE(exists(f.path() + ".journal"));
  {
    csv_log_writer rerun{f.path()};  // a rerun empties the log: the old rows go with it
  }
  EXPECT_FALSE(exists(f.path() + ".journal"));
  EXPECT_EQ(read_csv_log(f.path()).rows.size(), 0U);
  EXPECT_FALSE(recover_journal(f.path()).found);
}

}  // namespace
}  // namespace gpumem::test
