// parse_toml: typed values of every key, and every error path with its exact message.

#include <gpumem/config.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>

namespace gc = gpumem::config;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20U;
constexpr std::size_t GiB = std::size_t{1} << 30U;

std::filesystem::path source_dir() { return std::filesystem::path{__FILE__}.parent_path().parent_path().parent_path(); }

std::string read(std::filesystem::path const& p) {
  std::ifstream in{p};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The message parse_toml throws for `text` (named "t.toml"), or "" if it accepted it.
std::string error_of(std::string const& text, gc::on_error* policy = nullptr) {
  try {
    (void)gc::parse_toml(text, "t.toml");
  } catch (gc::config_error const& e) {
    if (policy != nullptr) { *policy = e.policy; }
    return e.what();
  }
  return "";
}

std::string const cuda = "\n[[chain]]\ntype = \"cuda\"\n";

TEST(ParseToml, FullExample) {
  gc::settings const s = gc::parse_toml(R"(
[gpumem]
sync_mode = "stream"
log_file = "gpumem-%p.csv"
log_level = "debug"
on_error = "passthrough"
report = true
report_file = "report-%r.txt"
deferred_flush = "64MiB"
[[chain]]
type = "limiting"
limit = "8GiB"
[[chain]]
type = "tracking"
capture_stacks = true
[[chain]]
type = "statistics"
[[chain]]
type = "logging"
file = "inner-%d.csv"
[[chain]]
type = "pool"
initial_size = "50%"
maximum_size = "90%"
min_growth = 4194304
[[chain]]
type = "cuda"
)",
                                        "full.toml");
  EXPECT_EQ(s.source, "full.toml");
  EXPECT_FALSE(s.disabled);
  EXPECT_EQ(s.sync, gc::sync_mode::stream);
  EXPECT_EQ(s.log_file, "gpumem-%p.csv");
  EXPECT_EQ(s.log_level, gpumem::log_level::debug);
  EXPECT_EQ(s.on_config_error, gc::on_error::passthrough);
  EXPECT_TRUE(s.report);
  EXPECT_EQ(s.report_file, "report-%r.txt");
  ASSERT_EQ(s.warnings.size(), 1U);  // deferred_flush is obsolete
  EXPECT_EQ(s.warnings[0],
            "full.toml:9:1: gpumem.deferred_flush no longer has an effect (safe mode reclaims freed "
            "memory with GPU-side barriers, without device synchronizations): remove it");
  ASSERT_EQ(s.chain.size(), 6U);
  EXPECT_EQ(s.chain[0].type, "limiting");
  EXPECT_EQ(std::get<gc::limiting_spec>(s.chain[0].options).limit, gc::size_value::of_bytes(8 * GiB));
  EXPECT_EQ(s.chain[0].source, "full.toml");
  EXPECT_EQ(s.chain[0].line, 10);
  EXPECT_EQ(s.chain[0].column, 1);
  EXPECT_TRUE(std::get<gc::tracking_spec>(s.chain[1].options).capture_stacks);
  EXPECT_TRUE(std::holds_alternative<gc::statistics_spec>(s.chain[2].options));
  EXPECT_EQ(std::get<gc::logging_spec>(s.chain[3].options).file, "inner-%d.csv");
  auto const& pool = std::get<gc::pool_spec>(s.chain[4].options);
  EXPECT_EQ(pool.initial_size, gc::size_value::of_percent(50));
  EXPECT_EQ(pool.maximum_size, gc::size_value::of_percent(90));
  EXPECT_EQ(pool.min_growth, gc::size_value::of_bytes(4 * MiB));
  EXPECT_EQ(s.chain[4].line, 21);
  EXPECT_TRUE(std::holds_alternative<gc::cuda_spec>(s.chain[5].options));
}

TEST(ParseToml, DefaultsOfOmittedKeys) {
  gc::settings const s = gc::parse_toml(R"(
[[chain]]
type = "pool"
[[chain]]
type = "binning"
[[chain]]
type = "fixed_size"
[[chain]]
type = "async"
)",
                                        "d.toml");
  EXPECT_EQ(s.sync, gc::sync_mode::safe);
  EXPECT_EQ(s.log_file, "");
  EXPECT_EQ(s.log_level, gpumem::log_level::warn);
  EXPECT_EQ(s.on_config_error, gc::on_error::fail);
  EXPECT_FALSE(s.report);
  auto const& pool = std::get<gc::pool_spec>(s.chain[0].options);
  EXPECT_EQ(pool.initial_size, gc::size_value::of_bytes(0));
  EXPECT_FALSE(pool.maximum_size.has_value());
  EXPECT_EQ(pool.min_growth, gc::size_value::of_bytes(2 * MiB));
  auto const& bins = std::get<gc::binning_spec>(s.chain[1].options).bins;
  ASSERT_EQ(bins.size(), 13U);  // 256 B .. 1 MiB
  EXPECT_EQ(bins.front(), 256U);
  EXPECT_EQ(bins.back(), MiB);
  auto const& fixed = std::get<gc::fixed_size_spec>(s.chain[2].options);
  EXPECT_EQ(fixed.block_size, gc::size_value::of_bytes(MiB));
  EXPECT_EQ(fixed.preallocate, 128U);
  auto const& async = std::get<gc::async_spec>(s.chain[3].options);
  EXPECT_FALSE(async.release_threshold.has_value());
  EXPECT_FALSE(async.initial_size.has_value());
}

TEST(ParseToml, BinningForms) {
  auto bins_of = [](std::string const& body) {
    return std::get<gc::binning_spec>(
               gc::parse_toml("[[chain]]\ntype = \"binning\"\n" + body + cuda, "b.toml").chain[0].options)
        .bins;
  };
  EXPECT_EQ(bins_of("min_size = \"1KiB\"\nmax_size = \"8KiB\"\n"), (std::vector<std::size_t>{1024, 2048, 4096, 8192}));
  EXPECT_EQ(bins_of("min_size = 512\nmax_size = 512\n"), (std::vector<std::size_t>{512}));
  EXPECT_EQ(bins_of("bins = [\"256B\", 768, \"4KiB\"]\n"), (std::vector<std::size_t>{256, 768, 4096}));
}

TEST(ParseToml, LogQueue) {
  // Rows are always queued: the key of earlier versions still loads.
  EXPECT_NO_THROW((void)gc::parse_toml("[gpumem]\nlog_queue = true\n", "q.toml"));
  EXPECT_NO_THROW((void)gc::parse_toml("[gpumem]\nlog_queue = false\n", "q.toml"));
  EXPECT_THROW((void)gc::parse_toml("[gpumem]\nlog_queue = 1\n", "q.toml"), gc::config_error);
}

TEST(ParseToml, FileWithoutChainKeepsTheDefaultChain) {
  gc::settings const s = gc::parse_toml("[gpumem]\nreport = true\n", "only-options.toml");
  EXPECT_TRUE(s.report);
  ASSERT_EQ(s.chain.size(), 2U);
  EXPECT_EQ(s.chain[0].type, "pool");
  EXPECT_EQ(s.chain[0].source, "embedded default");
  EXPECT_EQ(s.chain[1].type, "vmm");
}

TEST(ParseToml, EmbeddedDefaultIsConfigDefaultToml) {
  EXPECT_EQ(gc::default_toml(), read(source_dir() / "config" / "default.toml"));
  gc::settings const s = gc::parse_toml(gc::default_toml(), "embedded default");
  EXPECT_EQ(s.sync, gc::sync_mode::safe);
  EXPECT_EQ(s.log_file, "");
  ASSERT_EQ(s.chain.size(), 2U);
  auto const& pool = std::get<gc::pool_spec>(s.chain[0].options);
  EXPECT_EQ(pool.initial_size, gc::size_value::of_bytes(0));
  EXPECT_FALSE(pool.maximum_size.has_value());
  EXPECT_TRUE(std::holds_alternative<gc::vmm_spec>(s.chain[1].options));
}

TEST(ParseToml, ReleaseThreshold) {
  auto const rule = [](std::string const& value) {
    return gc::parse_toml("[gpumem]\nrelease_threshold = " + value + "\n", "t.toml").release_threshold;
  };
  EXPECT_EQ(rule("\"auto\""), gc::release_rule{});
  EXPECT_EQ(rule("\"unlimited\""), gc::release_rule::keep(gc::release_rule::never));
  EXPECT_EQ(rule("\"4GiB\""), gc::release_rule::keep(std::uint64_t{4} << 30));
  EXPECT_EQ(rule("\"1.5GB\""), gc::release_rule::keep(1'500'000'000));
  EXPECT_EQ(rule("0"), gc::release_rule::keep(0));
  EXPECT_EQ(rule("4096"), gc::release_rule::keep(4096));
  EXPECT_EQ(gc::parse_toml("[gpumem]\nreport = true\n", "t.toml").release_threshold, gc::release_rule{});
  EXPECT_EQ(gc::parse_toml(gc::default_toml(), "embedded default").release_threshold, gc::release_rule{});
  EXPECT_EQ(gc::release_rule{}.to_string(), "auto");
  EXPECT_EQ(gc::release_rule::keep(gc::release_rule::never).to_string(), "unlimited");
  EXPECT_EQ(gc::release_rule::keep(std::uint64_t{512} << 20).to_string(), "512 MiB");
}

TEST(ParseToml, HostTable) {
  gc::settings const s = gc::parse_toml("[host]\npool = true\nlimit = \"8GiB\"\npool_max = 1048576\n", "t.toml");
  EXPECT_TRUE(s.host.pool);
  EXPECT_EQ(s.host.limit, 8 * GiB);
  EXPECT_EQ(s.host.pool_max, MiB);
  gc::settings const d = gc::parse_toml(gc::default_toml(), "embedded default");
  EXPECT_FALSE(d.host.pool);
  EXPECT_FALSE(d.host.limit.has_value());
  EXPECT_FALSE(d.host.pool_max.has_value());
  // A file with only [host] keeps the default device chain.
  EXPECT_EQ(gc::parse_toml("[host]\npool = true\n", "t.toml").chain.size(), d.chain.size());
}

TEST(ParseToml, ManagedTableIsItsOwnAndTheHostTableIsUntouched) {
  gc::settings const s = gc::parse_toml("[managed]\npool = true\nlimit = \"2GiB\"\npool_max = \"512MiB\"\n", "t.toml");
  EXPECT_TRUE(s.managed.pool);
  EXPECT_EQ(s.managed.limit, 2 * GiB);
  EXPECT_EQ(s.managed.pool_max, 512 * MiB);
  EXPECT_FALSE(s.host.pool);
  EXPECT_FALSE(s.host.limit.has_value());
  gc::settings const d = gc::parse_toml(gc::default_toml(), "embedded default");
  EXPECT_FALSE(d.managed.pool);
  EXPECT_FALSE(d.managed.limit.has_value());
  EXPECT_FALSE(d.managed.pool_max.has_value());
}

TEST(ParseToml, EveryShippedExampleParses) {
  int count = 0;
  for (auto const& entry : std::filesystem::directory_iterator{source_dir() / "config"}) {
    if (entry.path().extension() != ".toml") { continue; }
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW((void)gc::parse_toml(read(entry.path()), entry.path().string()));
    ++count;
  }
  EXPECT_GE(count, 5);
}

struct error_case {
  std::string name;
  std::string text;
  std::string message;
};

// The case's name, not its bytes, in test listings and failure messages.
void PrintTo(error_case const& c, std::ostream* os) { *os << c.name; }

class ParseTomlError : public ::testing::TestWithParam<error_case> {};

TEST_P(ParseTomlError, ExactMessage) { EXPECT_EQ(error_of(GetParam().text), GetParam().message); }

std::string const E = "gpumem: config error: t.toml:";

INSTANTIATE_TEST_SUITE_P(
    Errors, ParseTomlError,
    ::testing::Values(
        // Syntax and structure.
        error_case{"syntax", "[gpumem\n",
                   E + "1:8: syntax: Error while parsing table header: expected ']', saw '\\n' "
                       "(see config/default.toml for the format)"},
        error_case{
            "unknown_table", "[gpumen]\n",
            E + "1:2: gpumen: unknown table or key \"gpumen\" (valid: [gpumem], [host], [managed] and [[chain]])"},
        error_case{
            "unknown_top_key", "colour = 1\n",
            E + "1:1: colour: unknown table or key \"colour\" (valid: [gpumem], [host], [managed] and [[chain]])"},
        error_case{"gpumem_not_table", "gpumem = 1\n",
                   E + "1:10: gpumem: expected a table, got an integer (write [gpumem] followed by its keys)"},
        error_case{"chain_not_array", "chain = \"pool\"\n",
                   E + "1:9: chain: expected an array of tables, got a string (write each entry as [[chain]])"},
        error_case{"chain_single_table", "[chain]\ntype = \"cuda\"\n",
                   E + "1:1: chain: expected an array of tables, got a table (write each entry as [[chain]])"},
        error_case{"chain_empty", "chain = []\n",
                   E + "1:9: chain: the chain is empty (list [[chain]] entries outermost first, ending in a "
                       "device resource: cuda | vmm | async | managed)"},
        error_case{"entry_not_table", "chain = [1]\n",
                   E + "1:10: chain[0]: expected a table, got an integer (write each entry as [[chain]])"},
        // [host] keys.
        error_case{"host_not_table", "host = true\n",
                   E + "1:8: host: expected a table, got a boolean (write [host] followed by its keys)"},
        error_case{"unknown_host_key", "[host]\npools = true\n",
                   E + "2:1: host.pools: unknown key \"pools\" (valid: pool, limit, pool_max)"},
        error_case{"host_pool_not_bool", "[host]\npool = \"yes\"\n",
                   E + "2:8: host.pool: expected a boolean, got a string (true or false)"},
        error_case{"host_limit_percent", "[host]\nlimit = \"50%\"\n",
                   E + "2:9: host.limit: \"50%\" is a percentage; this key needs an absolute size (e.g. 4096, 64KiB, "
                       "2MiB)"},
        error_case{"host_limit_zero", "[host]\nlimit = 0\n",
                   E + "2:9: host.limit: 0 would refuse every pinned allocation (remove the key for no cap, or give a "
                       "size above 0)"},
        // [managed]: the same keys, its own names in the messages.
        error_case{"managed_not_table", "managed = 1\n",
                   E + "1:11: managed: expected a table, got an integer (write [managed] followed by its keys)"},
        error_case{"unknown_managed_key", "[managed]\nattach = 1\n",
                   E + "2:1: managed.attach: unknown key \"attach\" (valid: pool, limit, pool_max)"},
        error_case{"managed_limit_zero", "[managed]\nlimit = 0\n",
                   E + "2:9: managed.limit: 0 would refuse every managed allocation (remove the key for no cap, or "
                       "give a size above 0)"},
        // [gpumem] keys.
        error_case{
            "unknown_gpumem_key", "[gpumem]\nsync_mod = \"safe\"\n",
            E + "2:1: gpumem.sync_mod: unknown key \"sync_mod\" (valid: sync_mode, log_file, log_queue, log_level, "
                "on_error, report, report_file, stacks, stack_sample, stack_min_size, release_threshold, "
                "deferred_flush)"},
        error_case{"stacks_range", "[gpumem]\nstacks = 129\n",
                   E + "2:10: gpumem.stacks: 129 is out of range (0 (off) or the frames to record per allocation, 1 "
                       "to 128)"},
        error_case{"stacks_type", "[gpumem]\nstacks = \"16\"\n",
                   E + "2:10: gpumem.stacks: expected an integer, got a string (0 (off) or the frames to record per "
                       "allocation, 1 to 128)"},
        error_case{"stack_sample_zero", "[gpumem]\nstack_sample = 0\n",
                   E + "2:16: gpumem.stack_sample: 0 is out of range (1 (every allocation) or K: every K-th "
                       "allocation of a thread)"},
        error_case{"sync_mode_value", "[gpumem]\nsync_mode = \"fast\"\n",
                   E + "2:13: gpumem.sync_mode: unknown value \"fast\" (valid: safe|stream)"},
        error_case{"sync_mode_type", "[gpumem]\nsync_mode = 1\n",
                   E + "2:13: gpumem.sync_mode: expected a string, got an integer (valid: safe|stream)"},
        error_case{"log_level_value", "[gpumem]\nlog_level = \"verbose\"\n",
                   E + "2:13: gpumem.log_level: unknown value \"verbose\" (valid: trace|debug|info|warn|error|off)"},
        error_case{"on_error_value", "[gpumem]\non_error = \"ignore\"\n",
                   E + "2:12: gpumem.on_error: unknown value \"ignore\" (valid: fail|passthrough)"},
        error_case{"report_type", "[gpumem]\nreport = \"yes\"\n",
                   E + "2:10: gpumem.report: expected a boolean, got a string (true or false)"},
        error_case{"log_file_type", "[gpumem]\nlog_file = 3\n",
                   E + "2:12: gpumem.log_file: expected a string, got an integer (a file path; %p pid, %r rank, "
                       "%h host, %d device, %% a literal %)"},
        error_case{"log_file_placeholder", "[gpumem]\nlog_file = \"a-%q.csv\"\n",
                   E + "2:12: gpumem.log_file: unknown placeholder %q (valid placeholders: %p pid, %r rank, "
                       "%h host, %d device, %% a literal %)"},
        error_case{"report_file_lone_percent", "[gpumem]\nreport_file = \"r%\"\n",
                   E + "2:15: gpumem.report_file: ends with a lone % (valid placeholders: %p pid, %r rank, "
                       "%h host, %d device, %% a literal %)"},
        error_case{"release_threshold_word", "[gpumem]\nrelease_threshold = \"sometimes\"\n",
                   E + "2:21: gpumem.release_threshold: \"sometimes\": not a number (auto, "
                       "unlimited, or the cached bytes to keep: a size such as 0, 512MiB or 4GiB; auto:SECONDS sets "
                       "auto's window (auto is auto:10))"},
        error_case{"release_threshold_percent", "[gpumem]\nrelease_threshold = \"25%\"\n",
                   E + "2:21: gpumem.release_threshold: \"25%\" is a percentage; this key needs an absolute size "
                       "(auto, unlimited, or the cached bytes to keep: a size such as 0, 512MiB or 4GiB; auto:SECONDS "
                       "sets auto's window (auto is auto:10))"},
        error_case{"release_threshold_negative", "[gpumem]\nrelease_threshold = -1\n",
                   E + "2:21: gpumem.release_threshold: negative size -1 (auto, unlimited, or the cached bytes to "
                       "keep: a size such as 0, 512MiB or 4GiB; auto:SECONDS sets auto's window (auto is auto:10))"},
        error_case{"release_threshold_type", "[gpumem]\nrelease_threshold = true\n",
                   E + "2:21: gpumem.release_threshold: expected a string or an integer, got a boolean (auto, "
                       "unlimited, or the cached bytes to keep: a size such as 0, 512MiB or 4GiB; auto:SECONDS sets "
                       "auto's window (auto is auto:10))"},
        error_case{"deferred_flush_percent", "[gpumem]\ndeferred_flush = \"10%\"\n",
                   E + "2:18: gpumem.deferred_flush: \"10%\" is a percentage; this key needs an absolute size "
                       "(e.g. 4096, 64KiB, 2MiB)"},
        // Chain entries.
        error_case{"missing_type", "[[chain]]\nlimit = 1\n",
                   E + "1:1: chain[0].type: missing (every [[chain]] entry needs type = one of: pool, binning, "
                       "fixed_size, async, cuda, vmm, managed, limiting, statistics, tracking, logging)"},
        error_case{"unknown_type", "[[chain]]\ntype = \"poool\"\n",
                   E + "2:8: chain[0].type: unknown value \"poool\" (valid: pool|binning|fixed_size|async|cuda|"
                       "vmm|managed|limiting|statistics|tracking|logging)"},
        error_case{"type_not_string", "[[chain]]\ntype = true\n",
                   E + "2:8: chain[0].type: expected a string, got a boolean (valid: pool|binning|fixed_size|"
                       "async|cuda|vmm|managed|limiting|statistics|tracking|logging)"},
        error_case{"unknown_pool_key", "[[chain]]\ntype = \"pool\"\ninitial = \"1GiB\"\n" + cuda,
                   E + "3:1: chain[0].initial: unknown key \"initial\" (valid for pool: initial_size maximum_size "
                       "min_growth)"},
        error_case{"cuda_takes_no_options", "[[chain]]\ntype = \"cuda\"\ndevice = 1\n",
                   E + "3:1: chain[0].device: unknown key \"device\" (\"cuda\" takes no options)"},
        error_case{"bad_size", "[[chain]]\ntype = \"pool\"\ninitial_size = \"12XB\"\n" + cuda,
                   E + "3:16: chain[0].initial_size: \"12XB\": unknown unit \"XB\" (a size such as 4096, 512MiB, "
                       "8GiB, 1.5GB or 50% of free device memory; units B, KiB/MiB/GiB/TiB or K/M/G/T (1024), "
                       "kB/MB/GB/TB (1000))"},
        error_case{"negative_size", "[[chain]]\ntype = \"pool\"\nmaximum_size = -5\n" + cuda,
                   E + "3:16: chain[0].maximum_size: negative size -5 (a size such as 4096, 512MiB, 8GiB, 1.5GB or "
                       "50% of free device memory; units B, KiB/MiB/GiB/TiB or K/M/G/T (1024), kB/MB/GB/TB (1000))"},
        error_case{"percent_over_100", "[[chain]]\ntype = \"limiting\"\nlimit = \"150%\"\n" + cuda,
                   E + "3:9: chain[0].limit: \"150%\": percentage above 100% (a size such as 4096, 512MiB, 8GiB, "
                       "1.5GB or 50% of free device memory; units B, KiB/MiB/GiB/TiB or K/M/G/T (1024), "
                       "kB/MB/GB/TB (1000))"},
        error_case{"float_size", "[[chain]]\ntype = \"pool\"\nmin_growth = 1.5\n" + cuda,
                   E + "3:14: chain[0].min_growth: expected a size (string or integer), got a floating-point number "
                       "(a size such as 4096, 512MiB, 8GiB, 1.5GB or 50% of free device memory; units B, "
                       "KiB/MiB/GiB/TiB or K/M/G/T (1024), kB/MB/GB/TB (1000))"},
        error_case{"limit_missing", "[[chain]]\ntype = \"limiting\"\n" + cuda,
                   E + "1:1: chain[0].limit: missing (e.g. limit = \"8GiB\" or \"80%\")"},
        error_case{"block_size_percent", "[[chain]]\ntype = \"fixed_size\"\nblock_size = \"1%\"\n" + cuda,
                   E + "3:14: chain[0].block_size: \"1%\" is a percentage; this key needs an absolute size "
                       "(e.g. 4096, 64KiB, 2MiB)"},
        error_case{"block_size_zero", "[[chain]]\ntype = \"fixed_size\"\nblock_size = 0\n" + cuda,
                   E + "3:14: chain[0].block_size: block size 0 (at least 256 B)"},
        error_case{"preallocate_zero", "[[chain]]\ntype = \"fixed_size\"\npreallocate = 0\n" + cuda,
                   E + "3:15: chain[0].preallocate: 0 blocks (at least 1)"},
        error_case{"preallocate_type", "[[chain]]\ntype = \"fixed_size\"\npreallocate = \"8\"\n" + cuda,
                   E + "3:15: chain[0].preallocate: expected an integer, got a string (blocks reserved per growth, "
                       "at least 1)"},
        error_case{"capture_stacks_type", "[[chain]]\ntype = \"tracking\"\ncapture_stacks = 1\n" + cuda,
                   E + "3:18: chain[0].capture_stacks: expected a boolean, got an integer (true or false)"},
        error_case{"logging_file_missing", "[[chain]]\ntype = \"logging\"\n" + cuda,
                   E + "1:1: chain[0].file: missing (e.g. file = \"gpumem-%p-%d.csv\")"},
        error_case{"logging_file_placeholder", "[[chain]]\ntype = \"logging\"\nfile = \"%z\"\n" + cuda,
                   E + "3:8: chain[0].file: unknown placeholder %z (valid placeholders: %p pid, %r rank, %h host, "
                       "%d device, %% a literal %)"},
        // Binning.
        error_case{"bin_not_power_of_two", "[[chain]]\ntype = \"binning\"\nmin_size = \"768B\"\n" + cuda,
                   E + "3:12: chain[0].min_size: bin size 768 B is not a power of two of at least 256 B "
                       "(e.g. 256B, 4KiB, 1MiB)"},
        error_case{"bin_too_small", "[[chain]]\ntype = \"binning\"\nmax_size = 128\n" + cuda,
                   E + "3:12: chain[0].max_size: bin size 128 B is not a power of two of at least 256 B "
                       "(e.g. 256B, 4KiB, 1MiB)"},
        error_case{"min_above_max", "[[chain]]\ntype = \"binning\"\nmin_size = \"4KiB\"\nmax_size = \"1KiB\"\n" + cuda,
                   E + "1:1: chain[0].min_size: min_size 4 KiB is above max_size 1 KiB (min_size must not exceed "
                       "max_size)"},
        error_case{"bins_not_ascending", "[[chain]]\ntype = \"binning\"\nbins = [\"4KiB\", \"1KiB\"]\n" + cuda,
                   E + "3:17: chain[0].bins[1]: 1 KiB does not follow 4 KiB (list bins in ascending order, each "
                       "once)"},
        error_case{"bins_not_multiple", "[[chain]]\ntype = \"binning\"\nbins = [300]\n" + cuda,
                   E + "3:9: chain[0].bins[0]: bin size 300 B is not a multiple of 256 B (e.g. 256B, 768B, 4KiB)"},
        error_case{"bins_empty", "[[chain]]\ntype = \"binning\"\nbins = []\n" + cuda,
                   E + "3:8: chain[0].bins: no bins (e.g. bins = [\"256B\", \"4KiB\", \"64KiB\"])"},
        error_case{"bins_not_array", "[[chain]]\ntype = \"binning\"\nbins = \"4KiB\"\n" + cuda,
                   E + "3:8: chain[0].bins: expected an array of sizes, got a string (e.g. bins = [\"256B\", "
                       "\"4KiB\", \"64KiB\"])"},
        error_case{"bins_and_range", "[[chain]]\ntype = \"binning\"\nbins = [256]\nmax_size = 512\n" + cuda,
                   E + "1:1: chain[0]: both bins and min_size/max_size given (use one of the two forms)"},
        // Chain shape.
        error_case{"pool_without_upstream", "[[chain]]\ntype = \"pool\"\n",
                   E + "1:1: chain[0].type: \"pool\" has no upstream to get memory from (add a device resource "
                       "after it: cuda | vmm | async | managed)"},
        error_case{"binning_without_upstream",
                   "[[chain]]\ntype = \"limiting\"\nlimit = 1\n[[chain]]\ntype = "
                   "\"binning\"\n",
                   E + "4:1: chain[1].type: \"binning\" has no upstream to get memory from (add a device resource "
                       "after it: cuda | vmm | async | managed)"},
        error_case{"ends_in_adaptor", "[[chain]]\ntype = \"statistics\"\n",
                   E + "1:1: chain[0].type: the chain ends in \"statistics\", not in a device resource (end it "
                       "with one of: cuda | vmm | async | managed)"},
        error_case{"two_devices", "[[chain]]\ntype = \"cuda\"\n[[chain]]\ntype = \"managed\"\n",
                   E + "3:1: chain[1].type: a second device resource \"managed\" after \"cuda\" (a chain has "
                       "exactly one device resource, its last entry)"},
        error_case{"adaptor_after_device", "[[chain]]\ntype = \"async\"\n[[chain]]\ntype = \"tracking\"\n",
                   E + "3:1: chain[1].type: adaptor \"tracking\" after the device resource \"async\" (entries wrap "
                       "the ones after them: move \"tracking\" above \"async\")"},
        error_case{"pool_after_device", "[[chain]]\ntype = \"cuda\"\n[[chain]]\ntype = \"pool\"\n",
                   E + "3:1: chain[1].type: resource \"pool\" after the device resource \"cuda\" (entries wrap the "
                       "ones after them: move \"pool\" above \"cuda\")"},
        error_case{"maximum_below_initial",
                   "[[chain]]\ntype = \"statistics\"\n[[chain]]\ntype = \"pool\"\ninitial_size = \"2GiB\"\n"
                   "maximum_size = \"1GiB\"\n" +
                       cuda,
                   E + "3:1: chain[1].maximum_size: maximum 1 GiB is below initial 2 GiB (maximum_size must be at "
                       "least initial_size)"},
        error_case{"maximum_below_initial_percent",
                   "[[chain]]\ntype = \"pool\"\ninitial_size = \"50%\"\nmaximum_size = \"40%\"\n" + cuda,
                   E + "1:1: chain[0].maximum_size: maximum 40% is below initial 50% (maximum_size must be at "
                       "least initial_size)"}),
    [](auto const& test) { return test.param.name; });

TEST(ParseToml, ErrorsCarryTheFilesOnErrorPolicy) {
  gc::on_error policy = gc::on_error::fail;
  // on_error is honoured even when a mistake precedes it in [gpumem].
  EXPECT_NE(error_of("[gpumem]\nlog_level = \"loud\"\non_error = \"passthrough\"\n", &policy), "");
  EXPECT_EQ(policy, gc::on_error::passthrough);
  EXPECT_NE(error_of("[gpumem]\non_error = \"passthrough\"\n[[chain]]\ntype = \"pool\"\n", &policy), "");
  EXPECT_EQ(policy, gc::on_error::passthrough);
  EXPECT_NE(error_of("[[chain]]\ntype = \"pool\"\n[gpumem]\non_error = \"passthrough\"\n", &policy), "");
  EXPECT_EQ(policy, gc::on_error::passthrough);
  EXPECT_NE(error_of("[gpumem]\non_error = \"fail\"\n[[chain]]\ntype = \"pool\"\n", &policy), "");
  EXPECT_EQ(policy, gc::on_error::fail);
  policy = gc::on_error::passthrough;
  EXPECT_NE(error_of("[gpumem\n", &policy), "");  // nothing could be read: fail
  EXPECT_EQ(policy, gc::on_error::fail);
}

TEST(Roles, EveryType) {
  EXPECT_EQ(gc::role_of(gc::pool_spec{}), gc::resource_role::caching);
  EXPECT_EQ(gc::role_of(gc::binning_spec{}), gc::resource_role::caching);
  EXPECT_EQ(gc::role_of(gc::fixed_size_spec{}), gc::resource_role::caching);
  EXPECT_EQ(gc::role_of(gc::async_spec{}), gc::resource_role::device);
  EXPECT_EQ(gc::role_of(gc::cuda_spec{}), gc::resource_role::device);
  EXPECT_EQ(gc::role_of(gc::managed_spec{}), gc::resource_role::device);
  EXPECT_EQ(gc::role_of(gc::limiting_spec{}), gc::resource_role::adaptor);
  EXPECT_EQ(gc::role_of(gc::statistics_spec{}), gc::resource_role::adaptor);
  EXPECT_EQ(gc::role_of(gc::tracking_spec{}), gc::resource_role::adaptor);
  EXPECT_EQ(gc::role_of(gc::logging_spec{}), gc::resource_role::adaptor);
  EXPECT_TRUE(gc::caches_memory(gc::async_spec{}));
  EXPECT_TRUE(gc::caches_memory(gc::pool_spec{}));
  EXPECT_FALSE(gc::caches_memory(gc::cuda_spec{}));
  EXPECT_FALSE(gc::caches_memory(gc::managed_spec{}));
  EXPECT_FALSE(gc::caches_memory(gc::limiting_spec{}));
}

}  // namespace

namespace {

TEST(EnumNames, RoundTripTheTomlSpelling) {
  EXPECT_EQ(gc::to_string(gc::sync_mode::safe), "safe");
  EXPECT_EQ(gc::to_string(gc::sync_mode::stream), "stream");
  EXPECT_EQ(gc::to_string(gc::on_error::fail), "fail");
  EXPECT_EQ(gc::to_string(gc::on_error::passthrough), "passthrough");
}

}  // namespace
