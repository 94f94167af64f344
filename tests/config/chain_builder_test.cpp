// build_chain on the simulated device: order and types, describe(), accessors,
// percentages resolved against cuMemGetInfo, log templates, errors found at build time.

#include <gpumem/config.hpp>

#include <gpumem/call_context.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/limiting_resource_adaptor.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>
#include <gpumem/tracking_resource_adaptor.hpp>

#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

namespace gc = gpumem::config;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20U;
using types = std::vector<std::string>;

std::string data(std::string const& name) {
  return (std::filesystem::path{__FILE__}.parent_path() / "data" / name).string();
}

class ChainBuilder : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpumem::detail::ensure_context() != CUDA_SUCCESS) { GTEST_SKIP() << "no CUDA driver"; }
  }

  static gc::settings parse(std::string const& text) { return gc::parse_toml(text, "t.toml"); }

  static std::size_t free_bytes() {
    std::size_t free = 0;
    std::size_t total = 0;
    EXPECT_EQ(gpumem::detail::driver().cuMemGetInfo(&free, &total), CUDA_SUCCESS);
    return free;
  }

  static bool sim() { return gpumem::test::sim_control::get().present(); }
};

TEST_F(ChainBuilder, EmbeddedDefault) {
  auto chain = gc::build_chain(gc::load(gc::environment{}), 0);
  EXPECT_EQ(chain->types(), (types{"statistics", "pool", "statistics", "vmm"}));
  EXPECT_EQ(chain->describe(), "pool(initial 0 B) \u2192 vmm");
  EXPECT_EQ(chain->device(), 0);
  EXPECT_EQ(&chain->top(), static_cast<gpumem::device_memory_resource*>(&chain->live_stats()));
  EXPECT_NE(&chain->live_stats(), &chain->device_stats());
  EXPECT_EQ(chain->limiter(), nullptr);
  EXPECT_EQ(chain->tracker(), nullptr);
}

TEST_F(ChainBuilder, StreamModeBuildsTheSameChain) {
  auto s = gc::load(gc::environment{});
  s.sync = gc::sync_mode::stream;
  auto chain = gc::build_chain(s, 0);
  EXPECT_EQ(chain->types(), (types{"statistics", "pool", "statistics", "vmm"}));
  EXPECT_EQ(chain->describe(), "pool(initial 0 B) \u2192 vmm");
}

TEST_F(ChainBuilder, NothingCached) {
  auto chain = gc::build_chain(parse("[[chain]]\ntype = \"statistics\"\n[[chain]]\ntype = \"cuda\"\n"), 0);
  EXPECT_EQ(chain->types(), (types{"statistics", "statistics", "statistics", "cuda"}));
  EXPECT_EQ(chain->describe(), "statistics \u2192 cuda");
}

TEST_F(ChainBuilder, AsyncDeviceResource) {
  auto chain = gc::build_chain(parse("[[chain]]\ntype = \"async\"\nrelease_threshold = \"64MiB\"\n"), 0);
  EXPECT_EQ(chain->types(), (types{"statistics", "statistics", "async"}));
  EXPECT_EQ(chain->describe(), "async(release threshold 64 MiB)");
}

TEST_F(ChainBuilder, AdaptorsAboveCachingResources) {
  gc::settings const s = gc::load(gc::environment{{{"GPUMEM_CONFIG", data("adaptors.toml")}}});
  auto chain = gc::build_chain(s, 0);
  EXPECT_EQ(chain->types(), (types{"statistics", "limiting", "tracking", "binning", "pool", "statistics", "cuda"}));
  EXPECT_EQ(chain->describe(),
            "limiting(512 MiB) \u2192 tracking \u2192 binning(256 B, 4 KiB) "
            "\u2192 pool(initial 64 MiB, max 512 MiB (the limit)) \u2192 cuda");
  ASSERT_NE(chain->limiter(), nullptr);
  EXPECT_EQ(chain->limiter()->limit(), 512 * MiB);
  ASSERT_NE(chain->tracker(), nullptr);

  // The pool reserved its initial size from the device, through device_stats.
  EXPECT_EQ(chain->device_stats().bytes().current, static_cast<std::int64_t>(64 * MiB));
  EXPECT_EQ(chain->live_stats().bytes().current, 0);

  // One allocation passes every layer: live stats, limiter, tracker.
  void* p = chain->top().allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(chain->live_stats().bytes().current, 1000);
  EXPECT_EQ(chain->live_stats().allocations().current, 1);
  EXPECT_EQ(chain->tracker()->outstanding_count(), 1U);
  EXPECT_EQ(chain->limiter()->used_bytes(), 1024U);                                       // rounded to 256
  EXPECT_EQ(chain->device_stats().bytes().current, static_cast<std::int64_t>(64 * MiB));  // served by the pool
  chain->top().deallocate(p, 1000);
  EXPECT_EQ(chain->live_stats().bytes().current, 0);
  EXPECT_EQ(chain->tracker()->outstanding_count(), 0U);

  // Past the limit: out of memory from the limiter, nothing reaches the device.
  EXPECT_THROW((void)chain->top().allocate(600 * MiB), gpumem::out_of_memory);
  EXPECT_EQ(chain->device_stats().bytes().current, static_cast<std::int64_t>(64 * MiB));
}

TEST_F(ChainBuilder, SynchronousFreesWaitForReclamation) {
  auto chain = gc::build_chain(gc::load(gc::environment{}), 0);
  void* p = chain->top().allocate(4096);
  {
    gpumem::scoped_call_context ctx{"cudaFree", 0, /*synchronous=*/true};
    chain->top().deallocate(p, 4096);
  }
  EXPECT_EQ(chain->info().pending_bytes, 4096U);
  EXPECT_EQ(chain->live_stats().bytes().current, 0);
  // A trim reclaims it (one barrier) and gives the empty slab back.
  (void)chain->top().release();
  EXPECT_EQ(chain->info().pending_bytes, 0U);
  EXPECT_EQ(chain->info().reserved_bytes, 0U);
}

TEST_F(ChainBuilder, PercentSizesResolveAgainstFreeDeviceMemory) {
  if (!sim()) { GTEST_SKIP() << "exact free memory needs the simulated device"; }
  std::size_t const free = free_bytes();
  ASSERT_GT(free, 0U);
  auto chain = gc::build_chain(parse(R"(
[[chain]]
type = "limiting"
limit = "25%"
[[chain]]
type = "pool"
initial_size = "50%"
maximum_size = "90%"
[[chain]]
type = "cuda"
)"),
                               0);
  std::size_t const quarter = (free / 4) & ~std::size_t{255};
  std::size_t const half = (free / 2) & ~std::size_t{255};
  std::size_t const ninety = static_cast<std::size_t>(static_cast<long double>(free) * 0.9L) & ~std::size_t{255};
  EXPECT_EQ(chain->limiter()->limit(), quarter);
  EXPECT_EQ(chain->device_stats().bytes().current, static_cast<std::int64_t>(half));
  EXPECT_EQ(chain->describe(), "limiting(25% = " + gc::format_bytes(quarter) +
                                   ") \u2192 pool(initial 50% = " + gc::format_bytes(half) +
                                   ", max 90% = " + gc::format_bytes(ninety) + ") \u2192 cuda");
  // The sim's device really holds the pool's initial reservation.
  EXPECT_GE(gpumem::test::sim_control::get().live_bytes(0), half);
}

TEST_F(ChainBuilder, PercentMaximumBelowAbsoluteInitialFailsAtBuild) {
  if (!sim()) { GTEST_SKIP() << "exact free memory needs the simulated device"; }
  std::size_t const free = free_bytes();
  std::size_t const half = (free / 2) & ~std::size_t{255};
  std::size_t const initial = half + MiB;
  auto const s = parse("[[chain]]\ntype = \"pool\"\ninitial_size = " + std::to_string(initial) +
                       "\nmaximum_size = \"50%\"\n[[chain]]\ntype = \"cuda\"\n");
  try {
    (void)gc::build_chain(s, 0);
    FAIL() << "built a pool whose maximum is below its initial size";
  } catch (gc::config_error const& e) {
    EXPECT_EQ(std::string{e.what()},
              "gpumem: config error: t.toml:1:1: chain[0].maximum_size: maximum 50% = " + gc::format_bytes(half) +
                  " is below initial " + gc::format_bytes(initial) + " (maximum_size must be at least initial_size)");
  }
  EXPECT_EQ(gpumem::test::sim_control::get().live_bytes(0), 0U);  // nothing was reserved
}

TEST_F(ChainBuilder, LoggingFileTemplateIsExpanded) {
  auto const dir = std::filesystem::temp_directory_path() / ("gpumem-config-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto chain = gc::build_chain(parse("[[chain]]\ntype = \"logging\"\nfile = \"" + dir.string() +
                                     "/log-%d-%p.csv\"\n[[chain]]\ntype = \"cuda\"\n"),
                               0);
  auto const expected = dir / ("log-0-" + std::to_string(getpid()) + ".csv");
  EXPECT_EQ(chain->describe(), "logging(" + expected.string() + ") \u2192 cuda");
  void* p = chain->top().allocate(512);
  chain->top().deallocate(p, 512);
  chain.reset();  // closes the log
  std::ifstream in{expected};
  std::string header;
  std::getline(in, header);
  EXPECT_TRUE(header.starts_with("Thread,Time,Action,Pointer,Size,Stream")) << header;
  std::filesystem::remove_all(dir);
}

TEST_F(ChainBuilder, UnwritableLogFileIsAConfigError) {
  auto const s = parse(
      "[[chain]]\ntype = \"statistics\"\n[[chain]]\ntype = \"logging\"\n"
      "file = \"/nonexistent-dir/log-%d.csv\"\n[[chain]]\ntype = \"cuda\"\n");
  try {
    (void)gc::build_chain(s, 0);
    FAIL() << "built a logging adaptor on an unwritable path";
  } catch (gc::config_error const& e) {
    std::string const msg = e.what();
    EXPECT_TRUE(msg.starts_with("gpumem: config error: t.toml:3:1: chain[1].file: ")) << msg;
    EXPECT_NE(msg.find("/nonexistent-dir/log-0.csv"), std::string::npos) << msg;
    EXPECT_TRUE(msg.ends_with(" (choose a writable path; %p pid, %r rank, %h host, %d device)")) << msg;
  }
}

TEST_F(ChainBuilder, EveryResourceType) {
  auto chain = gc::build_chain(parse(R"(
[[chain]]
type = "statistics"
[[chain]]
type = "tracking"
capture_stacks = true
[[chain]]
type = "fixed_size"
block_size = "64KiB"
preallocate = 4
[[chain]]
type = "binning"
min_size = "1KiB"
max_size = "4KiB"
[[chain]]
type = "pool"
min_growth = "8MiB"
[[chain]]
type = "managed"
)"),
                               0);
  EXPECT_EQ(chain->types(),
            (types{"statistics", "statistics", "tracking", "fixed_size", "binning", "pool", "statistics", "managed"}));
  EXPECT_EQ(chain->describe(),
            "statistics \u2192 tracking(stacks) \u2192 fixed_size(block 64 KiB, "
            "preallocate 4) \u2192 binning(1 KiB..4 KiB) \u2192 pool(initial 0 B, min growth 8 MiB) \u2192 managed");
  void* p = chain->top().allocate(2000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(chain->info().used_bytes > 0, true);
  chain->top().deallocate(p, 2000);
}

TEST_F(ChainBuilder, RebuildsForAnotherDeviceOrdinal) {
  auto chain = gc::build_chain(parse("[[chain]]\ntype = \"cuda\"\n"), 1);
  EXPECT_EQ(chain->device(), 1);
  EXPECT_EQ(chain->types(), (types{"statistics", "statistics", "cuda"}));
}

TEST_F(ChainBuilder, HandMadeSettingsAreValidated) {
  gc::settings s;
  s.source = "hand-made";
  EXPECT_THROW((void)gc::build_chain(s, 0), gc::config_error);
  s.chain.push_back(gc::resource_spec{"pool", gc::pool_spec{}, "hand-made", 0, 0});
  try {
    (void)gc::build_chain(s, 0);
    FAIL();
  } catch (gc::config_error const& e) {
    EXPECT_EQ(std::string{e.what()},
              "gpumem: config error: hand-made: chain[0].type: \"pool\" has no upstream to get memory from (add a "
              "device resource after it: cuda | vmm | async | managed)");
  }
}

}  // namespace
