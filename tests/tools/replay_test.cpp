// gpumem-replay: numbers for a tiny log worked out by hand, in-process (engine) and
// through the command line (re-exec onto the simulated device, CSV output).
#include "builtin_configs.hpp"
#include "replay_engine.hpp"
#include "sim_exec.hpp"

#include "tools/tool_test_support.hpp"
#include "support/temp_file.hpp"

#include <gtest/gtest.h>

using namespace gpumem::tools;
using gpumem::test::gpumem_log;
using gpumem::test::run_command;
using gpumem::test::temp_file;
using gpumem::test::write_file;

namespace {

constexpr std::uint64_t MiB = 1 << 20;

// A 1 MiB, B 2 MiB, free A, C 3 MiB (all on one stream, stream-ordered frees).
gpumem_log tiny_log() {
  gpumem_log l;
  l.alloc(0xa000000, 1 * MiB, 10).alloc(0xb000000, 2 * MiB, 20).free(0xa000000, 1 * MiB, 30).alloc(0xc000000, 3 * MiB, 40);
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

parsed_log tiny() {
  // Stream-ordered frees: the log's entry says cudaFreeAsync.
  std::string text = tiny_log().text();
  for (std::size_t at; (at = text.find(",cudaFree,")) != std::string::npos;) text.replace(at, 10, ",cudaFreeAsync,");
  auto log = parse_log(text, "tiny.csv");
  EXPECT_TRUE(log.readable);
  return log;
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
  auto const log = tiny();
  auto const r = replay(log, replay_order(log), gpumem::config::parse_toml(pool_4mib_toml, "test"), "pool4");
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

TEST_F(ReplayEngine, CudaChainReservesExactlyWhatIsLive) {
  auto const log = tiny();
  auto const configs = builtin_configs();
  auto const cuda = std::find_if(configs.begin(), configs.end(), [](auto const& c) { return c.name == "cuda"; });
  ASSERT_NE(cuda, configs.end());
  auto const r = replay(log, replay_order(log), cuda->settings, "cuda");
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.peak_reserved, 5 * MiB);  // B + C: every allocation is a device allocation
  EXPECT_EQ(r.upstream_calls, 3u);
  EXPECT_EQ(r.peak_live, 5 * MiB);
  EXPECT_EQ(r.fragmentation_at_peak, 0.0);  // nothing cached
}

TEST_F(ReplayEngine, PoolAtItsMaximumFailsTheAllocationThatDoesNotFit) {
  // Same log, pool capped at 4 MiB: C cannot be placed (largest free block 1 MiB).
  std::string toml = pool_4mib_toml;
  toml.replace(toml.find("min_growth"), 0, "maximum_size = \"4MiB\"\n");
  auto const log = tiny();
  auto const r = replay(log, replay_order(log), gpumem::config::parse_toml(toml, "test"), "capped");
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
  auto const log = parse_log(l.text(), "x.csv");
  auto const r = replay(log, replay_order(log), gpumem::config::parse_toml(pool_4mib_toml, "test"), "p");
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.skipped_frees, 2u);  // 0x9999 never allocated; 0x1000 freed twice
  EXPECT_EQ(r.failed, 0u);         // the logged 2 MiB failure fits this pool...
  EXPECT_EQ(r.allocations, 2u);
  EXPECT_EQ(r.frees, 2u);          // ...and is freed at once
  EXPECT_EQ(r.peak_live, 3 * MiB);
  EXPECT_EQ(r.peak_reserved, 4 * MiB);
}

TEST_F(ReplayEngine, StreamsOfTheLogBecomeStreamsOfTheReplay) {
  // Two threads on their per-thread default streams and one explicit stream: every
  // allocation and free must be accepted by the pool on its own stream.
  gpumem_log l;
  l.alloc(0x1000, MiB, 1, 1, "0x2").alloc(0x2000, MiB, 2, 2, "0x2").alloc(0x3000, MiB, 3, 1, "0x5603a0c0");
  l.free(0x1000, MiB, 4, 1, "0x2").free(0x2000, MiB, 5, 2, "0x2").free(0x3000, MiB, 6, 1, "0x5603a0c0");
  std::string text = l.text();
  for (std::size_t at; (at = text.find(",cudaFree,")) != std::string::npos;) text.replace(at, 10, ",cudaFreeAsync,");
  auto const log = parse_log(text, "s.csv");
  auto const r = replay(log, replay_order(log), gpumem::config::parse_toml(pool_4mib_toml, "test"), "p");
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.allocations, 3u);
  EXPECT_EQ(r.frees, 3u);
  EXPECT_EQ(r.peak_live, 3 * MiB);
  EXPECT_EQ(r.peak_reserved, 4 * MiB);
  EXPECT_EQ(r.failed, 0u);
}

TEST_F(ReplayEngine, ABrokenChainIsReportedNotThrown) {
  auto const log = tiny();
  std::string toml = pool_4mib_toml;
  toml.replace(toml.find("\"4MiB\""), 6, "\"900GiB\"");  // initial reservation cannot succeed
  auto const r = replay(log, replay_order(log), gpumem::config::parse_toml(toml, "test"), "huge");
  ASSERT_TRUE(r.error);
  EXPECT_NE(r.error->find("could not reserve its initial"), std::string::npos) << *r.error;
}

TEST(ReplayOrder, KeepsEachThreadsOrderAndMergesThreadsByTime) {
  gpumem_log l;
  l.alloc(0x1, 1, 50, 1)   // 0: thread 1
      .alloc(0x2, 1, 40, 1)  // 1: thread 1, older time written later: stays after 0
      .alloc(0x3, 1, 45, 2)  // 2: thread 2
      .alloc(0x4, 1, 10, 2); // 3: thread 2
  auto const log = parse_log(l.text(), "o.csv");
  // Heads: t1 -> 0 (50), t2 -> 2 (45): 2 first; then t2 -> 3 (10): 3; then 0, 1.
  EXPECT_EQ(replay_order(log), (std::vector<std::uint32_t>{2, 3, 0, 1}));
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
      "skipped_frees,error\n";
  ASSERT_EQ(r.out.substr(0, header.size()), header);
  std::string const row = r.out.substr(header.size());
  EXPECT_EQ(row.substr(0, 6), "pool4,");
  EXPECT_NE(row.find(",7340032,5242880,0.500000,0,2,0,\n"), std::string::npos) << row;
}

TEST(ReplayCli, DeviceMemoryOptionSizesTheSimulatedDevice) {
  // cuda chain on a 4 MiB device: A [0,1), B [1,3), A freed, C (3 MiB) has no
  // contiguous 3 MiB: one failure.
  temp_file tmp{"tiny.csv"};
  write_file(tmp.path(), tiny_log().text());
  std::string const cfg = tmp.dir() + "/cuda.toml";
  write_file(cfg, "[[chain]]\ntype = \"cuda\"\n");
  auto const r = run_command(std::string{GPUMEM_REPLAY_BIN} + " " + tmp.path() + " --config " + cfg +
                                 " --device-memory 4MiB --csv",
                             tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\ncuda,cuda,3145728,3145728,0.000000,1,2,0,\n"), std::string::npos) << r.out;
}

TEST(ReplayCli, TableOfTheBuiltInChainsForTheExample) {
  temp_file tmp;
  auto const r = run_command(std::string{GPUMEM_REPLAY_BIN} + " " + GPUMEM_SOURCE_DIR + "/examples/logs/training.csv",
                             tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("replay of " + std::string{GPUMEM_SOURCE_DIR} +
                       "/examples/logs/training.csv: 602 events, 2 threads, 3 streams (gpumem log)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("device: simulated, 1 GiB\n"), std::string::npos) << r.out;
  for (char const* name : {"\ndefault ", "\npool ", "\nbinning ", "\ncuda "}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name << " missing in\n" << r.out;
  }
  // Every chain peaks at the log's own peak live; the OOM request fails everywhere.
  std::size_t rows = 0;
  for (std::size_t at = r.out.find("307.5 MiB"); at != std::string::npos; at = r.out.find("307.5 MiB", at + 1)) ++rows;
  EXPECT_GE(rows, 4u) << r.out;
}

TEST(ReplayCli, UnreadableLogAndBadOptionsExitTwo) {
  temp_file tmp;
  auto const missing = run_command(std::string{GPUMEM_REPLAY_BIN} + " " + tmp.dir() + "/none.csv", tmp.path());
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(missing.err, "error: " + tmp.dir() + "/none.csv: cannot read: No such file or directory\n");
  auto const bad = run_command(std::string{GPUMEM_REPLAY_BIN} + " x.csv --device-memory 50%", tmp.path());
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.err.rfind("gpumem-replay: --device-memory needs a size in bytes, got '50%'\n", 0), 0u) << bad.err;
}
