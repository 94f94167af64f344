// parse_toml: TOML text → settings, with one precise message per problem.
//
// toml++ is used header-only here (TOML_HEADER_ONLY): the preloaded shim links this
// library in whole and must not need libtomlplusplus.so at run time.

#include <gpumem/config.hpp>

#include "chain_rules.hpp"
#include "diagnostics.hpp"

#define TOML_HEADER_ONLY 1  // NOLINT: toml++ configuration macro
#include <toml++/toml.h>

#include <fmt/format.h>

#include <array>
#include <bit>
#include <limits>
#include <utility>

namespace gpumem::config {
namespace {

std::string_view type_name(toml::node const& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

int to_int(toml::source_index v) {
  return v > static_cast<toml::source_index>(std::numeric_limits<int>::max()) ? std::numeric_limits<int>::max()
                                                                              : static_cast<int>(v);
}

/// Parses one document; remembers the on_error policy once [gpumem] has set it, so
/// every later error carries what the user asked for.
class parser {
 public:
  explicit parser(std::string_view source) : source_{source} {}

  settings run(std::string_view text) {
    toml::table root;
    try {
      root = toml::parse(text, source_);
    } catch (toml::parse_error const& e) {
      auto const& b = e.source().begin;
      detail::raise({source_, to_int(b.line), to_int(b.column)}, "syntax", e.description(),
                    "see config/default.toml for the format", policy_);
    }
    settings s;
    s.source = std::string{source_};
    // [gpumem] first: its on_error applies to errors found in the chain.
    if (toml::node* g = root.get("gpumem")) { read_gpumem(*g, s); }
    bool has_chain = false;
    for (auto&& [k, v] : root) {
      if (k.str() == "gpumem") { continue; }
      if (k.str() == "host" || k.str() == "managed") {
        read_process_chain(v, std::string{k.str()}, k.str() == "host" ? s.host : s.managed);
        continue;
      }
      if (k.str() == "chain") {
        has_chain = true;
        read_chain(v, s);
        continue;
      }
      fail(k.source(), std::string{k.str()}, fmt::format("unknown table or key \"{}\"", k.str()),
           "valid: [gpumem], [host], [managed] and [[chain]]");
    }
    // A file that only sets [gpumem] options keeps the embedded default chain.
    if (!has_chain) { s.chain = default_chain(); }
    detail::validate_chain(s.chain, source_, policy_);
    return s;
  }

 private:
  [[noreturn]] void fail(toml::source_region const& r, std::string_view key, std::string_view problem,
                         std::string_view hint) const {
    detail::raise({source_, to_int(r.begin.line), to_int(r.begin.column)}, key, problem, hint, policy_);
  }

  [[noreturn]] void wrong_type(toml::node const& n, std::string_view key, std::string_view expected,
                               std::string_view hint) const {
    fail(n.source(), key, fmt::format("expected {}, got {}", expected, type_name(n)), hint);
  }

  std::string get_string(toml::node const& n, std::string_view key, std::string_view hint) const {
    if (auto const* v = n.as_string()) { return v->get(); }
    wrong_type(n, key, "a string", hint);
  }

  /// An integer in [lo, hi].
  std::int64_t get_integer(toml::node const& n, std::string_view key, std::int64_t lo, std::int64_t hi,
                           std::string_view hint) const {
    auto const* i = n.as_integer();
    if (i == nullptr) { wrong_type(n, key, "an integer", hint); }
    if (i->get() < lo || i->get() > hi) { fail(n.source(), key, fmt::format("{} is out of range", i->get()), hint); }
    return i->get();
  }

  bool get_bool(toml::node const& n, std::string_view key) const {
    if (auto const* v = n.as_boolean()) { return v->get(); }
    wrong_type(n, key, "a boolean", "true or false");
  }

  /// One of `choices` ("a|b|c").
  std::string get_choice(toml::node const& n, std::string_view key, std::string_view choices) const {
    std::string const hint = fmt::format("valid: {}", choices);
    std::string value = get_string(n, key, hint);
    if (detail::is_choice(value, choices)) { return value; }
    fail(n.source(), key, fmt::format("unknown value \"{}\"", value), hint);
  }

  /// A size: a string parse_size accepts, or a non-negative integer of bytes.
  size_value get_size(toml::node const& n, std::string_view key, bool allow_percent = true) const {
    size_value v;
    if (auto const* i = n.as_integer()) {
      if (i->get() < 0) { fail(n.source(), key, fmt::format("negative size {}", i->get()), size_hint); }
      v = size_value::of_bytes(static_cast<std::uint64_t>(i->get()));
    } else if (auto const* s = n.as_string()) {
      try {
        v = parse_size(s->get());
      } catch (config_error const& e) { fail(n.source(), key, e.what(), size_hint); }
    } else {
      wrong_type(n, key, "a size (string or integer)", size_hint);
    }
    if (v.is_percent && !allow_percent) {
      fail(n.source(), key, fmt::format("\"{}\" is a percentage; this key needs an absolute size", v.to_string()),
           "e.g. 4096, 64KiB, 2MiB");
    }
    return v;
  }

  /// A release threshold: "auto", "unlimited", a size string without a percentage,
  /// or a non-negative integer of bytes.
  release_rule get_release_rule(toml::node const& n, std::string_view key) const {
    if (auto const* i = n.as_integer()) {
      if (i->get() < 0) { fail(n.source(), key, fmt::format("negative size {}", i->get()), release_threshold_hint); }
      return release_rule::keep(static_cast<std::uint64_t>(i->get()));
    }
    auto const* s = n.as_string();
    if (s == nullptr) { wrong_type(n, key, "a string or an integer", release_threshold_hint); }
    try {
      return parse_release_rule(s->get(), "key");
    } catch (config_error const& e) { fail(n.source(), key, e.what(), release_threshold_hint); }
  }

  std::string get_template(toml::node const& n, std::string_view key) const {
    std::string value = get_string(n, key, "a file path; %p pid, %r rank, %h host, %d device, %% a literal %");
    if (std::string const problem = check_template(value); !problem.empty()) {
      fail(n.source(), key, problem, "valid placeholders: %p pid, %r rank, %h host, %d device, %% a literal %");
    }
    return value;
  }

  void read_gpumem(toml::node& node, settings& s) {
    toml::table* t = node.as_table();
    if (t == nullptr) { wrong_type(node, "gpumem", "a table", "write [gpumem] followed by its keys"); }
    static constexpr std::string_view valid =
        "valid: sync_mode, log_file, log_queue, log_level, on_error, report, report_file, stacks, stack_sample, "
        "stack_min_size, release_threshold, deferred_flush";
    // on_error first, so a later mistake in this table already honours it.
    if (toml::node const* e = t->get("on_error")) {
      s.on_config_error = get_choice(*e, "gpumem.on_error", "fail|passthrough") == "fail" ? on_error::fail
                                                                                          : on_error::passthrough;
      policy_ = s.on_config_error;
    }
    for (auto&& [k, v] : *t) {
      std::string const key = fmt::format("gpumem.{}", k.str());
      std::string_view const name = k.str();
      if (name == "sync_mode") {
        s.sync = get_choice(v, key, "safe|stream") == "safe" ? sync_mode::safe : sync_mode::stream;
      } else if (name == "log_file") {
        s.log_file = get_template(v, key);
      } else if (name == "log_queue") {
        (void)get_bool(v, key);  // rows are always queued now; earlier files still load
      } else if (name == "log_level") {
        s.log_level = parse_log_level(get_choice(v, key, log_level_choices)).value();
      } else if (name == "on_error") {
        // read above
      } else if (name == "report") {
        s.report = get_bool(v, key);
      } else if (name == "report_file") {
        s.report_file = get_template(v, key);
      } else if (name == "stacks") {
        s.stacks = static_cast<int>(
            get_integer(v, key, 0, max_stack_frames, "0 (off) or the frames to record per allocation, 1 to 128"));
      } else if (name == "stack_sample") {
        s.stack_sample = static_cast<std::uint32_t>(
            get_integer(v, key, 1, 1'000'000'000, "1 (every allocation) or K: every K-th allocation of a thread"));
      } else if (name == "stack_min_size") {
        s.stack_min_size = static_cast<std::size_t>(get_size(v, key, false).bytes);
      } else if (name == "release_threshold") {
        s.release_threshold = get_release_rule(v, key);
      } else if (name == "deferred_flush") {
        static_cast<void>(get_size(v, key, false));  // still checked: a typo is still an error
        s.warnings.push_back(
            fmt::format("{}:{}:{}: gpumem.deferred_flush no longer has an effect (safe mode reclaims freed memory with "
                        "GPU-side barriers, without device synchronizations): remove it",
                        source_, k.source().begin.line, k.source().begin.column));
      } else {
        fail(k.source(), key, fmt::format("unknown key \"{}\"", name), valid);
      }
    }
  }

  /// [host] (pinned host memory) or [managed]: a chain of the process
  /// (process_chain_settings.hpp).
  void read_process_chain(toml::node& node, std::string const& table, process_chain_settings& c) {
    toml::table* t = node.as_table();
    if (t == nullptr) { wrong_type(node, table, "a table", fmt::format("write [{}] followed by its keys", table)); }
    for (auto&& [k, v] : *t) {
      std::string const key = fmt::format("{}.{}", table, k.str());
      std::string_view const name = k.str();
      if (name == "pool") {
        c.pool = get_bool(v, key);
      } else if (name == "limit" || name == "pool_max") {
        auto const bytes = static_cast<std::size_t>(get_size(v, key, false).bytes);
        if (bytes == 0) {
          fail(v.source(), key,
               fmt::format("0 would refuse every {} allocation", table == "host" ? "pinned" : "managed"),
               "remove the key for no cap, or give a size above 0");
        }
        (name == "limit" ? c.limit : c.pool_max) = bytes;
      } else {
        fail(k.source(), key, fmt::format("unknown key \"{}\"", name), "valid: pool, limit, pool_max");
      }
    }
  }

  void read_chain(toml::node& node, settings& s) {
    toml::array* a = node.as_array();
    if (a == nullptr) { wrong_type(node, "chain", "an array of tables", "write each entry as [[chain]]"); }
    if (a->empty()) {
      fail(
          node.source(), "chain", "the chain is empty",
          fmt::format("list [[chain]] entries outermost first, ending in a device resource: {}", detail::device_types));
    }
    for (std::size_t i = 0; i < a->size(); ++i) {
      toml::node& entry = *a->get(i);
      std::string const prefix = fmt::format("chain[{}]", i);
      toml::table* t = entry.as_table();
      if (t == nullptr) { wrong_type(entry, prefix, "a table", "write each entry as [[chain]]"); }
      s.chain.push_back(read_entry(*t, prefix));
    }
  }

  resource_spec read_entry(toml::table& t, std::string const& prefix) {
    toml::node const* type_node = t.get("type");
    if (type_node == nullptr) {
      fail(t.source(), prefix + ".type", "missing",
           fmt::format("every [[chain]] entry needs type = one of: {}", detail::resource_types));
    }
    std::string const type = get_choice(
        *type_node, prefix + ".type",
        "pool|binning|fixed_size|async|cuda|vmm|managed|limiting|statistics|tracking|logging");
    resource_spec spec{type, cuda_spec{}, std::string{source_}, to_int(t.source().begin.line),
                       to_int(t.source().begin.column)};
    entry_reader const r{*this, t, prefix, type};
    if (type == "pool") {
      spec.options = read_pool(r);
    } else if (type == "binning") {
      spec.options = read_binning(r, t);
    } else if (type == "fixed_size") {
      spec.options = read_fixed_size(r);
    } else if (type == "async") {
      spec.options = read_async(r);
    } else if (type == "limiting") {
      spec.options = read_limiting(r, t);
    } else if (type == "tracking") {
      spec.options = read_tracking(r);
    } else if (type == "logging") {
      spec.options = read_logging(r, t);
    } else {
      r.none();  // cuda, vmm, managed, statistics
      spec.options = type == "cuda"      ? resource_options{cuda_spec{}}
                     : type == "vmm"     ? resource_options{vmm_spec{}}
                     : type == "managed" ? resource_options{managed_spec{}}
                                         : resource_options{statistics_spec{}};
    }
    return spec;
  }

  /// Visits an entry's keys other than `type`, rejecting those not in `allowed`.
  struct entry_reader {
    parser const& p;
    toml::table& t;
    std::string const& prefix;
    std::string const& type;

    template <typename F>
    void each(std::initializer_list<std::string_view> allowed, F&& f) const {
      for (auto&& [k, v] : t) {
        std::string_view const name = k.str();
        if (name == "type") { continue; }
        std::string const key = fmt::format("{}.{}", prefix, name);
        bool known = false;
        for (auto const a : allowed) { known = known || a == name; }
        if (!known) {
          std::string hint = allowed.size() == 0 ? fmt::format("\"{}\" takes no options", type)
                                                 : fmt::format("valid for {}:", type);
          for (auto const a : allowed) { hint += fmt::format(" {}", a); }
          p.fail(k.source(), key, fmt::format("unknown key \"{}\"", name), hint);
        }
        f(name, v, key);
      }
    }
    /// For types without options: every key but `type` is an error.
    void none() const {
      each({}, [](std::string_view, toml::node const&, std::string const&) {});
    }
  };

  pool_spec read_pool(entry_reader const& r) const {
    pool_spec p;
    r.each({"initial_size", "maximum_size", "min_growth"},
           [&](std::string_view k, toml::node const& v, std::string const& key) {
             if (k == "initial_size") {
               p.initial_size = get_size(v, key);
             } else if (k == "maximum_size") {
               p.maximum_size = get_size(v, key);
             } else {
               p.min_growth = get_size(v, key);
             }
           });
    return p;
  }

  fixed_size_spec read_fixed_size(entry_reader const& r) const {
    fixed_size_spec f;
    r.each({"block_size", "preallocate"}, [&](std::string_view k, toml::node const& v, std::string const& key) {
      if (k == "block_size") {
        f.block_size = get_size(v, key, false);
        if (f.block_size.bytes == 0) { fail(v.source(), key, "block size 0", "at least 256 B"); }
        return;
      }
      auto const* n = v.as_integer();
      if (n == nullptr) { wrong_type(v, key, "an integer", "blocks reserved per growth, at least 1"); }
      if (n->get() < 1) { fail(v.source(), key, fmt::format("{} blocks", n->get()), "at least 1"); }
      f.preallocate = static_cast<std::size_t>(n->get());
    });
    return f;
  }

  async_spec read_async(entry_reader const& r) const {
    async_spec a;
    r.each({"release_threshold", "initial_size"}, [&](std::string_view k, toml::node const& v, std::string const& key) {
      (k == "release_threshold" ? a.release_threshold : a.initial_size) = get_size(v, key);
    });
    return a;
  }

  limiting_spec read_limiting(entry_reader const& r, toml::table const& t) const {
    limiting_spec l;
    bool has_limit = false;
    r.each({"limit"}, [&](std::string_view, toml::node const& v, std::string const& key) {
      l.limit = get_size(v, key);
      has_limit = true;
    });
    if (!has_limit) { fail(t.source(), r.prefix + ".limit", "missing", "e.g. limit = \"8GiB\" or \"80%\""); }
    return l;
  }

  tracking_spec read_tracking(entry_reader const& r) const {
    tracking_spec tr;
    r.each({"capture_stacks"}, [&](std::string_view, toml::node const& v, std::string const& key) {
      tr.capture_stacks = get_bool(v, key);
    });
    return tr;
  }

  logging_spec read_logging(entry_reader const& r, toml::table const& t) const {
    logging_spec lg;
    r.each({"file"},
           [&](std::string_view, toml::node const& v, std::string const& key) { lg.file = get_template(v, key); });
    if (lg.file.empty()) { fail(t.source(), r.prefix + ".file", "missing", "e.g. file = \"gpumem-%p-%d.csv\""); }
    return lg;
  }

  /// A bin size: absolute, at least 256 B, a multiple of 256 (the allocation granularity).
  std::size_t get_bin_size(toml::node const& v, std::string const& key, bool power_of_two) const {
    auto const bytes = get_size(v, key, false).bytes;
    if (bytes < 256 || bytes % 256 != 0 || (power_of_two && !std::has_single_bit(bytes))) {
      fail(v.source(), key,
           fmt::format("bin size {} is not {}", format_bytes(bytes),
                       power_of_two ? "a power of two of at least 256 B" : "a multiple of 256 B"),
           power_of_two ? "e.g. 256B, 4KiB, 1MiB" : "e.g. 256B, 768B, 4KiB");
    }
    return static_cast<std::size_t>(bytes);
  }

  binning_spec read_binning(entry_reader const& r, toml::table const& t) const {
    std::size_t min_size = 256;
    std::size_t max_size = std::size_t{1} << 20U;
    binning_spec b;
    bool has_range = false;
    r.each({"min_size", "max_size", "bins"}, [&](std::string_view k, toml::node const& v, std::string const& key) {
      if (k == "bins") {
        auto const* a = v.as_array();
        if (a == nullptr) { wrong_type(v, key, "an array of sizes", "e.g. bins = [\"256B\", \"4KiB\", \"64KiB\"]"); }
        if (a->empty()) { fail(v.source(), key, "no bins", "e.g. bins = [\"256B\", \"4KiB\", \"64KiB\"]"); }
        for (std::size_t i = 0; i < a->size(); ++i) {
          std::string const item_key = fmt::format("{}[{}]", key, i);
          std::size_t const size = get_bin_size(*a->get(i), item_key, false);
          if (!b.bins.empty() && size <= b.bins.back()) {
            fail(a->get(i)->source(), item_key,
                 fmt::format("{} does not follow {}", format_bytes(size), format_bytes(b.bins.back())),
                 "list bins in ascending order, each once");
          }
          b.bins.push_back(size);
        }
        return;
      }
      has_range = true;
      (k == "min_size" ? min_size : max_size) = get_bin_size(v, key, true);
    });
    if (has_range && !b.bins.empty()) {
      fail(t.source(), r.prefix, "both bins and min_size/max_size given", "use one of the two forms");
    }
    if (b.bins.empty()) {
      if (min_size > max_size) {
        fail(t.source(), r.prefix + ".min_size",
             fmt::format("min_size {} is above max_size {}", format_bytes(min_size), format_bytes(max_size)),
             "min_size must not exceed max_size");
      }
      b.bins = detail::power_of_two_bins(static_cast<unsigned>(std::countr_zero(min_size)),
                                         static_cast<unsigned>(std::countr_zero(max_size)));
    }
    return b;
  }

  static std::vector<resource_spec> default_chain() { return parse_toml(default_toml(), "embedded default").chain; }

  std::string_view source_;
  on_error policy_ = on_error::fail;
};

}  // namespace

settings parse_toml(std::string_view const text, std::string_view const source_name) {
  return parser{source_name}.run(text);
}

}  // namespace gpumem::config
