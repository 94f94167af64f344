// load(): file selection, every GPUMEM_* override, warnings and error policies.

#include <gpumem/config.hpp>

#include "support/temp_file.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>

namespace gc = gpumem::config;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20U;
constexpr std::size_t GiB = std::size_t{1} << 30U;

std::string data(std::string const& name) {
  return (std::filesystem::path{__FILE__}.parent_path() / "data" / name).string();
}

gc::environment env_of(std::map<std::string, std::string, std::less<>> vars) {
  gc::environment e;
  e.vars = std::move(vars);
  return e;
}

std::vector<std::string> types_of(gc::settings const& s) {
  std::vector<std::string> out;
  for (auto const& e : s.chain) { out.push_back(e.type); }
  return out;
}

using types = std::vector<std::string>;

/// load()'s message for `env`, "" if it succeeded; `policy` receives the error's policy.
std::string error_of(gc::environment const& env, gc::on_error* policy = nullptr) {
  try {
    (void)gc::load(env);
  } catch (gc::config_error const& e) {
    if (policy != nullptr) { *policy = e.policy; }
    return e.what();
  }
  return "";
}

std::string const E = "gpumem: config error: ";
std::string const size_hint =
    "(a size such as 4096, 512MiB, 8GiB, 1.5GB or 50% of free device memory; units B, KiB/MiB/GiB/TiB or "
    "K/M/G/T (1024), kB/MB/GB/TB (1000))";

TEST(Load, NothingSetGivesTheEmbeddedDefault) {
  gc::settings const s = gc::load(env_of({}));
  EXPECT_EQ(s.source, "embedded default");
  EXPECT_FALSE(s.disabled);
  EXPECT_EQ(s.sync, gc::sync_mode::safe);
  EXPECT_EQ(s.on_config_error, gc::on_error::fail);
  EXPECT_EQ(types_of(s), (types{"pool", "vmm"}));
  EXPECT_TRUE(s.warnings.empty());
}

TEST(Load, ConfigFile) {
  gc::settings const s = gc::load(env_of({{"GPUMEM_CONFIG", data("adaptors.toml")}}));
  EXPECT_EQ(s.source, data("adaptors.toml"));
  EXPECT_EQ(s.on_config_error, gc::on_error::passthrough);
  EXPECT_EQ(types_of(s), (types{"limiting", "tracking", "binning", "pool", "cuda"}));
  EXPECT_EQ(s.chain[3].source, data("adaptors.toml"));
  EXPECT_EQ(s.chain[3].line, 16);
}

TEST(Load, EmptyVariablesCountAsUnset) {
  gc::settings const s = gc::load(env_of({{"GPUMEM_CONFIG", ""}, {"GPUMEM_LIMIT", ""}, {"GPUMEM_DISABLE", ""}}));
  EXPECT_EQ(s.source, "embedded default");
  EXPECT_EQ(types_of(s), (types{"pool", "vmm"}));
}

TEST(Load, UnreadableConfigFile) {
  EXPECT_EQ(error_of(env_of({{"GPUMEM_CONFIG", "/nonexistent/gpumem.toml"}})),
            E + "environment: GPUMEM_CONFIG: cannot read \"/nonexistent/gpumem.toml\": No such file or directory "
                "(set it to a readable TOML file, or unset it to use the embedded default)");
}

TEST(Load, ConfigPathIsADirectory) {
  std::string const dir = std::filesystem::path{data("adaptors.toml")}.parent_path().string();
  EXPECT_EQ(error_of(env_of({{"GPUMEM_CONFIG", dir}})),
            E + "environment: GPUMEM_CONFIG: cannot read \"" + dir +
                "\": Is a directory "
                "(set it to a readable TOML file, or unset it to use the embedded default)");
}

TEST(Load, BrokenConfigFileNamesFileLineAndKey) {
  EXPECT_EQ(error_of(env_of({{"GPUMEM_CONFIG", data("broken.toml")}})),
            E + data("broken.toml") +
                ":7:1: chain[0].maximum: unknown key \"maximum\" (valid for pool: initial_size maximum_size "
                "min_growth)");
}

TEST(Load, DisableSkipsTheFile) {
  gc::settings const s = gc::load(env_of({{"GPUMEM_DISABLE", "1"}, {"GPUMEM_CONFIG", data("broken.toml")}}));
  EXPECT_TRUE(s.disabled);
  EXPECT_EQ(s.source, "GPUMEM_DISABLE");
  EXPECT_TRUE(gc::load(env_of({{"GPUMEM_DISABLE", "TRUE"}})).disabled);
  EXPECT_TRUE(gc::load(env_of({{"GPUMEM_DISABLE", "on"}})).disabled);
  EXPECT_FALSE(gc::load(env_of({{"GPUMEM_DISABLE", "0"}})).disabled);
  EXPECT_FALSE(gc::load(env_of({{"GPUMEM_DISABLE", "no"}})).disabled);
  EXPECT_EQ(error_of(env_of({{"GPUMEM_DISABLE", "maybe"}})),
            E + "environment: GPUMEM_DISABLE: \"maybe\" is not a boolean (valid: 1, 0, true, false, yes, no, on, off)");
}

TEST(Load, ResourceReplacesResourcesKeepingAdaptors) {
  auto with = [](std::string const& r) {
    return types_of(gc::load(env_of({{"GPUMEM_CONFIG", data("adaptors.toml")}, {"GPUMEM_RESOURCE", r}})));
  };
  EXPECT_EQ(with("pool"), (types{"limiting", "tracking", "pool", "vmm"}));
  EXPECT_EQ(with("cuda-pool"), (types{"limiting", "tracking", "pool", "cuda"}));
  EXPECT_EQ(with("binning"), (types{"limiting", "tracking", "binning", "pool", "vmm"}));
  EXPECT_EQ(with("async"), (types{"limiting", "tracking", "async"}));
  EXPECT_EQ(with("cuda"), (types{"limiting", "tracking", "cuda"}));
  EXPECT_EQ(with("managed"), (types{"limiting", "tracking", "managed"}));

  // The canonical chains, not the file's resource options.
  gc::settings const s = gc::load(env_of({{"GPUMEM_CONFIG", data("adaptors.toml")}, {"GPUMEM_RESOURCE", "binning"}}));
  auto const& bins = std::get<gc::binning_spec>(s.chain[2].options).bins;
  ASSERT_EQ(bins.size(), 13U);
  EXPECT_EQ(bins.front(), 256U);
  EXPECT_EQ(bins.back(), MiB);
  EXPECT_EQ(std::get<gc::pool_spec>(s.chain[3].options).initial_size, gc::size_value::of_bytes(0));
  EXPECT_EQ(s.chain[3].source, "GPUMEM_RESOURCE");

  EXPECT_EQ(
      error_of(env_of({{"GPUMEM_RESOURCE", "arena"}})),
      E + "environment: GPUMEM_RESOURCE: unknown value \"arena\" (valid: pool|cuda-pool|binning|async|cuda|managed)");
}

TEST(Load, PoolSizeAndMaximum) {
  gc::settings const s = gc::load(env_of({{"GPUMEM_POOL_SIZE", "1GiB"}, {"GPUMEM_POOL_MAX", "75%"}}));
  auto const& pool = std::get<gc::pool_spec>(s.chain[0].options);
  EXPECT_EQ(pool.initial_size, gc::size_value::of_bytes(GiB));
  EXPECT_EQ(pool.maximum_size, gc::size_value::of_percent(75));
  EXPECT_EQ(s.chain[0].source, "GPUMEM_POOL_SIZE/GPUMEM_POOL_MAX");

  // Applied after GPUMEM_RESOURCE: the canonical binning chain's pool takes them.
  gc::settings const b = gc::load(env_of({{"GPUMEM_RESOURCE", "binning"}, {"GPUMEM_POOL_MAX", "2GiB"}}));
  EXPECT_EQ(std::get<gc::pool_spec>(b.chain[1].options).maximum_size, gc::size_value::of_bytes(2 * GiB));

  // Only one of the two: the file's other value stays.
  gc::settings const f = gc::load(env_of({{"GPUMEM_CONFIG", data("adaptors.toml")}, {"GPUMEM_POOL_SIZE", "128MiB"}}));
  auto const& fp = std::get<gc::pool_spec>(f.chain[3].options);
  EXPECT_EQ(fp.initial_size, gc::size_value::of_bytes(128 * MiB));
  EXPECT_EQ(fp.maximum_size, gc::size_value::of_bytes(768 * MiB));
}

TEST(Load, PoolSizeErrors) {
  EXPECT_EQ(error_of(env_of({{"GPUMEM_CONFIG", data("no_pool.toml")}, {"GPUMEM_POOL_SIZE", "1GiB"}})),
            E + "environment: GPUMEM_POOL_SIZE: the chain of " + data("no_pool.toml") +
                " has no pool (add a [[chain]] entry of type \"pool\", or set GPUMEM_RESOURCE=pool)");
  EXPECT_EQ(error_of(env_of({{"GPUMEM_RESOURCE", "async"}, {"GPUMEM_POOL_MAX", "1GiB"}})),
            E + "environment: GPUMEM_POOL_MAX: the chain of embedded default has no pool (add a [[chain]] entry "
                "of type \"pool\", or set GPUMEM_RESOURCE=pool)");
  EXPECT_EQ(error_of(env_of({{"GPUMEM_POOL_SIZE", "lots"}})),
            E + "environment: GPUMEM_POOL_SIZE: \"lots\": not a number " + size_hint);
  EXPECT_EQ(error_of(env_of({{"GPUMEM_POOL_SIZE", "4 GiBs"}})),
            E + "environment: GPUMEM_POOL_SIZE: \"4 GiBs\": unknown unit \"GiBs\" " + size_hint);
  EXPECT_EQ(error_of(env_of({{"GPUMEM_POOL_SIZE", "-1GiB"}})),
            E + "environment: GPUMEM_POOL_SIZE: \"-1GiB\": negative size " + size_hint);
  EXPECT_EQ(error_of(env_of({{"GPUMEM_POOL_SIZE", "2GiB"}, {"GPUMEM_POOL_MAX", "1GiB"}})),
            E + "GPUMEM_POOL_SIZE/GPUMEM_POOL_MAX: chain[0].maximum_size: maximum 1 GiB is below initial 2 GiB "
                "(maximum_size must be at least initial_size)");
  // Against the file's maximum.
  EXPECT_EQ(error_of(env_of({{"GPUMEM_CONFIG", data("adaptors.toml")}, {"GPUMEM_POOL_SIZE", "1GiB"}})),
            E + "GPUMEM_POOL_SIZE: chain[3].maximum_size: maximum 768 MiB is below initial 1 GiB "
                "(maximum_size must be at least initial_size)");
}

TEST(Load, HostAndManagedVariablesSetTheirOwnChainsOnly) {
  gc::settings const s = gc::load(
      env_of({{"GPUMEM_MANAGED_POOL", "1"}, {"GPUMEM_MANAGED_LIMIT", "3GiB"}, {"GPUMEM_HOST_LIMIT", "1GiB"}}));
  EXPECT_TRUE(s.managed.pool);
  EXPECT_EQ(s.managed.limit, 3 * GiB);
  EXPECT_FALSE(s.host.pool);
  EXPECT_EQ(s.host.limit, GiB);
  EXPECT_EQ(types_of(s), (types{"pool", "vmm"}));  // the device chain is not limited
  EXPECT_EQ(error_of(env_of({{"GPUMEM_MANAGED_LIMIT", "10%"}})),
            E + "environment: GPUMEM_MANAGED_LIMIT: \"10%\" is a percentage; this variable needs an absolute size "
                "(e.g. 256MiB)");
}

TEST(Load, LimitAddsOrSetsTheOutermostLimiter) {
  gc::settings const added = gc::load(env_of({{"GPUMEM_LIMIT", "80%"}}));
  EXPECT_EQ(types_of(added), (types{"limiting", "pool", "vmm"}));
  EXPECT_EQ(std::get<gc::limiting_spec>(added.chain[0].options).limit, gc::size_value::of_percent(80));
  EXPECT_EQ(added.chain[0].source, "GPUMEM_LIMIT");

  gc::settings const set = gc::load(env_of({{"GPUMEM_CONFIG", data("adaptors.toml")}, {"GPUMEM_LIMIT", "1GiB"}}));
  EXPECT_EQ(types_of(set), (types{"limiting", "tracking", "binning", "pool", "cuda"}));
  EXPECT_EQ(std::get<gc::limiting_spec>(set.chain[0].options).limit, gc::size_value::of_bytes(GiB));

  EXPECT_EQ(error_of(env_of({{"GPUMEM_LIMIT", "101%"}})),
            E + "environment: GPUMEM_LIMIT: \"101%\": percentage above 100% " + size_hint);
}

TEST(Load, GlobalOverrides) {
  gc::settings const s = gc::load(env_of({{"GPUMEM_LOG_FILE", "log-%r-%d.csv"},
                                          {"GPUMEM_LOG_LEVEL", "debug"},
                                          {"GPUMEM_SYNC_MODE", "stream"},
                                          {"GPUMEM_ON_ERROR", "passthrough"},
                                          {"GPUMEM_REPORT", "yes"},
                                          {"GPUMEM_REPORT_FILE", "report-%h.txt"}}));
  EXPECT_EQ(s.log_file, "log-%r-%d.csv");
  EXPECT_EQ(s.log_level, gpumem::log_level::debug);
  EXPECT_EQ(s.sync, gc::sync_mode::stream);
  EXPECT_EQ(s.on_config_error, gc::on_error::passthrough);
  EXPECT_TRUE(s.report);
  EXPECT_EQ(s.report_file, "report-%h.txt");
  EXPECT_TRUE(s.warnings.empty());

  // The old safe-mode knob is still read (a typo is an error) but only warns.
  gc::settings const old = gc::load(env_of({{"GPUMEM_DEFERRED_FLUSH", "32MiB"}, {"GPUMEM_LOG_LEVEL", "off"}}));
  ASSERT_EQ(old.warnings.size(), 1U);
  EXPECT_NE(old.warnings[0].find("GPUMEM_DEFERRED_FLUSH no longer has an effect"), std::string::npos);

  // The environment outranks the file.
  gc::settings const f = gc::load(env_of({{"GPUMEM_CONFIG", data("adaptors.toml")}, {"GPUMEM_ON_ERROR", "fail"}}));
  EXPECT_EQ(f.on_config_error, gc::on_error::fail);
  EXPECT_FALSE(gc::load(env_of({{"GPUMEM_REPORT", "0"}})).report);
}

TEST(Load, LogQueueFromTheEnvironment) {
  // Rows are always queued: the variable of earlier versions is still accepted.
  EXPECT_NO_THROW((void)gc::load(env_of({{"GPUMEM_LOG_QUEUE", "1"}})));
  EXPECT_NO_THROW((void)gc::load(env_of({{"GPUMEM_LOG_QUEUE", "no"}})));
  EXPECT_NE(error_of(env_of({{"GPUMEM_LOG_QUEUE", "sometimes"}})).find("GPUMEM_LOG_QUEUE"), std::string::npos);
}

struct env_error_case {
  std::string name;
  std::string var;
  std::string value;
  std::string message;
};

// The case's name, not its bytes, in test listings and failure messages.
void PrintTo(env_error_case const& c, std::ostream* os) { *os << c.name; }

class LoadEnvError : public ::testing::TestWithParam<env_error_case> {};

TEST_P(LoadEnvError, ExactMessage) {
  EXPECT_EQ(error_of(env_of({{GetParam().var, GetParam().value}})), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Variables, LoadEnvError,
    ::testing::Values(
        env_error_case{"log_file", "GPUMEM_LOG_FILE", "x-%u.csv",
                       E + "environment: GPUMEM_LOG_FILE: unknown placeholder %u (valid placeholders: %p pid, "
                           "%r rank, %h host, %d device, %% a literal %)"},
        env_error_case{"report_file", "GPUMEM_REPORT_FILE", "100%",
                       E + "environment: GPUMEM_REPORT_FILE: ends with a lone % (valid placeholders: %p pid, "
                           "%r rank, %h host, %d device, %% a literal %)"},
        env_error_case{"log_level", "GPUMEM_LOG_LEVEL", "WARN",
                       E + "environment: GPUMEM_LOG_LEVEL: unknown value \"WARN\" (valid: "
                           "trace|debug|info|warn|error|off)"},
        env_error_case{"sync_mode", "GPUMEM_SYNC_MODE", "async",
                       E + "environment: GPUMEM_SYNC_MODE: unknown value \"async\" (valid: safe|stream)"},
        env_error_case{"on_error", "GPUMEM_ON_ERROR", "ignore",
                       E + "environment: GPUMEM_ON_ERROR: unknown value \"ignore\" (valid: fail|passthrough)"},
        env_error_case{"report", "GPUMEM_REPORT", "2",
                       E + "environment: GPUMEM_REPORT: \"2\" is not a boolean (valid: 1, 0, true, false, yes, no, "
                           "on, off)"},
        env_error_case{"deferred_flush", "GPUMEM_DEFERRED_FLUSH", "5%",
                       E + "environment: GPUMEM_DEFERRED_FLUSH: \"5%\" is a percentage; this variable needs an "
                           "absolute size (e.g. 256MiB)"},
        env_error_case{"stacks_word", "GPUMEM_STACKS", "lots",
                       E + "environment: GPUMEM_STACKS: \"lots\" is not an integer (0 (off) or the frames to record "
                           "per allocation, 1 to 128)"},
        env_error_case{"stacks_range", "GPUMEM_STACKS", "200",
                       E + "environment: GPUMEM_STACKS: 200 is out of range (0 (off) or the frames to record per "
                           "allocation, 1 to 128)"},
        env_error_case{"stack_sample_zero", "GPUMEM_STACK_SAMPLE", "0",
                       E + "environment: GPUMEM_STACK_SAMPLE: 0 is out of range (1 (every allocation) or K: every "
                           "K-th allocation of a thread)"},
        env_error_case{"stack_min_size_percent", "GPUMEM_STACK_MIN_SIZE", "5%",
                       E + "environment: GPUMEM_STACK_MIN_SIZE: \"5%\" is a percentage; this variable needs an "
                           "absolute size (e.g. 256MiB)"},
        env_error_case{"release_threshold_word", "GPUMEM_RELEASE_THRESHOLD", "never",
                       E + "environment: GPUMEM_RELEASE_THRESHOLD: \"never\": not a number (auto, "
                           "unlimited, or the cached bytes to keep: a size such as 0, 512MiB or 4GiB; auto:SECONDS "
                           "sets auto's window (auto is auto:10))"},
        env_error_case{"release_threshold_window", "GPUMEM_RELEASE_THRESHOLD", "auto:soon",
                       E + "environment: GPUMEM_RELEASE_THRESHOLD: \"auto:soon\": the window of auto is whole "
                           "seconds, 0 to 3600 (auto, unlimited, or the cached bytes to keep: a size such as 0, 512MiB "
                           "or 4GiB; auto:SECONDS sets auto's window (auto is auto:10))"},
        env_error_case{"release_threshold_percent", "GPUMEM_RELEASE_THRESHOLD", "10%",
                       E + "environment: GPUMEM_RELEASE_THRESHOLD: \"10%\" is a percentage; this variable needs "
                           "an absolute size (auto, unlimited, or the cached bytes to keep: a size such as 0, "
                           "512MiB or 4GiB; auto:SECONDS sets auto's window (auto is auto:10))"},
        env_error_case{"release_threshold_negative", "GPUMEM_RELEASE_THRESHOLD", "-1GiB",
                       E + "environment: GPUMEM_RELEASE_THRESHOLD: \"-1GiB\": negative size (auto, unlimited, or "
                           "the cached bytes to keep: a size such as 0, 512MiB or 4GiB; auto:SECONDS sets auto's "
                           "window (auto is auto:10))"}),
    [](auto const& test) { return test.param.name; });

TEST(Load, StackSettingsFromTheEnvironmentAndTheirDefaults) {
  gc::settings const off = gc::load(env_of({}));
  EXPECT_EQ(off.stacks, 0);
  EXPECT_EQ(off.stack_sample, 1U);
  EXPECT_EQ(off.stack_min_size, std::size_t{16} << 20);
  gc::settings const s = gc::load(
      env_of({{"GPUMEM_STACKS", "64"}, {"GPUMEM_STACK_SAMPLE", "100"}, {"GPUMEM_STACK_MIN_SIZE", "1MiB"}}));
  EXPECT_EQ(s.stacks, 64);
  EXPECT_EQ(s.stack_sample, 100U);
  EXPECT_EQ(s.stack_min_size, std::size_t{1} << 20);
  EXPECT_TRUE(s.warnings.empty());
}

TEST(Load, ReleaseThresholdFromTheEnvironmentAndItsDefault) {
  EXPECT_EQ(gc::load(env_of({})).release_threshold, gc::release_rule{});
  EXPECT_TRUE(gc::load(env_of({})).release_threshold.automatic);
  EXPECT_EQ(gc::load(env_of({{"GPUMEM_RELEASE_THRESHOLD", "auto"}})).release_threshold, gc::release_rule{});
  EXPECT_EQ(gc::load(env_of({})).release_threshold.window_s, 10U);
  EXPECT_EQ(gc::load(env_of({{"GPUMEM_RELEASE_THRESHOLD", "auto:0"}})).release_threshold,
            gc::release_rule::automatic_over(0));
  EXPECT_EQ(gc::load(env_of({{"GPUMEM_RELEASE_THRESHOLD", "auto:30s"}})).release_threshold,
            gc::release_rule::automatic_over(30));
  EXPECT_EQ(gc::release_rule::automatic_over(30).to_string(), "auto:30");
  EXPECT_EQ(gc::release_rule::automatic_over(10).to_string(), "auto");
  EXPECT_EQ(gc::load(env_of({{"GPUMEM_RELEASE_THRESHOLD", "4GiB"}})).release_threshold,
            gc::release_rule::keep(std::uint64_t{4} << 30));
  EXPECT_EQ(gc::load(env_of({{"GPUMEM_RELEASE_THRESHOLD", "0"}})).release_threshold, gc::release_rule::keep(0));
  EXPECT_EQ(gc::load(env_of({{"GPUMEM_RELEASE_THRESHOLD", "unlimited"}})).release_threshold,
            gc::release_rule::keep(gc::release_rule::never));
  EXPECT_EQ(gc::load(env_of({{"GPUMEM_RELEASE_THRESHOLD", "18446744073709551615"}})).release_threshold,
            gc::release_rule::keep(gc::release_rule::never));
  // The variable outranks the file.
  gpumem::test::temp_file const f{"release.toml"};
  std::ofstream{f.path()} << "[gpumem]\nrelease_threshold = \"1GiB\"\n";
  EXPECT_EQ(gc::load(env_of({{"GPUMEM_CONFIG", f.path()}})).release_threshold,
            gc::release_rule::keep(std::uint64_t{1} << 30));
  EXPECT_EQ(gc::load(env_of({{"GPUMEM_CONFIG", f.path()}, {"GPUMEM_RELEASE_THRESHOLD", "auto"}})).release_threshold,
            gc::release_rule{});
  EXPECT_TRUE(gc::load(env_of({{"GPUMEM_RELEASE_THRESHOLD", "8MiB"}})).warnings.empty());
}

TEST(Load, UnknownVariablesWarnWithSuggestion) {
  gc::settings const s = gc::load(env_of({{"GPUMEM_POOLSIZE", "1GiB"},
                                          {"GPUMEM_LOGFILE", "x"},
                                          {"GPUMEM_ZZZZZZZZZZZZ", "1"},
                                          {"GPUMEM_SIM_DEVICES", "2"},  // the simulated device's own
                                          {"GPUMEM_SHIM", "/x/libgpumem_shim.so"},
                                          {"GPUMEM_BUILD_DIR", "/b"}}));
  ASSERT_EQ(s.warnings.size(), 3U);
  EXPECT_EQ(s.warnings[0], "unknown environment variable GPUMEM_LOGFILE (ignored; did you mean GPUMEM_LOG_FILE?)");
  EXPECT_EQ(s.warnings[1], "unknown environment variable GPUMEM_POOLSIZE (ignored; did you mean GPUMEM_POOL_SIZE?)");
  EXPECT_EQ(s.warnings[2], "unknown environment variable GPUMEM_ZZZZZZZZZZZZ (ignored)");
  // Warnings do not change the configuration.
  EXPECT_EQ(types_of(s), (types{"pool", "vmm"}));
}

TEST(Load, ErrorPolicy) {
  gc::on_error policy = gc::on_error::fail;
  // The environment's policy applies to a broken file.
  EXPECT_NE(error_of(env_of({{"GPUMEM_CONFIG", data("broken.toml")}, {"GPUMEM_ON_ERROR", "passthrough"}}), &policy),
            "");
  EXPECT_EQ(policy, gc::on_error::passthrough);
  // The file's policy applies to a bad variable.
  EXPECT_NE(error_of(env_of({{"GPUMEM_CONFIG", data("adaptors.toml")}, {"GPUMEM_LIMIT", "x"}}), &policy), "");
  EXPECT_EQ(policy, gc::on_error::passthrough);
  // The environment outranks the file.
  EXPECT_NE(
      error_of(env_of({{"GPUMEM_CONFIG", data("adaptors.toml")}, {"GPUMEM_ON_ERROR", "fail"}, {"GPUMEM_LIMIT", "x"}}),
               &policy),
      "");
  EXPECT_EQ(policy, gc::on_error::fail);
  // Nothing said: fail.
  policy = gc::on_error::passthrough;
  EXPECT_NE(error_of(env_of({{"GPUMEM_LIMIT", "x"}}), &policy), "");
  EXPECT_EQ(policy, gc::on_error::fail);
  // An invalid GPUMEM_ON_ERROR cannot be honoured: fail.
  policy = gc::on_error::passthrough;
  EXPECT_NE(error_of(env_of({{"GPUMEM_ON_ERROR", "maybe"}}), &policy), "");
  EXPECT_EQ(policy, gc::on_error::fail);
}

}  // namespace
