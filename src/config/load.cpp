// load(): the configuration file (or the embedded default) plus GPUMEM_* overrides.

#include <gpumem/config.hpp>
#include <gpumem/config/config_file.hpp>

#include "chain_rules.hpp"
#include "diagnostics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <iterator>

namespace gpumem::config {
namespace {

constexpr std::string_view env_source = "environment";

/// The variables gpumem reads (for the did-you-mean of unknown ones).
constexpr std::array<std::string_view, 23> known_variables{"GPUMEM_CONFIG",
                                                           "GPUMEM_DISABLE",
                                                           "GPUMEM_RESOURCE",
                                                           "GPUMEM_POOL_SIZE",
                                                           "GPUMEM_POOL_MAX",
                                                           "GPUMEM_LIMIT",
                                                           "GPUMEM_LOG_FILE",
                                                           "GPUMEM_LOG_LEVEL",
                                                           "GPUMEM_SYNC_MODE",
                                                           "GPUMEM_ON_ERROR",
                                                           "GPUMEM_REPORT",
                                                           "GPUMEM_REPORT_FILE",
                                                           "GPUMEM_DEFERRED_FLUSH",
                                                           "GPUMEM_SHIM",
                                                           "GPUMEM_STACKS",
                                                           "GPUMEM_STACK_SAMPLE",
                                                           "GPUMEM_STACK_MIN_SIZE",
                                                           "GPUMEM_LOG_QUEUE",
                                                           "GPUMEM_RELEASE_THRESHOLD",
                                                           "GPUMEM_HOST_POOL",
                                                           "GPUMEM_HOST_LIMIT",
                                                           "GPUMEM_MANAGED_POOL",
                                                           "GPUMEM_MANAGED_LIMIT"};
/// Variables of other gpumem components (the simulated device, the test harness).
constexpr std::array<std::string_view, 3> foreign_prefixes{"GPUMEM_SIM_", "GPUMEM_BUILD_DIR", "GPUMEM_SOURCE_DIR"};

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) { row[j] = j; }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t const up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0U : 1U)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::vector<std::string> unknown_variable_warnings(environment const& env) {
  std::vector<std::string> out;
  for (auto const& [name, value] : env.vars) {
    if (!name.starts_with("GPUMEM_")) { continue; }
    if (std::ranges::find(known_variables, name) != known_variables.end()) { continue; }
    if (std::ranges::any_of(foreign_prefixes, [&var = name](std::string_view p) { return var.starts_with(p); })) {
      continue;
    }
    std::string_view best;
    std::size_t best_distance = 4;  // suggest only close matches
    for (auto const k : known_variables) {
      if (auto const d = edit_distance(name, k); d < best_distance) {
        best = k;
        best_distance = d;
      }
    }
    out.push_back(best.empty()
                      ? fmt::format("unknown environment variable {} (ignored)", name)
                      : fmt::format("unknown environment variable {} (ignored; did you mean {}?)", name, best));
  }
  return out;
}

/// Reads GPUMEM_* values one by one, raising errors that name the variable.
class overrides {
 public:
  overrides(environment const& env, on_error policy) : env_{env}, policy_{policy} {}

  void set_policy(on_error p) noexcept { policy_ = p; }

  [[noreturn]] void fail(std::string_view var, std::string_view problem, std::string_view hint) const {
    detail::raise({env_source}, var, problem, hint, policy_);
  }

  [[nodiscard]] std::string const* get(std::string_view var) const { return env_.find(var); }

  /// A decimal integer in [lo, hi].
  [[nodiscard]] std::optional<std::int64_t> integer(std::string_view var, std::int64_t lo, std::int64_t hi,
                                                    std::string_view hint) const {
    std::string const* v = get(var);
    if (v == nullptr) { return std::nullopt; }
    std::int64_t n = 0;
    char const* const end = v->data() + v->size();
    auto const [p, ec] = std::from_chars(v->data(), end, n);
    if (v->empty() || ec != std::errc{} || p != end) { fail(var, fmt::format("\"{}\" is not an integer", *v), hint); }
    if (n < lo || n > hi) { fail(var, fmt::format("{} is out of range", n), hint); }
    return n;
  }

  /// 1/0, true/false, yes/no, on/off (any case).
  [[nodiscard]] std::optional<bool> boolean(std::string_view var) const {
    std::string const* v = get(var);
    if (v == nullptr) { return std::nullopt; }
    std::string lower;
    std::ranges::transform(*v, std::back_inserter(lower),
                           [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") { return true; }
    if (lower == "0" || lower == "false" || lower == "no" || lower == "off") { return false; }
    fail(var, fmt::format("\"{}\" is not a boolean", *v), "valid: 1, 0, true, false, yes, no, on, off");
  }

  /// One of `choices` ("a|b").
  [[nodiscard]] std::string const* choice(std::string_view var, std::string_view choices) const {
    std::string const* v = get(var);
    if (v == nullptr) { return nullptr; }
    if (detail::is_choice(*v, choices)) { return v; }
    fail(var, fmt::format("unknown value \"{}\"", *v), fmt::format("valid: {}", choices));
  }

  [[nodiscard]] std::optional<size_value> size(std::string_view var, bool allow_percent = true) const {
    std::string const* v = get(var);
    if (v == nullptr) { return std::nullopt; }
    size_value s;
    try {
      s = parse_size(*v);
    } catch (config_error const& e) { fail(var, e.what(), size_hint); }
    if (s.is_percent && !allow_percent) {
      fail(var, fmt::format("\"{}\" is a percentage; this variable needs an absolute size", *v), "e.g. 256MiB");
    }
    return s;
  }

  [[nodiscard]] std::optional<release_rule> release(std::string_view var) const {
    std::string const* v = get(var);
    if (v == nullptr) { return std::nullopt; }
    try {
      return parse_release_rule(*v, "variable");
    } catch (config_error const& e) { fail(var, e.what(), release_threshold_hint); }
  }

  [[nodiscard]] std::string const* path_template(std::string_view var) const {
    std::string const* v = get(var);
    if (v == nullptr) { return nullptr; }
    if (std::string const problem = check_template(*v); !problem.empty()) {
      fail(var, problem, "valid placeholders: %p pid, %r rank, %h host, %d device, %% a literal %");
    }
    return v;
  }

 private:
  environment const& env_;
  on_error policy_;
};

/// GPUMEM_CONFIG's text (read_config_file), or the error naming it.
std::string read_file(overrides const& o, std::string const& path) {
  std::string why;
  if (auto text = read_config_file(path, why)) return *std::move(text);
  o.fail("GPUMEM_CONFIG", fmt::format("cannot read \"{}\": {}", path, why),
         "set it to a readable TOML file, or unset it to use the embedded default");
}

resource_spec env_entry(std::string type, resource_options options, std::string_view var) {
  return resource_spec{std::move(type), std::move(options), std::string{var}, 0, 0};
}

/// GPUMEM_RESOURCE: the chain's adaptors, in the order written, over the canonical
/// resources for `name`.
void replace_resources(settings& s, overrides const& o) {
  std::string const* name = o.choice("GPUMEM_RESOURCE", "pool|cuda-pool|binning|async|cuda|managed");
  if (name == nullptr) { return; }
  std::vector<resource_spec> chain;
  for (auto& e : s.chain) {
    if (role_of(e.options) == resource_role::adaptor) { chain.push_back(std::move(e)); }
  }
  for (auto& e : detail::canonical_resources(*name)) { chain.push_back(std::move(e)); }
  s.chain = std::move(chain);
}

void apply_pool_sizes(settings& s, overrides const& o) {
  auto const initial = o.size("GPUMEM_POOL_SIZE");
  auto const maximum = o.size("GPUMEM_POOL_MAX");
  if (!initial && !maximum) { return; }
  auto const it = std::ranges::find_if(
      s.chain, [](resource_spec const& e) { return std::holds_alternative<pool_spec>(e.options); });
  if (it == s.chain.end()) {
    o.fail(initial ? "GPUMEM_POOL_SIZE" : "GPUMEM_POOL_MAX", fmt::format("the chain of {} has no pool", s.source),
           "add a [[chain]] entry of type \"pool\", or set GPUMEM_RESOURCE=pool");
  }
  if (maximum && detail::is_zero(*maximum)) {
    o.fail("GPUMEM_POOL_MAX",
           fmt::format("\"{}\" lets the pool hold no memory: every allocation would fail", *o.get("GPUMEM_POOL_MAX")),
           "unset it for no cap, or give a size above 0");
  }
  auto& pool = std::get<pool_spec>(it->options);
  if (initial) { pool.initial_size = *initial; }
  if (maximum) { pool.maximum_size = *maximum; }
  // The file's position no longer explains the values: name the variables instead.
  it->source = initial && maximum ? "GPUMEM_POOL_SIZE/GPUMEM_POOL_MAX"
               : initial          ? "GPUMEM_POOL_SIZE"
                                  : "GPUMEM_POOL_MAX";
  it->line = 0;
  it->column = 0;
}

void apply_limit(settings& s, overrides const& o) {
  auto const limit = o.size("GPUMEM_LIMIT");
  if (!limit) { return; }
  if (detail::is_zero(*limit)) {
    o.fail("GPUMEM_LIMIT", fmt::format("\"{}\" would refuse every allocation", *o.get("GPUMEM_LIMIT")),
           "unset it for no limit, or give a size above 0");
  }
  auto const it = std::ranges::find_if(
      s.chain, [](resource_spec const& e) { return std::holds_alternative<limiting_spec>(e.options); });
  if (it != s.chain.end()) {
    std::get<limiting_spec>(it->options).limit = *limit;
    it->source = "GPUMEM_LIMIT";
    it->line = 0;
    it->column = 0;
    return;
  }
  s.chain.insert(s.chain.begin(), env_entry("limiting", limiting_spec{*limit}, "GPUMEM_LIMIT"));
}

}  // namespace

settings load(environment const& env) {
  // The policy first: it decides what the shim does with every later error.
  on_error policy = on_error::fail;
  if (std::string const* v = env.find("GPUMEM_ON_ERROR"); v != nullptr && (*v == "fail" || *v == "passthrough")) {
    policy = *v == "fail" ? on_error::fail : on_error::passthrough;
  }
  overrides o{env, policy};
  std::vector<std::string> warnings = unknown_variable_warnings(env);

  settings s;
  if (o.boolean("GPUMEM_DISABLE").value_or(false)) {
    s.disabled = true;
    s.source = "GPUMEM_DISABLE";
    s.on_config_error = policy;
  } else {
    std::string const* path = env.find("GPUMEM_CONFIG");
    try {
      s = path != nullptr ? parse_toml(read_file(o, *path), *path) : parse_toml(default_toml(), "embedded default");
    } catch (config_error const& e) {
      // GPUMEM_ON_ERROR, when given, outranks what the file said.
      if (env.find("GPUMEM_ON_ERROR") != nullptr) { throw config_error{e.what(), policy}; }
      throw;
    }
    if (env.find("GPUMEM_ON_ERROR") == nullptr) { o.set_policy(s.on_config_error); }

    if (auto const* v = o.choice("GPUMEM_ON_ERROR", "fail|passthrough")) {
      s.on_config_error = *v == "fail" ? on_error::fail : on_error::passthrough;
    }
    if (auto const* v = o.choice("GPUMEM_SYNC_MODE", "safe|stream")) {
      s.sync = *v == "safe" ? sync_mode::safe : sync_mode::stream;
    }
    if (auto const* v = o.path_template("GPUMEM_LOG_FILE")) { s.log_file = *v; }
    // Rows are always queued now (csv_log_writer.hpp); the variable of earlier
    // versions is still checked, so a run that sets it keeps working.
    (void)o.boolean("GPUMEM_LOG_QUEUE");
    if (auto const* v = o.choice("GPUMEM_LOG_LEVEL", log_level_choices)) { s.log_level = parse_log_level(*v).value(); }
    if (auto const* v = o.path_template("GPUMEM_REPORT_FILE")) {
      s.report_file = *v;
      s.report = true;  // naming where the report goes asks for it (gpumem-run --report-file)
    }
    if (auto const v = o.boolean("GPUMEM_REPORT")) { s.report = *v; }
    if (auto const v = o.boolean("GPUMEM_HOST_POOL")) { s.host.pool = *v; }
    if (auto const v = o.size("GPUMEM_HOST_LIMIT", false)) { s.host.limit = v->bytes; }
    if (auto const v = o.boolean("GPUMEM_MANAGED_POOL")) { s.managed.pool = *v; }
    if (auto const v = o.size("GPUMEM_MANAGED_LIMIT", false)) { s.managed.limit = v->bytes; }
    if (auto const v = o.integer("GPUMEM_STACKS", 0, max_stack_frames,
                                 "0 (off) or the frames to record per allocation, 1 to 128")) {
      s.stacks = static_cast<int>(*v);
    }
    if (auto const v = o.integer("GPUMEM_STACK_SAMPLE", 1, 1'000'000'000,
                                 "1 (every allocation) or K: every K-th allocation of a thread")) {
      s.stack_sample = static_cast<std::uint32_t>(*v);
    }
    if (auto const v = o.size("GPUMEM_STACK_MIN_SIZE", false)) {
      s.stack_min_size = static_cast<std::size_t>(v->bytes);
    }
    if (auto const v = o.release("GPUMEM_RELEASE_THRESHOLD")) { s.release_threshold = *v; }
    if (o.size("GPUMEM_DEFERRED_FLUSH", false)) {
      warnings.emplace_back(
          "GPUMEM_DEFERRED_FLUSH no longer has an effect (safe mode reclaims freed memory with GPU-side barriers, "
          "without device synchronizations): unset it");
    }
    replace_resources(s, o);
    apply_pool_sizes(s, o);
    apply_limit(s, o);
    detail::validate_chain(s.chain, s.source, s.on_config_error);
  }

  // Findings of the file's parse come first, then the environment's.
  warnings.insert(warnings.begin(), s.warnings.begin(), s.warnings.end());
  // Filtered by the level just loaded (the process-wide one is the caller's to set).
  if (s.log_level <= log_level::warn) {
    for (auto const& w : warnings) { log_unfiltered("warning: %s", w.c_str()); }
  }
  s.warnings = std::move(warnings);
  return s;
}

}  // namespace gpumem::config
