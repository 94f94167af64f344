// The allocation-log reader: both dialects, columns by name, clocks, damage.
#include "log_reader.hpp"

#include "support/temp_file.hpp"
#include "tools/synthetic_log.hpp"
#include "tools/tool_test_support.hpp"

#include <gpumem/csv_log_writer.hpp>
#include <gpumem/detail/log_clock.hpp>
#include <gpumem/row_journal.hpp>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace gpumem::tools;
using namespace std::string_literals;

namespace {

std::vector<std::string> warning_texts(parsed_log const& log) {
  std::vector<std::string> v;
  for (auto const& w : log.warnings) v.push_back(w.text());
  return v;
}

}  // namespace

TEST(LogReader, ReadsGpumemDialect) {
  auto const log = parse_log(
      "Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result\n"
      "140245,14:02:07.123456,allocate,0x7f3a40000000,1048576,0x1,0,cudaMalloc,1763733727123456789,412,CUDA_SUCCESS\n"
      "140245,14:02:07.123501,free,0x7f3a40000000,1048576,0x5603a0c0,1,cuMemFree_v2,1763733727123501000,95,"
      "CUDA_SUCCESS\n"
      "140246,14:02:07.123600,allocate failure,(nil),1099511627776,0,0,cudaMalloc,1763733727123600000,2001,"
      "CUDA_ERROR_OUT_OF_MEMORY\n",
      "g.csv");
  ASSERT_TRUE(log.readable);
  EXPECT_EQ(log.dialect(), "gpumem");
  EXPECT_EQ(log.columns.count, 11u);
  EXPECT_TRUE(log.columns.time_ns && log.columns.result && log.columns.entry && log.columns.device);
  EXPECT_FALSE(log.columns.reserved);
  EXPECT_EQ(log.warning_count, 0u);
  ASSERT_EQ(log.events.size(), 3u);

  auto const& a = log.events[0];
  EXPECT_EQ(a.action, gpumem::log_action::allocate);
  EXPECT_EQ(a.thread_id, 140245u);
  EXPECT_EQ(a.pointer, 0x7f3a40000000u);
  EXPECT_EQ(a.size, 1048576u);
  EXPECT_EQ(a.stream, 1u);
  EXPECT_EQ(a.device, 0);
  EXPECT_EQ(log.string(a.entry_id), "cudaMalloc");
  EXPECT_EQ(a.time_ns, 1763733727123456789);
  EXPECT_EQ(a.clock_us, ((14 * 60 + 2) * 60 + 7) * 1'000'000LL + 123456);
  EXPECT_EQ(a.duration_ns, 412U);
  EXPECT_EQ(log.string(a.result_id), "CUDA_SUCCESS");
  EXPECT_EQ(a.reserved, -1);
  EXPECT_EQ(a.line, 2u);

  auto const& f = log.events[1];
  EXPECT_EQ(f.action, gpumem::log_action::free);
  EXPECT_EQ(f.stream, 0x5603a0c0u);
  EXPECT_EQ(f.device, 1);
  EXPECT_EQ(log.string(f.entry_id), "cuMemFree_v2");

  auto const& x = log.events[2];
  EXPECT_EQ(x.action, gpumem::log_action::allocate_failure);
  EXPECT_EQ(x.pointer, 0u);
  EXPECT_EQ(x.size, 1099511627776u);
  EXPECT_EQ(x.thread_id, 140246u);
  EXPECT_EQ(log.string(x.result_id), "CUDA_ERROR_OUT_OF_MEMORY");
  // Interned once each: "", cudaMalloc, CUDA_SUCCESS, cuMemFree_v2, CUDA_ERROR_OUT_OF_MEMORY.
  EXPECT_EQ(log.strings.size(), 5u);
}

// The Entry names pinned host and managed allocations; managed memory's free is a
// cudaFree / cuMemFree like device memory's, so the free of a live managed pointer
// is the one marked managed.
TEST(LogReader, TellsTheMemoryKindAndAManagedFreeByItsPointer) {
  auto const log = parse_log(
      "Action,Pointer,Size,TimeNs,Entry,Result\n"
      "allocate,0x7000,64,1,cudaMallocManaged,CUDA_SUCCESS\n"                     // managed
      "free,0x7000,64,2,cudaFree,CUDA_ERROR_INVALID_VALUE\n"                      // managed, refused: still live
      "free,0x7000,64,3,cuMemFree_v2,CUDA_SUCCESS\n"                              // managed
      "free,0x7000,64,4,cudaFree,CUDA_SUCCESS\n"                                  // freed already: device
      "allocate,0x8000,64,5,cuMemAllocManaged,CUDA_SUCCESS\n"                     // managed
      "allocate,0x8000,32,6,cudaMalloc,CUDA_SUCCESS\n"                            // its managed free was lost: device
      "free,0x8000,32,7,cudaFreeAsync,CUDA_SUCCESS\n"                             // device
      "allocate failure,(nil),64,8,cudaMallocManaged,CUDA_ERROR_OUT_OF_MEMORY\n"  // managed
      "allocate,0x9000,64,9,cudaHostAlloc,CUDA_SUCCESS\n"                         // pinned host
      "free,0x9000,64,10,cudaFreeHost,CUDA_SUCCESS\n"                             // pinned host
      "allocate,0xa000,64,11,cudaMalloc,CUDA_SUCCESS\n",                          // device
      "k.csv");
  ASSERT_EQ(log.warning_count, 0u) << warning_texts(log)[0];
  using enum memory_kind;
  std::vector<memory_kind> kinds;
  for (auto const& e : log.events) kinds.push_back(e.memory);
  EXPECT_EQ(kinds, (std::vector<memory_kind>{managed, managed, managed, device, managed, device, device, managed,
                                             pinned_host, pinned_host, device}));
  EXPECT_TRUE(log.events[1].refused);
}

// DurationNs is empty for calls the shim did not time: read as absent, no warning.
TEST(LogReader, AnEmptyDurationIsReadAsNotMeasured) {
  auto const log = parse_log(
      "Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result\n"
      "1,14:02:07.123456,allocate,0x10,256,0,0,cudaMalloc,1763733727123456789,,CUDA_SUCCESS\n"
      "1,14:02:07.123457,free,0x10,256,0,0,cudaFree,1763733727123457000,5000,CUDA_SUCCESS\n",
      "g.csv");
  ASSERT_TRUE(log.readable);
  EXPECT_EQ(log.warning_count, 0u);
  ASSERT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.events[0].duration_ns, gpumem::log_row::unmeasured);
  EXPECT_EQ(log.events[1].duration_ns, 5000U);
}

TEST(LogReader, ReadsRmmDialectWithTimeOfDayClock) {
  auto const log = parse_log(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "139872054884160,09:15:00.000250,allocate,0x7f0000000000,256,0\n"
      "139872054884160,09:15:01.500000,free,0x7f0000000000,256,0x2\n",
      "rmm.csv");
  ASSERT_TRUE(log.readable);
  EXPECT_EQ(log.dialect(), "rmm");
  ASSERT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.events[0].thread_id, 139872054884160u);
  EXPECT_EQ(log.events[0].time_ns, (9 * 3600 + 15 * 60) * 1'000'000'000LL + 250'000);
  EXPECT_EQ(log.events[1].time_ns - log.events[0].time_ns, 1'499'750'000);
  EXPECT_EQ(log.events[1].stream, 2u);
  EXPECT_EQ(log.events[0].device, -1);
  EXPECT_EQ(log.events[0].entry_id, 0);
  EXPECT_EQ(log.events[0].result_id, 0);
  EXPECT_EQ(log.events[0].duration_ns, gpumem::log_row::unmeasured);
}

TEST(LogReader, FindsColumnsByNameInAnyOrderAndIgnoresUnknownOnes) {
  auto const log = parse_log(
      "Size,Colour,Action,TimeNs,Pointer,Reserved\n"
      "4096,blue,allocate,5000,0x10000,8192\n"
      "4096,red,free,6000,0x10000,8192\n",
      "o.csv");
  ASSERT_TRUE(log.readable) << log.fatal->text();
  EXPECT_TRUE(log.columns.reserved);
  EXPECT_FALSE(log.columns.thread);
  ASSERT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.events[0].size, 4096u);
  EXPECT_EQ(log.events[0].pointer, 0x10000u);
  EXPECT_EQ(log.events[0].time_ns, 5000);
  EXPECT_EQ(log.events[0].reserved, 8192);
  EXPECT_EQ(log.events[0].thread_id, 0u);
  EXPECT_EQ(log.events[0].clock_us, -1);
}

TEST(LogReader, TimeOfDayRollsOverAtMidnightButNotOnSmallJitter) {
  auto const log = parse_log(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,23:59:59.900000,allocate,0x100,1,0\n"
      "2,23:59:59.899000,allocate,0x200,1,0\n"  // a racing thread, 1 ms older: same day
      "1,00:00:00.100000,free,0x100,1,0\n"      // after midnight
      "1,00:00:01.000000,free,0x200,1,0\n",
      "m.csv");
  ASSERT_EQ(log.events.size(), 4u);
  std::int64_t const day = 86400LL * 1'000'000'000;
  EXPECT_EQ(log.events[0].time_ns, day - 100'000'000);
  EXPECT_EQ(log.events[1].time_ns, day - 101'000'000);
  EXPECT_EQ(log.events[2].time_ns, day + 100'000'000);
  EXPECT_EQ(log.events[3].time_ns, day + 1'000'000'000);
  EXPECT_EQ(log.events[2].clock_us, 100'000);
}

TEST(LogReader, IgnoresTrailingNulBytesOfAKilledWriter) {
  std::string text = gpumem::test::gpumem_log{}.alloc(0x1000, 64, 10).free(0x1000, 64, 20).text();
  text.append(4096, '\0');
  auto const log = parse_log(text, "nul.csv");
  ASSERT_TRUE(log.readable);
  EXPECT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.warning_count, 0u);
}

TEST(LogReader, ReportsATruncatedLastLineByNumber) {
  std::string text = gpumem::test::gpumem_log{}.alloc(0x1000, 64, 10).alloc(0x2000, 64, 20).text();
  text += "1,14:00:00.000030,allocate,0x30";
  text.append(100, '\0');  // the killed writer's padding follows the partial line
  auto const log = parse_log(text, "t.csv");
  ASSERT_TRUE(log.readable);
  EXPECT_EQ(log.events.size(), 2u);
  EXPECT_EQ(warning_texts(log), std::vector<std::string>{"t.csv:4: truncated last line (no newline at end of file): "
                                                         "'1,14:00:00.000030,allocate,0x30'; ignored"});
}

TEST(LogReader, ReportsEachMalformedLineAndKeepsTheRest) {
  std::string const text =
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,10:00:00.000001,allocate,0x100,10,0\n"    // 2 ok
      "1,10:00:00.000002,alloc,0x200,10,0\n"       // 3 unknown action
      "1,10:00:00.000003,allocate,0xzz,10,0\n"     // 4 bad pointer
      "1,10:00:00.000004,allocate,0x300,12a,0\n"   // 5 bad size
      "1,10:00:00.000005,allocate,0x400\n"         // 6 too few fields
      "1,10:00:00.000006,allocate,0x500,10,0,x\n"  // 7 too many fields
      "1,10:61:00.000007,allocate,0x600,10,0\n"    // 8 bad time
      "1,10:00:00.000008,free,0x100,10,zz\n"       // 9 bad stream
      "\n"                                         // 10 blank: skipped silently
      "1,10:00:00.000009,free,0x100,10,0\n";       // 11 ok
  auto const log = parse_log(text, "bad.csv");
  ASSERT_TRUE(log.readable);
  ASSERT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.events[1].line, 11u);
  EXPECT_EQ(warning_texts(log), (std::vector<std::string>{
                                    "bad.csv:3: unknown action 'alloc' (expected allocate, allocate failure or free)",
                                    "bad.csv:4: bad pointer '0xzz' (expected 0x... or (nil))",
                                    "bad.csv:5: bad size '12a' (expected a decimal byte count)",
                                    "bad.csv:6: expected 6 fields, found 4",
                                    "bad.csv:7: expected 6 fields, found 7",
                                    "bad.csv:8: bad time '10:61:00.000007' (expected HH:MM:SS.ffffff)",
                                    "bad.csv:9: bad stream 'zz'",
                                }));
  EXPECT_EQ(log.warning_count, 7u);
}

TEST(LogReader, HeaderWithoutRequiredColumnsMakesTheLogUnreadable) {
  auto const a = parse_log("Thread,Time,Action,Pointer\n1,10:00:00.0,allocate,0x1\n", "a.csv");
  EXPECT_FALSE(a.readable);
  ASSERT_TRUE(a.fatal);
  EXPECT_EQ(a.fatal->text(),
            "a.csv:1: header lacks column 'Size' (not an allocation log? header: 'Thread,Time,Action,Pointer')");

  auto const b = parse_log("Thread,Action,Pointer,Size,Stream\n", "b.csv");
  EXPECT_FALSE(b.readable);
  EXPECT_EQ(b.fatal->text(),
            "b.csv:1: header lacks a clock column 'Time' or 'TimeNs' (header: 'Thread,Action,Pointer,Size,Stream')");

  auto const c = parse_log(std::string(16, '\0'), "c.csv");
  EXPECT_FALSE(c.readable);
  EXPECT_EQ(c.fatal->text(), "c.csv: empty file (no header line)");
}

// A compressed log (the repository ships its example logs gzipped) is named as
// such, not reported as a CSV without the right columns.
TEST(LogReader, ACompressedLogIsNamedAsSuch) {
  auto const gz = parse_log(std::string{"\x1f\x8b\x08\x08m\xba\x01k\0\x03log.csv\0", 18}, "log.csv.gz");
  EXPECT_FALSE(gz.readable);
  ASSERT_TRUE(gz.fatal);
  EXPECT_EQ(gz.fatal->text(),
            "log.csv.gz: compressed with gzip; the tools read the CSV itself: decompress it first (gzip -dc "
            "log.csv.gz > log.csv), or pipe it in and name the log '-'");
  auto const zst = parse_log(std::string{"\x28\xb5\x2f\xfd\x04\x58"}, "log.csv.zst");
  ASSERT_TRUE(zst.fatal);
  EXPECT_NE(zst.fatal->text().find("compressed with zstd"), std::string::npos);
  auto const xz = parse_log(std::string{"\xfd"
                                        "7zXZ\0\0\x04",
                                        8},
                            "log.csv.xz");
  ASSERT_TRUE(xz.fatal);
  EXPECT_NE(xz.fatal->text().find("compressed with xz"), std::string::npos);
  auto const bz = parse_log("BZh91AY&SY", "log.csv.bz2");
  ASSERT_TRUE(bz.fatal);
  EXPECT_NE(bz.fatal->text().find("compressed with bzip2"), std::string::npos);
  // A header that merely starts with "BZh" is a CSV header like any other.
  auto const plain = parse_log("BZh,Action\n", "p.csv");
  ASSERT_TRUE(plain.fatal);
  EXPECT_NE(plain.fatal->text().find("header lacks column"), std::string::npos);
}

TEST(LogReader, AcceptsCrLfLineEndings) {
  auto const log = parse_log("Thread,Time,Action,Pointer,Size,Stream\r\n1,10:00:00.5,allocate,0x100,10,0x1\r\n", "w");
  ASSERT_EQ(log.events.size(), 1u);
  EXPECT_EQ(log.events[0].stream, 1u);
  EXPECT_EQ(log.events[0].time_ns, 36000LL * 1'000'000'000 + 500'000'000);
}

TEST(LogReader, ReportsAMissingFileOrADirectory) {
  gpumem::test::temp_file tmp{"absent.csv"};
  log_reader const missing{tmp.path()};
  EXPECT_FALSE(missing.readable());
  EXPECT_EQ(missing.fatal()->text(), tmp.path() + ": cannot read: No such file or directory");
  log_reader const dir{tmp.dir()};
  EXPECT_FALSE(dir.readable());
  EXPECT_EQ(dir.fatal()->text(), tmp.dir() + ": cannot read: is a directory");
}

TEST(LogReader, ReadsAFile) {
  gpumem::test::temp_file tmp;
  gpumem::test::write_file(tmp.path(), gpumem::test::gpumem_log{}.alloc(0x1000, 64, 10).text());
  log_reader r{tmp.path()};
  ASSERT_TRUE(r.readable());
  EXPECT_EQ(r.path(), tmp.path());
  log_event ev;
  ASSERT_TRUE(r.next(ev));
  EXPECT_EQ(ev.pointer, 0x1000u);
  EXPECT_EQ(ev.index, 0u);
  EXPECT_FALSE(r.next(ev));
  EXPECT_EQ(r.events(), 1u);
  EXPECT_EQ(r.lines(), 2u);
  EXPECT_FALSE(r.ended_abruptly());
}

namespace {

// Runs `write` in a child that then dies by SIGKILL (no exit hook runs).
template <class Write>
void write_and_die(Write write) {
  pid_t const child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    write();
    ::kill(::getpid(), SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
}

// Reads every event of `path`; expects `events` of them and one warning, whose text it returns.
std::string sole_warning_after_reading(std::string const& path, std::uint64_t events) {
  log_reader r{path};
  EXPECT_TRUE(r.readable());
  log_event ev;
  while (r.next(ev)) {}
  EXPECT_EQ(r.events(), events);
  EXPECT_EQ(r.warnings().size(), 1u);
  return r.warnings().empty() ? std::string{} : r.warnings()[0].text();
}

// A writer of `path` that queued 5 rows in its journal (no helper thread formats
// them) and died.
void die_with_five_rows_queued(std::string const& path) {
  write_and_die([&] {
    gpumem::row_journal::hold_rows_for_testing(true);
    auto* log = new gpumem::csv_log_writer{path};
    auto* journal = log->journal();
    for (int i = 0; i < 5; ++i) {
      (void)journal->push(gpumem::log_row{.thread_id = 9,
                                          .time_ns = 1'700'000'000'000'000'000 + i,
                                          .pointer = reinterpret_cast<std::uintptr_t>(log),
                                          .size = 64,
                                          .device = 0});
    }
  });
}

}  // namespace

TEST(LogReader, CompletesALogWhoseWriterDiedWithRowsQueued) {
  gpumem::test::temp_file tmp;
  die_with_five_rows_queued(tmp.path());
  std::string const said = sole_warning_after_reading(tmp.path(), 5);
  EXPECT_NE(said.find("added 5 rows that the process writing it had queued in"), std::string::npos) << said;
}

TEST(LogReader, SaysAWriterDiedEvenWhenItsJournalHeldNothingNew) {
  gpumem::test::temp_file tmp;
  write_and_die([&] {  // 3 rows queued, all formatted by the helper before the end
    auto* log = new gpumem::csv_log_writer{tmp.path()};
    auto* journal = log->journal();
    for (int i = 0; i < 3; ++i) {
      gpumem::log_row const row{
          .thread_id = 9, .pointer = reinterpret_cast<std::uintptr_t>(log), .size = 64, .device = 0};
      std::uint64_t const start = gpumem::detail::log_ticks();
      (void)journal->push(row, start, start + 10);
    }
    for (int i = 0; i < 5000 && journal->rows_formatted() < 3; ++i) ::usleep(1000);
  });
  std::string const said = sole_warning_after_reading(tmp.path(), 3);
  EXPECT_NE(said.find("died without exiting; every row it had queued was in the log already"), std::string::npos)
      << said;
}

TEST(LogReader, SaysWhenTheDeadWritersJournalWasTruncated) {
  gpumem::test::temp_file tmp;
  die_with_five_rows_queued(tmp.path());
  // Cut by another program after the writer died: out of scope for recovery,
  // which leaves both files as they were and says why.
  std::string const journal = tmp.path() + ".journal";
  ASSERT_EQ(::truncate(journal.c_str(), 20480 + 3 * 64 + 10), 0);
  std::uintmax_t const log_bytes = std::filesystem::file_size(tmp.path());
  log_reader r{tmp.path()};
  ASSERT_TRUE(r.readable());
  log_event ev;
  while (r.next(ev)) {}
  EXPECT_EQ(std::filesystem::file_size(tmp.path()), log_bytes);
  EXPECT_TRUE(std::filesystem::exists(journal));
  bool said = false;
  std::string all;
  for (auto const& w : r.warnings()) {
    all += w.text() + "\n";
    said |= w.text().find("rows queued by the process that wrote it could not be added: '" + journal +
                          "' was cut short by another program (20682 of 4214784 bytes): the rows queued in it are "
                          "lost") != std::string::npos;
  }
  EXPECT_TRUE(said) << all;
}

TEST(LogReader, ParsesAndFormatsTimeOfDay) {
  EXPECT_EQ(parse_time_of_day("00:00:00"), 0);
  EXPECT_EQ(parse_time_of_day("01:02:03.5"), 3723LL * 1'000'000'000 + 500'000'000);
  EXPECT_EQ(parse_time_of_day("23:59:59.123456789"), 86399LL * 1'000'000'000 + 123'456'789);
  EXPECT_FALSE(parse_time_of_day("1:02:03"));
  EXPECT_FALSE(parse_time_of_day("01:02:03."));
  EXPECT_FALSE(parse_time_of_day("01:02:03,5"));
  EXPECT_FALSE(parse_time_of_day("01:60:03"));
  EXPECT_EQ(format_time_of_day(3723LL * 1'000'000 + 42), "01:02:03.000042");
  EXPECT_EQ(format_time_of_day(86400LL * 1'000'000 + 1), "00:00:00.000001");
}

TEST(LogReader, StreamsAFileManyTimesLargerThanItsBuffer) {
  // ~25 MB: rows straddle every refill of the reader's 1 MiB buffer. The file is
  // read the same as the same bytes in memory, and as the generator wrote it.
  gpumem::test::temp_file tmp;
  gpumem::test::synthetic_log_shape shape;
  shape.rows = 200'000;
  gpumem::test::synthetic_log_facts facts;
  {
    std::FILE* f = std::fopen(tmp.path().c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(gpumem::test::synthetic_log_writer::write(f, shape, &facts));
    ASSERT_EQ(std::fclose(f), 0);
  }
  std::string const text = gpumem::test::read_file(tmp.path());
  ASSERT_GT(text.size(), std::size_t{20} << 20);
  auto const memory = parse_log(text, tmp.path());
  log_reader file{tmp.path()};
  ASSERT_TRUE(file.readable());
  EXPECT_TRUE(file.columns().reserved);
  std::uint64_t n = 0, allocations = 0, failures = 0;
  log_event ev;
  while (file.next(ev)) {
    ASSERT_LT(n, memory.events.size());
    auto const& m = memory.events[n];
    ASSERT_EQ(ev.line, m.line);
    ASSERT_EQ(ev.pointer, m.pointer);
    ASSERT_EQ(ev.size, m.size);
    ASSERT_EQ(ev.time_ns, m.time_ns);
    ASSERT_EQ(ev.reserved, m.reserved);
    ASSERT_EQ(file.string(ev.entry_id), memory.string(m.entry_id));
    allocations += ev.action == gpumem::log_action::allocate;
    failures += ev.action == gpumem::log_action::allocate_failure;
    ++n;
  }
  EXPECT_EQ(n, facts.rows);
  EXPECT_EQ(allocations, facts.allocations);
  EXPECT_EQ(failures, facts.failures);
  EXPECT_EQ(file.warning_count(), 0u);
  EXPECT_EQ(file.lines(), facts.rows + 1);
}

TEST(LogReader, ARowCutShortByNulsIsReportedAndReadingGoesOnAfterThem) {
  // A writer died mid-row: its reserved slot holds the start of the row, then NULs
  // (the newline never written); the next writer's row follows on the same line.
  std::string text = gpumem::test::gpumem_log{}.alloc(0x1000, 64, 10).text();
  text += "1,14:00:00.000030,alloc";
  text.append(10, '\0');
  text += "1,14:00:00.000040,free,0x1000,64,0x1,0,cudaFree,40,100,CUDA_SUCCESS\n";
  auto const log = parse_log(text, "t.csv");
  ASSERT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.events[1].action, gpumem::log_action::free);
  EXPECT_EQ(log.events[1].line, 3u);
  EXPECT_EQ(warning_texts(log),
            std::vector<std::string>{"t.csv:3: torn row (cut short by 10 NUL bytes: its writer died mid-row?): "
                                     "'1,14:00:00.000030,alloc'; ignored"});
  EXPECT_FALSE(log.ended_abruptly);
}

TEST(LogReader, NulsWhereARowShouldStartAreSkippedWithAWarning) {
  std::string text = gpumem::test::gpumem_log{}.alloc(0x1000, 64, 10).text();
  text.append(64, '\0');
  text += "1,14:00:00.000040,free,0x1000,64,0x1,0,cudaFree,40,100,CUDA_SUCCESS\n";
  auto const log = parse_log(text, "h.csv");
  ASSERT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.events[1].line, 3u);
  EXPECT_EQ(warning_texts(log), std::vector<std::string>{"h.csv:3: 64 NUL bytes skipped (room for a row that was "
                                                         "never written: its writer died?)"});
}

TEST(LogReader, ControlCharactersInQuotedTextAreEscaped) {
  std::string text = "Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00.0,all\x1b[31m\x07oc,0x1,8,0\n";
  auto const log = parse_log(text, "c.csv");
  EXPECT_EQ(warning_texts(log),
            std::vector<std::string>{"c.csv:2: unknown action 'all\\x1b[31m\\x07oc' (expected allocate, allocate "
                                     "failure or free)"});
}

TEST(LogReader, IncompleteMarkerIsMetadataAndTheLastOneWins) {
  std::string text = "#gpumem version=2\n";  // metadata may come before the header
  text += gpumem::test::gpumem_log{}.alloc(0x1000, 64, 10).text();
  text += "#gpumem incomplete,dropped_rows=5,reason=first\n";
  text += "# a comment\n";
  text += "1,14:00:00.000040,free,0x1000,64,0x1,0,cudaFree,40,100,CUDA_SUCCESS\n";
  text += "#gpumem incomplete,dropped_rows=8006,reason=No space left on device, 10010 rows kept";  // no newline
  auto const log = parse_log(text, "i.csv");
  ASSERT_TRUE(log.readable);
  EXPECT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.warning_count, 0u);
  ASSERT_TRUE(log.incomplete);
  EXPECT_EQ(log.incomplete->dropped_rows, 8006u);
  EXPECT_EQ(log.incomplete->reason, "No space left on device, 10010 rows kept");
  EXPECT_EQ(log.incomplete->line, 7u);

  auto const plain = parse_log(gpumem::test::gpumem_log{}.alloc(0x1000, 64, 10).text(), "p.csv");
  EXPECT_FALSE(plain.incomplete);
  auto const vague = parse_log("Action,Pointer,Size,TimeNs\n#gpumem incomplete\n", "v.csv");
  ASSERT_TRUE(vague.incomplete);
  EXPECT_FALSE(vague.incomplete->dropped_rows);
  EXPECT_EQ(vague.incomplete->reason, "");
}

TEST(LogReader, AnOverlongLineIsSkippedWithoutHoldingIt) {
  std::string text = "Action,Pointer,Size,TimeNs\n";
  text.append(log_reader::max_line_bytes * 3, 'x');
  text += "\nallocate,0x100,10,1\n";
  auto const log = parse_log(text, "l.csv");
  ASSERT_EQ(log.events.size(), 1u);
  EXPECT_EQ(log.events[0].line, 3u);
  EXPECT_EQ(warning_texts(log),
            std::vector<std::string>{"l.csv:2: line longer than 64 KiB (not an allocation log row); ignored"});
}

// Where the header should be, a line over the bound (NUL bytes included) is no
// log's: reading stops there, so a source that never sends a newline
// (/dev/zero, `yes | tr -d '\n'`) cannot keep the reader busy for ever.
TEST(LogReader, NulsWhereTheHeaderShouldBeStopTheReadingAtTheLineBound) {
  std::string const stopped =
      ":1: more than 64 KiB of NUL bytes where the header should be (not an allocation log); reading stopped";
  auto const zeros = parse_log(std::string(log_reader::max_line_bytes + 1, '\0'), "z.csv");
  EXPECT_FALSE(zeros.readable);
  ASSERT_TRUE(zeros.fatal);
  EXPECT_EQ(zeros.fatal->text(), "z.csv" + stopped);
  // A header cut short by them, too.
  auto const torn = parse_log("Thread,Time" + std::string(log_reader::max_line_bytes + 1, '\0') + "\n", "t.csv");
  ASSERT_TRUE(torn.fatal);
  EXPECT_EQ(torn.fatal->text(), "t.csv" + stopped);
  // Up to the bound, NULs before the header are skipped as before.
  auto const few = parse_log(
      std::string(log_reader::max_line_bytes, '\0') + gpumem::test::gpumem_log{}.alloc(0x1000, 64, 10).text(), "f.csv");
  ASSERT_TRUE(few.readable);
  EXPECT_EQ(few.events.size(), 1u);
  // After the header they are a dead writer's room, however long: ignored at the end.
  auto const padded = parse_log(gpumem::test::gpumem_log{}.alloc(0x1000, 64, 10).text() + std::string(4 << 20, '\0'),
                                "p.csv");
  ASSERT_TRUE(padded.readable);
  EXPECT_EQ(padded.events.size(), 1u);
  EXPECT_EQ(padded.warning_count, 0u);
  EXPECT_TRUE(padded.ended_abruptly);
}

TEST(LogReader, AnOverlongLineWhereTheHeaderShouldBeStopsTheReading) {
  std::string text(log_reader::max_line_bytes * 3, 'x');
  text += "\nAction,Pointer,Size,TimeNs\nallocate,0x100,10,1\n";
  auto const log = parse_log(text, "l.csv");
  EXPECT_FALSE(log.readable);
  ASSERT_TRUE(log.fatal);
  EXPECT_EQ(log.fatal->text(),
            "l.csv:1: line longer than 64 KiB where the header should be (not an allocation log); reading stopped");
}

// From a source that never ends, the reader takes a window's worth past the bound
// at most: a pipe fed NULs until it is closed (or 64 MiB, so that a reader that
// reads on fails this test instead of hanging it).
TEST(LogReader, AnEndlessSourceOfNulsIsReadOnlyUpToTheBound) {
  std::array<int, 2> p{};
  ASSERT_EQ(::pipe(p.data()), 0);
  std::size_t written = 0;
  std::thread writer{[&] {
    sigset_t pipe_signal;  // the write that finds the pipe closed fails with EPIPE instead
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
    std::vector<char> const zeros(std::size_t{64} << 10, '\0');
    while (written < (std::size_t{64} << 20)) {
      ssize_t const n = ::write(p[1], zeros.data(), zeros.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      written += static_cast<std::size_t>(n);
    }
    ::close(p[1]);
  }};
  std::optional<log_diagnostic> fatal;
  {
    log_reader const r{"/dev/fd/" + std::to_string(p[0])};
    ::close(p[0]);  // the reader has a descriptor of its own
    fatal = r.fatal();
  }
  writer.join();
  ASSERT_TRUE(fatal);
  EXPECT_NE(fatal->text().find(":1: more than 64 KiB of NUL bytes"), std::string::npos) << fatal->text();
  EXPECT_LT(written, std::size_t{1} << 20);
}

TEST(LogReader, DistinctEntryTextsAreBounded) {
  std::string text = "Action,Pointer,Size,TimeNs,Entry\n";
  for (int i = 0; i < 5000; ++i) text += "allocate,0x" + std::to_string(i + 1) + ",8,1,e" + std::to_string(i) + "\n";
  text += "allocate,0x9999999,8,1," + std::string(1000, 'y') + "\n";
  auto const log = parse_log(text, "s.csv");
  EXPECT_EQ(log.events.size(), 5001u);
  EXPECT_EQ(log.strings.size(), log_reader::max_strings);
  EXPECT_EQ(log.string(log.events[4500].entry_id), "");  // past the bound: no text, the event is kept
  EXPECT_EQ(log.string(log.events[10].entry_id), "e10");
}
