#pragma once
// Rules about chains that do not depend on where the chain came from: entry roles,
// the shape every chain must have, and the canonical chains of GPUMEM_RESOURCE.

#include <gpumem/config/settings.hpp>

#include <string_view>
#include <vector>

namespace gpumem::config::detail {

inline constexpr std::string_view resource_types =
    "pool, binning, fixed_size, async, cuda, vmm, managed, limiting, statistics, tracking, logging";
inline constexpr std::string_view device_types = "cuda | vmm | async | managed";

/// Throws config_error unless `chain` is non-empty, ends in exactly one device resource,
/// and has nothing after it; no limit and no pool maximum is 0; pool sizes must satisfy
/// maximum >= initial where both are known without a device (both absolute or both
/// percentages).
void validate_chain(std::vector<resource_spec> const& chain, std::string_view chain_source, on_error policy);

/// 0 bytes or 0%: a cap that would refuse every allocation.
[[nodiscard]] inline bool is_zero(size_value const& v) noexcept {
  return v.is_percent ? v.percent <= 0.0 : v.bytes == 0;
}

/// Checks one pool's maximum against its initial size; `initial`/`maximum` are bytes
/// already resolved (percentages resolved, or absolute).
void check_pool_bounds(resource_spec const& spec, std::string_view key, std::size_t initial, std::size_t maximum,
                       on_error policy);

/// The resources (no adaptors) GPUMEM_RESOURCE=<name> stands for; empty for an unknown
/// name. pool → pool → cuda; binning → binning(256 B..1 MiB) → pool → cuda; async;
/// cuda; managed.
[[nodiscard]] std::vector<resource_spec> canonical_resources(std::string_view name);

/// Power-of-two bins from 2^min_exp to 2^max_exp bytes.
[[nodiscard]] std::vector<std::size_t> power_of_two_bins(unsigned min_exp, unsigned max_exp);

}  // namespace gpumem::config::detail
