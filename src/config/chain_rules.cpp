// Chain shape rules and canonical chains (src/config/chain_rules.hpp).

#include "chain_rules.hpp"

#include "diagnostics.hpp"

namespace gpumem::config::detail {

namespace {

location where(resource_spec const& s) { return {s.source, s.line, s.column}; }

std::string key_of(std::size_t index, std::string_view suffix = {}) {
  return fmt::format("chain[{}]{}{}", index, suffix.empty() ? "" : ".", suffix);
}

}  // namespace

void validate_chain(std::vector<resource_spec> const& chain, std::string_view const chain_source,
                    on_error const policy) {
  if (chain.empty()) {
    raise({chain_source}, "chain", "the chain is empty",
          fmt::format("list [[chain]] entries outermost first, ending in a device resource: {}", device_types), policy);
  }
  std::size_t device_index = chain.size();
  for (std::size_t i = 0; i < chain.size(); ++i) {
    resource_spec const& s = chain[i];
    resource_role const role = role_of(s.options);
    if (device_index < chain.size()) {
      std::string_view const device = chain[device_index].type;
      if (role == resource_role::device) {
        raise(where(s), key_of(i, "type"), fmt::format("a second device resource \"{}\" after \"{}\"", s.type, device),
              "a chain has exactly one device resource, its last entry", policy);
      }
      raise(where(s), key_of(i, "type"),
            fmt::format("{} \"{}\" after the device resource \"{}\"",
                        role == resource_role::adaptor ? "adaptor" : "resource", s.type, device),
            fmt::format("entries wrap the ones after them: move \"{}\" above \"{}\"", s.type, device), policy);
    }
    if (role == resource_role::device) { device_index = i; }
  }
  if (device_index == chain.size()) {
    resource_spec const& last = chain.back();
    if (role_of(last.options) == resource_role::caching) {
      raise(where(last), key_of(chain.size() - 1, "type"),
            fmt::format("\"{}\" has no upstream to get memory from", last.type),
            fmt::format("add a device resource after it: {}", device_types), policy);
    }
    raise(where(last), key_of(chain.size() - 1, "type"),
          fmt::format("the chain ends in \"{}\", not in a device resource", last.type),
          fmt::format("end it with one of: {}", device_types), policy);
  }
  for (std::size_t i = 0; i < chain.size(); ++i) {
    // A zero cap is a mistake, not a meaning: every allocation would fail, silently.
    resource_spec const& s = chain[i];
    if (auto const* l = std::get_if<limiting_spec>(&s.options); l != nullptr && is_zero(l->limit)) {
      raise(where(s), key_of(i, "limit"), fmt::format("limit {} would refuse every allocation", l->limit.to_string()),
            "omit the limiting entry for no limit, or give a size above 0", policy);
    }
    if (auto const* p = std::get_if<pool_spec>(&s.options);
        p != nullptr && p->maximum_size && is_zero(*p->maximum_size)) {
      raise(where(s), key_of(i, "maximum_size"),
            fmt::format("maximum {} lets the pool hold no memory: every allocation would fail",
                        p->maximum_size->to_string()),
            "omit maximum_size for no cap, or give a size above 0", policy);
    }
  }
  for (std::size_t i = 0; i < chain.size(); ++i) {
    resource_spec const& s = chain[i];
    auto const* pool = std::get_if<pool_spec>(&s.options);
    if (pool == nullptr || !pool->maximum_size) { continue; }
    if (pool->initial_size.is_percent != pool->maximum_size->is_percent) { continue; }  // known per device
    if (pool->initial_size.is_percent) {
      if (pool->maximum_size->percent < pool->initial_size.percent) {
        raise(where(s), key_of(i, "maximum_size"),
              fmt::format("maximum {} is below initial {}", pool->maximum_size->to_string(),
                          pool->initial_size.to_string()),
              "maximum_size must be at least initial_size", policy);
      }
      continue;
    }
    check_pool_bounds(s, key_of(i, "maximum_size"), pool->initial_size.bytes, pool->maximum_size->bytes, policy);
  }
}

void check_pool_bounds(resource_spec const& spec, std::string_view const key, std::size_t const initial,
                       std::size_t const maximum, on_error const policy) {
  if (maximum >= initial) { return; }
  auto const& pool = std::get<pool_spec>(spec.options);
  std::string const initial_text = pool.initial_size.is_percent
                                       ? fmt::format("{} = {}", pool.initial_size.to_string(), format_bytes(initial))
                                       : format_bytes(initial);
  std::string const maximum_text = pool.maximum_size->is_percent
                                       ? fmt::format("{} = {}", pool.maximum_size->to_string(), format_bytes(maximum))
                                       : format_bytes(maximum);
  raise(where(spec), key, fmt::format("maximum {} is below initial {}", maximum_text, initial_text),
        "maximum_size must be at least initial_size", policy);
}

std::vector<std::size_t> power_of_two_bins(unsigned const min_exp, unsigned const max_exp) {
  std::vector<std::size_t> bins;
  for (unsigned e = min_exp; e <= max_exp; ++e) { bins.push_back(std::size_t{1} << e); }
  return bins;
}

std::vector<resource_spec> canonical_resources(std::string_view const name) {
  auto entry = [](std::string type, resource_options options) {
    return resource_spec{std::move(type), std::move(options), "GPUMEM_RESOURCE", 0, 0};
  };
  // The pool over mapped memory, as the default chain; cuda-pool: over cuMemAlloc slabs.
  if (name == "pool") { return {entry("pool", pool_spec{}), entry("vmm", vmm_spec{})}; }
  if (name == "cuda-pool") { return {entry("pool", pool_spec{}), entry("cuda", cuda_spec{})}; }
  if (name == "binning") {
    return {entry("binning", binning_spec{power_of_two_bins(8, 20)}), entry("pool", pool_spec{}),
            entry("vmm", vmm_spec{})};
  }
  if (name == "async") { return {entry("async", async_spec{})}; }
  if (name == "cuda") { return {entry("cuda", cuda_spec{})}; }
  if (name == "managed") { return {entry("managed", managed_spec{})}; }
  return {};
}

}  // namespace gpumem::config::detail
