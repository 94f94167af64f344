// gpumem-replay: numbers for a tiny log worked out by hand, in-process (engine) and
// through the command line (re-exec onto the simulated device, CSV output).
#include "builtin_configs.hpp"
#include "replay_engine.hpp"
#include "sim_exec.hpp"

#include "log_reader.hpp"

#include "support/temp_file.hpp"
#include "tools/tool_test_support.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <utility>

using namespace gpumem::tools;
using gpumem::test::gpumem_log;
using gpumem::test::run_command;
using gpumem::test::temp_file;
using gpumem::test::write_file;

namespace {

constexpr std::uint64_t MiB = 1 << 20;

std::string replay_bin() { return std::string{GPUMEM_REPLAY_BIN} + " "; }

// A 1 MiB, B 2 MiB, free A, C 3 MiB (all on one stream, stream-ordered frees).
gpumem_log tiny_log() {
  gpumem_log l;
  l.alloc(0xa000000, 1 * MiB, 10)
      .alloc(0xb000000, 2 * MiB, 20)
      .free(0xa000000, 1 * MiB, 30)
      .alloc(0xc000000, 3 * MiB, 40);
  return l;
}

std::string const pool_4mib_toml = R"(
[gpumem]
sync_mode = "stream"
[[chain]]
type = "pool"
initial_size = "4MiB"
min_growth = "2MiB"
[[chain]]
type = "cuda"
)";

/// Stream-ordered frees: the log's entry says cudaFreeAsync.
std::string async_frees(std::string text) {
  for (std::size_t at; (at = text.find(",cudaFree,")) != std::string::npos;) text.replace(at, 10, ",cudaFreeAsync,");
  return text;
}

std::string tiny() { return async_frees(tiny_log().text()); }

/// Replays a log held in memory through each configuration, side by side on devices 0, 1, ...
std::vector<replay_result> replay_all(std::string const& text, std::vector<named_config> const& configs) {
  log_reader reader{text, "tiny.csv"};
  EXPECT_TRUE(reader.readable());
  std::vector<int> devices;
  for (std::size_t i = 0; i < configs.size(); ++i) devices.push_back(static_cast<int>(i));
  return replay_log(reader, configs, devices).results;
}

replay_result replay_one(std::string const& text, std::string const& toml, std::string name) {
  return replay_all(text, {named_config{std::move(name), gpumem::config::parse_toml(toml, "test")}}).front();
}

class ReplayEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!running_on_sim()) GTEST_SKIP() << "needs the simulated device first on LD_LIBRARY_PATH (run under ctest)";
  }
};

}  // namespace

TEST_F(ReplayEngine, PoolNumbersMatchTheHandComputation) {
  // Pool of 4 MiB: A takes [0,1), B [1,3). A is freed: free blocks [0,1) and [3,4).
  // C (3 MiB) fits neither: the pool grows by max(3 MiB, min growth 2 MiB, 1/16 of
  // 4 MiB) = 3 MiB, all of it C's. Peak reserved 7 MiB in 2 upstream calls; peak live
  // B + C = 5 MiB; at that peak free = 2 x 1 MiB blocks, largest 1 MiB: fragmentation
  // (2 - 1) / 2 = 1/2.
  auto const r = replay_one(tiny(), pool_4mib_toml, "pool4");
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.name, "pool4");
  EXPECT_EQ(r.peak_reserved, 7 * MiB);
  EXPECT_EQ(r.upstream_calls, 2u);
  EXPECT_EQ(r.peak_live, 5 * MiB);
  EXPECT_DOUBLE_EQ(r.fragmentation_at_peak, 1.0 / 2.0);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(r.allocations, 3u);
  EXPECT_EQ(r.frees, 1u);
  EXPECT_EQ(r.skipped_frees, 0u);
}

// Pinned host memory rows are no device allocations: the replay passes them by.
TEST_F(ReplayEngine, PinnedHostMemoryIsNotReplayed) {
  gpumem_log l = tiny_log();
  l.host_alloc(0x7f0000, 64 * MiB, 1'000'000'000).host_free(0x7f0000, 64 * MiB, 1'000'000'001);
  auto const with_host = replay_one(async_frees(l.text()), pool_4mib_toml, "pool4");
  auto const without = replay_one(tiny(), pool_4mib_toml, "pool4");
  ASSERT_FALSE(with_host.error) << *with_host.error;
  EXPECT_EQ(with_host.peak_reserved, without.peak_reserved);
  EXPECT_EQ(with_host.peak_live, without.peak_live);
  EXPECT_EQ(with_host.allocations, without.allocations);
  EXPECT_EQ(with_host.frees, without.frees);
  EXPECT_EQ(with_host.skipped_frees, 0u);
}

// Nor are managed memory's rows, its cudaFree included (known by its pointer).
TEST_F(ReplayEngine, ManagedMemoryIsNotReplayed) {
  gpumem_log l = tiny_log();
  l.managed_alloc(0x7f0000, 64 * MiB, 1'000'000'000).free(0x7f0000, 64 * MiB, 1'000'000'001);
  auto const with_managed = replay_one(async_frees(l.text()), pool_4mib_toml, "pool4");
  auto const without = replay_one(tiny(), pool_4mib_toml, "pool4");
  ASSERT_FALSE(with_managed.error) << *with_managed.error;
  EXPECT_EQ(with_managed.peak_reserved, without.peak_reserved);
  EXPECT_EQ(with_managed.peak_live, without.peak_live);
  EXPECT_EQ(with_managed.allocations, without.allocations);
  EXPECT_EQ(with_managed.frees, without.frees);
  EXPECT_EQ(with_managed.skipped_frees, 0u);
}

TEST_F(ReplayEngine, CudaChainReservesExactlyWhatIsLive) {
  auto const configs = builtin_configs();
  auto const cuda = std::find_if(configs.begin(), configs.end(), [](auto const& c) { return c.name == "cuda"; });
  ASSERT_NE(cuda, configs.end());
  auto const r = replay_all(tiny(), {*cuda}).front();
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.peak_reserved, 5 * MiB);  // B + C: every allocation is a device allocation
  EXPECT_EQ(r.upstream_calls, 3u);
  EXPECT_EQ(r.peak_live, 5 * MiB);
  EXPECT_EQ(r.fragmentation_at_peak, 0.0);  // nothing cached
}

// A safe-mode pool over vmm at its maximum gives back the pages of free blocks that a
// request does not fit: A, B, D of 2 MiB each fill the 6 MiB; A and D are freed, two
// 2 MiB holes; C (4 MiB) fits neither, so their pages go back and C is mapped anew.
// The replay counts the pages moved.
TEST_F(ReplayEngine, CountsThePagesThePoolMoves) {
  std::string const toml = R"(
[[chain]]
type = "pool"
maximum_size = "6MiB"
[[chain]]
type = "vmm"
)";
  gpumem_log l;
  l.alloc(0xa000000, 2 * MiB, 10)
      .alloc(0xb000000, 2 * MiB, 20)
      .alloc(0xd000000, 2 * MiB, 30)
      .free(0xa000000, 2 * MiB, 40)
      .free(0xd000000, 2 * MiB, 50)
      .alloc(0xc000000, 4 * MiB, 60);
  auto const r = replay_one(l.text(), toml, "vmm6");
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(r.pages_released, 4 * MiB);
  EXPECT_EQ(r.pages_remapped, 0u);
  EXPECT_EQ(r.peak_live, 6 * MiB);
  // Over cuMemAlloc slabs no page moves: A's and D's slabs go back whole.
  std::string slabs = toml;
  slabs.replace(slabs.find("\"vmm\""), 5, "\"cuda\"");
  auto const plain = replay_one(l.text(), slabs, "cuda6");
  ASSERT_FALSE(plain.error) << *plain.error;
  EXPECT_EQ(plain.failed, 0u);
  EXPECT_EQ(plain.pages_released, 0u);
  EXPECT_EQ(plain.pages_remapped, 0u);
}

TEST_F(ReplayEngine, PoolAtItsMaximumFailsTheAllocationThatDoesNotFit) {
  // Same log, pool capped at 4 MiB: C cannot be placed (largest free block 1 MiB).
  std::string toml = pool_4mib_toml;
  toml.replace(toml.find("min_growth"), 0, "maximum_size = \"4MiB\"\n");
  auto const r = replay_one(tiny(), toml, "capped");
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.failed, 1u);
  EXPECT_EQ(r.peak_reserved, 4 * MiB);
  EXPECT_EQ(r.upstream_calls, 1u);
  EXPECT_EQ(r.peak_live, 3 * MiB);  // A + B
  EXPECT_EQ(r.allocations, 2u);
}

TEST_F(ReplayEngine, SkipsUnknownFreesAndReplaysLoggedFailures) {
  gpumem_log l;
  l.alloc(0x1000, 1 * MiB, 1).free(0x9999, 64, 2).fail(2 * MiB, 3).free(0x1000, 1 * MiB, 4).free(0x1000, 1 * MiB, 5);
  auto const r = replay_one(l.text(), pool_4mib_toml, "p");
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.skipped_frees, 2u);  // 0x9999 never allocated; 0x1000 freed twice
  EXPECT_EQ(r.failed, 0u);         // the logged 2 MiB failure fits this pool...
  EXPECT_EQ(r.allocations, 2u);
  EXPECT_EQ(r.frees, 2u);  // ...and is freed at once
  EXPECT_EQ(r.peak_live, 3 * MiB);
  EXPECT_EQ(r.peak_reserved, 4 * MiB);
}

TEST_F(ReplayEngine, StreamsOfTheLogBecomeStreamsOfTheReplay) {
  // Two threads on their per-thread default streams and one explicit stream: every
  // allocation and free must be accepted by the pool on its own stream.
  gpumem_log l;
  l.alloc(0x1000, MiB, 1, 1, "0x2").alloc(0x2000, MiB, 2, 2, "0x2").alloc(0x3000, MiB, 3, 1, "0x5603a0c0");
  l.free(0x1000, MiB, 4, 1, "0x2").free(0x2000, MiB, 5, 2, "0x2").free(0x3000, MiB, 6, 1, "0x5603a0c0");
  auto const r = replay_one(async_frees(l.text()), pool_4mib_toml, "p");
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.allocations, 3u);
  EXPECT_EQ(r.frees, 3u);
  EXPECT_EQ(r.peak_live, 3 * MiB);
  EXPECT_EQ(r.peak_reserved, 4 * MiB);
  EXPECT_EQ(r.failed, 0u);
}

TEST_F(ReplayEngine, ABrokenChainIsReportedNotThrown) {
  std::string toml = pool_4mib_toml;
  toml.replace(toml.find("\"4MiB\""), 6, "\"900GiB\"");  // initial reservation cannot succeed
  auto const r = replay_one(tiny(), toml, "huge");
  ASSERT_TRUE(r.error);
  EXPECT_NE(r.error->find("could not reserve its initial"), std::string::npos) << *r.error;
}

TEST_F(ReplayEngine, ChainsSideBySideInOnePassMatchEachAlone) {
  // The pool and the capped pool in one pass (devices 0 and 1, a thread each):
  // each gives what it gives alone (the tests above), though the capped one's
  // device is the one the other would have needed to grow.
  std::string capped = pool_4mib_toml;
  capped.replace(capped.find("min_growth"), 0, "maximum_size = \"4MiB\"\n");
  auto const rows = replay_all(tiny(), {{"a", gpumem::config::parse_toml(pool_4mib_toml, "test")},
                                        {"c", gpumem::config::parse_toml(capped, "t")}});
  ASSERT_EQ(rows.size(), 2u);
  for (auto const& r : rows) ASSERT_FALSE(r.error) << r.name << ": " << *r.error;
  EXPECT_EQ(rows[0].name, "a");
  EXPECT_EQ(rows[0].peak_reserved, 7 * MiB);
  EXPECT_EQ(rows[0].upstream_calls, 2u);
  EXPECT_EQ(rows[0].peak_live, 5 * MiB);
  EXPECT_EQ(rows[0].failed, 0u);
  EXPECT_EQ(rows[1].name, "c");
  EXPECT_EQ(rows[1].failed, 1u);
  EXPECT_EQ(rows[1].peak_reserved, 4 * MiB);
  EXPECT_EQ(rows[1].peak_live, 3 * MiB);
}

namespace {

std::vector<std::uint64_t> sequence(std::string const& text, std::size_t window) {
  log_reader reader{text, "o.csv"};
  replay_sequencer order{window};
  std::vector<std::uint64_t> out;
  log_event ev, next;
  while (reader.next(ev)) {
    order.push(ev);
    EXPECT_LE(order.held(), window + 1);
    while (order.pop(next, false)) out.push_back(next.index);
  }
  while (order.pop(next, true)) out.push_back(next.index);
  return out;
}

}  // namespace

TEST(ReplayOrder, KeepsEachThreadsOrderAndMergesThreadsByTime) {
  gpumem_log l;
  l.alloc(0x1, 1, 50, 1)      // 0: thread 1
      .alloc(0x2, 1, 40, 1)   // 1: thread 1, older time written later: stays after 0
      .alloc(0x3, 1, 45, 2)   // 2: thread 2
      .alloc(0x4, 1, 10, 2);  // 3: thread 2
  // Heads: t1 -> 0 (50), t2 -> 2 (45): 2 first; then t2 -> 3 (10): 3; then 0, 1.
  EXPECT_EQ(sequence(l.text(), 1024), (std::vector<std::uint64_t>{2, 3, 0, 1}));
}

TEST(ReplayOrder, AWindowBoundsWhatIsHeldAndKeepsEachThreadsOrder) {
  // Two threads whose rows race: thread 1's rows are written 10 us late. A window
  // wider than the race gives the full merge by time while holding at most window
  // + 1 events; a narrower one cannot see far enough, but never reorders a
  // thread's own rows.
  gpumem_log l;
  for (int i = 0; i < 200; ++i) l.alloc(0x1000 + i, 1, 20'000 + i * 1000 - (i % 2 == 0 ? 10'000 : 0), 1 + i % 2);
  auto const full = sequence(l.text(), 1 << 20);
  EXPECT_EQ(sequence(l.text(), 32), full);
  auto const narrow = sequence(l.text(), 1);
  EXPECT_NE(narrow, full);
  for (auto const& order : {full, narrow}) {
    ASSERT_EQ(order.size(), 200u);
    std::vector<std::uint64_t> last(3, 0);
    std::vector<bool> seen(3, false);
    for (auto i : order) {
      auto const thread = 1 + i % 2;
      if (seen[thread]) { EXPECT_GT(i, last[thread]); }
      seen[thread] = true;
      last[thread] = i;
    }
  }
}

TEST(SimExec, FindsTheSimNextToTheBinary) {
  auto const c = sim_dir_candidates("/opt/gpumem/bin/gpumem-replay");
  EXPECT_EQ(c, (std::vector<std::string>{"/opt/gpumem/simdevice", "/opt/gpumem/lib/gpumem/simdevice"}));
  EXPECT_EQ(find_sim_dir(GPUMEM_REPLAY_BIN), std::string{GPUMEM_BUILD_DIR} + "/simdevice");
}

TEST(ReplayCli, CsvRowsForAConfigFile) {
  temp_file tmp{"tiny.csv"};
  std::string text = tiny_log().text();
  for (std::size_t at; (at = text.find(",cudaFree,")) != std::string::npos;) text.replace(at, 10, ",cudaFreeAsync,");
  write_file(tmp.path(), text);
  std::string const cfg = tmp.dir() + "/pool4.toml";
  write_file(cfg, pool_4mib_toml);
  auto const r = run_command(std::string{GPUMEM_REPLAY_BIN} + " " + tmp.path() + " --config " + cfg + " --csv",
                             tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::string const header =
      "config,chain,peak_reserved_bytes,peak_live_bytes,fragmentation_at_peak,failed_allocations,upstream_calls,"
      "skipped_frees,pages_released_bytes,pages_remapped_bytes,error\n";
  ASSERT_EQ(r.out.substr(0, header.size()), header);
  std::string const row = r.out.substr(header.size());
  EXPECT_EQ(row.substr(0, 6), "pool4,");
  EXPECT_NE(row.find(",7340032,5242880,0.500000,0,2,0,0,0,\n"), std::string::npos) << row;
}

TEST(ReplayCli, DeviceMemoryOptionSizesTheSimulatedDevice) {
  // cuda chain on a 4 MiB device: A [0,1), B [1,3), A freed, C (3 MiB) has no
  // contiguous 3 MiB: one failure.
  temp_file tmp{"tiny.csv"};
  write_file(tmp.path(), tiny_log().text());
  std::string const cfg = tmp.dir() + "/cuda.toml";
  write_file(cfg, "[[chain]]\ntype = \"cuda\"\n");
  auto const r = run_command(
      std::string{GPUMEM_REPLAY_BIN} + " " + tmp.path() + " --config " + cfg + " --device-memory 4MiB --csv",
      tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\ncuda,cuda,3145728,3145728,0.000000,1,2,0,0,0,\n"), std::string::npos) << r.out;
}

TEST(ReplayCli, TableOfTheBuiltInChainsForTheExample) {
  temp_file tmp;
  auto const r = run_command(std::string{GPUMEM_REPLAY_BIN} + " " + GPUMEM_SOURCE_DIR + "/examples/logs/training.csv",
                             tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("replay of " + std::string{GPUMEM_SOURCE_DIR} +
                       "/examples/logs/training.csv: 232 events, 1 threads, 2 streams (gpumem log)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("device: simulated, 1 GiB (one per configuration)\n"), std::string::npos) << r.out;
  for (char const* name : {"\ndefault ", "\npool ", "\nbinning ", "\ncuda "}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name << " missing in\n" << r.out;
  }
  // Every chain peaks at the log's own peak live; the OOM request fails everywhere.
  std::size_t rows = 0;
  for (std::size_t at = r.out.find("41.87 MiB"); at != std::string::npos; at = r.out.find("41.87 MiB", at + 1)) ++rows;
  EXPECT_GE(rows, 4u) << r.out;
}

TEST(ReplayCli, UnreadableLogAndBadOptionsExitTwo) {
  temp_file tmp;
  std::string const hint = "run 'gpumem-replay --help' for the options\n";
  auto const missing = run_command(replay_bin() + tmp.dir() + "/none.csv", tmp.path());
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(missing.err, "error: " + tmp.dir() + "/none.csv: cannot read: No such file or directory\n");
  auto const bad = run_command(replay_bin() + "x.csv --device-memory 50%", tmp.path());
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.err, "gpumem-replay: --device-memory: needs a size in bytes, got '50%'\n" + hint);
  auto const two = run_command(replay_bin() + "a.csv b.csv", tmp.path());
  EXPECT_EQ(two.status, 2);
  EXPECT_EQ(two.err, "gpumem-replay: The following argument was not expected: b.csv\n" + hint);
  auto const opt = run_command(replay_bin() + "a.csv --frobnicate", tmp.path());
  EXPECT_EQ(opt.status, 2);
  EXPECT_EQ(opt.err, "gpumem-replay: The following argument was not expected: --frobnicate\n" + hint);
  auto const value = run_command(replay_bin() + "a.csv --config", tmp.path());
  EXPECT_EQ(value.status, 2);
  EXPECT_EQ(value.err, "gpumem-replay: --config: 1 required FILE missing\n" + hint);
  auto const help = run_command(replay_bin() + "--help", tmp.path());
  EXPECT_EQ(help.status, 0);
  for (char const* option : {"--config FILE", "--device-memory SIZE", "--csv", "--real-device", "LOG"}) {
    EXPECT_NE(help.out.find(option), std::string::npos) << option << " missing in\n" << help.out;
  }
}

TEST(ReplayCli, ADeviceSizeTheHostCannotMapIsAClearErrorNotAnAbort) {
  temp_file tmp{"tiny.csv"};
  write_file(tmp.path(), tiny_log().text());
  // 2^63 bytes fits no host's address space.
  auto const r = run_command(replay_bin() + tmp.path() + " --device-memory 9223372036854775808 --csv", tmp.path());
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("gpumem-replay: the simulated device could not be given 9223372036854775808 bytes of memory "
                       "(the host could not map that much); pass a smaller --device-memory\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
  // 100 TiB maps on some hosts and not on others: a table or the clear error, never a crash.
  auto const t = run_command(replay_bin() + tmp.path() + " --device-memory 100TiB --csv", tmp.path());
  EXPECT_TRUE(t.status == 0 || (t.status == 2 && t.err.find("could not be given") != std::string::npos))
      << t.status << ": " << t.err;
}

TEST(ReplayCli, AHugeAllocationInTheLogFailsInTheReplay) {
  temp_file tmp{"huge.csv"};
  std::uint64_t const tib = std::uint64_t{1} << 40;
  gpumem_log l;
  l.alloc(0x1000, 100 * tib, 1).alloc(0x2000, MiB, 2).free(0x1000, 100 * tib, 3).alloc(0x3000, ~std::uint64_t{0}, 4);
  write_file(tmp.path(), l.text());
  auto const r = run_command(replay_bin() + tmp.path() + " --csv", tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("the log's peak live (16777216 TiB) is more than a simulated device holds: replaying on 4 TiB"),
            std::string::npos)
      << r.err;
  std::size_t rows = 0;
  for (char const* name : {"\ndefault,", "\npool,", "\nbinning,", "\ncuda,"}) {
    auto const at = r.out.find(name);
    ASSERT_NE(at, std::string::npos) << name << r.out;
    std::string const row = r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
    // peak live 1 MiB: the 100 TiB and 2^64 - 1 byte requests failed; their frees were skipped.
    EXPECT_NE(row.find(",1048576,"), std::string::npos) << row;
    EXPECT_NE(row.find(",2,"), std::string::npos) << row;
    EXPECT_EQ(row.back(), ',') << "error column set: " << row;
    ++rows;
  }
  EXPECT_EQ(rows, 4u);
}

TEST(ReplayCli, AnIncompleteLogIsReplayedWithAWarning) {
  temp_file tmp{"inc.csv"};
  write_file(tmp.path(), tiny_log().text() + "#gpumem incomplete,dropped_rows=5,reason=log file truncated\n");
  auto const r = run_command(replay_bin() + tmp.path() + " --config " + GPUMEM_SOURCE_DIR + "/config/default.toml",
                             tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  std::string const note = tmp.path() +
                           " is incomplete: 5 rows were dropped (log file truncated); the replay misses them, so its "
                           "numbers may be low";
  EXPECT_EQ(r.err, "warning: " + note + "\n");
  EXPECT_NE(r.out.find("\nWARNING: " + note + "\n"), std::string::npos) << r.out;
}

TEST(ReplayCli, APipeNeedsTheDeviceSize) {
  temp_file tmp{"tiny.csv"};
  write_file(tmp.path(), tiny_log().text());
  auto const unsized = run_command(replay_bin() + "- < " + tmp.path(), tmp.path());
  EXPECT_EQ(unsized.status, 2);
  EXPECT_EQ(unsized.err,
            "gpumem-replay: - is not a regular file (a pipe?): pass --device-memory, because sizing the "
            "device from the log's peak takes a first pass over it\n");
  auto const sized = run_command("cat " + tmp.path() + " | " + replay_bin() + "- --device-memory 64MiB --csv",
                                 tmp.path());
  EXPECT_EQ(sized.status, 0) << sized.err;
  EXPECT_NE(sized.out.find("\npool,"), std::string::npos) << sized.out;
}

// NUL bytes and no newline, for ever, as the log: refused at the line bound (in
// the child on the simulated device). Under `timeout`: a regression fails, 124.
TEST(ReplayCli, AnEndlessLogOfNulsIsRefusedAtTheLineBound) {
  temp_file tmp;
  std::string const problem =
      ":1: more than 64 KiB of NUL bytes where the header should be (not an allocation log); reading stopped\n";
  for (auto const& [args, name] : {std::pair{"/dev/zero --device-memory 64MiB", "/dev/zero"},
                                   {"- --device-memory 64MiB < /dev/zero", "(standard input)"}}) {
    auto const start = std::chrono::steady_clock::now();
    auto const r = run_command("timeout 10 " + replay_bin() + args, tmp.path());
    auto const took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "error: " + std::string{name} + problem);
    EXPECT_LT(took, std::chrono::seconds{1}) << args;
  }
}

// A --config that is not a regular file follows the shim's rule for GPUMEM_CONFIG
// (src/config/load.cpp): a directory is refused; a FIFO, pipe or device is read
// only while it delivers, 2 s and 1 MiB at most, so a FIFO nobody writes to is
// an error, not a hang.
TEST(ReplayCli, AConfigThatIsNotARegularFileIsReadAsTheShimReadsOne) {
  temp_file tmp{"tiny.csv"};
  write_file(tmp.path(), tiny_log().text());
  std::string const fifo = tmp.dir() + "/fifo.toml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string const run = "timeout 10 " + replay_bin() + tmp.path() + " --config ";
  auto const start = std::chrono::steady_clock::now();
  auto const f = run_command(run + fifo, tmp.path());
  auto const took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(f.status, 2) << f.err;
  EXPECT_EQ(f.out, "");
  EXPECT_EQ(f.err, "gpumem-replay: cannot read config " + fifo +
                       ": it is a FIFO (pipe) and nothing was written to it within 2 s (a named pipe needs a writer "
                       "that closes it; or use a regular file)\n");
  EXPECT_LT(took, std::chrono::seconds{4});

  auto const dir = run_command(run + tmp.dir(), tmp.path());
  EXPECT_EQ(dir.status, 2) << dir.err;
  EXPECT_EQ(dir.err, "gpumem-replay: cannot read config " + tmp.dir() + ": Is a directory\n");

  auto const zero = run_command(run + "/dev/zero", tmp.path());
  EXPECT_EQ(zero.status, 2) << zero.err;
  EXPECT_EQ(zero.err,
            "gpumem-replay: cannot read config /dev/zero: it is a character device and delivered more than 1 MiB "
            "without an end\n");
}

TEST(ReplayCli, OutputThatCannotBeWrittenIsAnError) {
  temp_file tmp{"tiny.csv"};
  write_file(tmp.path(), tiny_log().text());
  auto const r = run_command(
      replay_bin() + tmp.path() + " --config " + GPUMEM_SOURCE_DIR + "/config/default.toml > /dev/full", tmp.path());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "gpumem-replay: cannot write to standard output: No space left on device\n");
}
