#pragma once
// Sizes as people write them in configuration files and environment variables.
//
// Accepted forms (case-insensitive unit, optional spaces before it):
//   "4096"      bytes                       "512MB"   SI: powers of 1000 (kB, MB, GB, TB)
//   "8GiB"      IEC: powers of 1024          "8G"      bare K/M/G/T: powers of 1024, like
//   "1.5GiB"    fractions (rounded down to      Slurm's --mem and ulimit
//               whole bytes)                 "50%"     percent of the device's free memory,
//   "0"         zero                                   resolved when the chain is built
// Rejected: negative numbers, a missing number, unknown units, fractional bytes ("1.5"),
// values that overflow 64 bits, percentages above 100.

#include <gpumem/config/config_error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpumem::config {

/// Bytes, or a percentage of the free memory of a device (resolved by build_chain).
struct size_value {
  std::uint64_t bytes = 0;  ///< when !is_percent
  double percent = 0.0;     ///< in [0, 100] when is_percent
  bool is_percent = false;

  [[nodiscard]] static constexpr size_value of_bytes(std::uint64_t b) noexcept { return {b, 0.0, false}; }
  [[nodiscard]] static constexpr size_value of_percent(double p) noexcept { return {0, p, true}; }

  /// Bytes for a device with `free_bytes` free: a percentage rounds down to a multiple of
  /// 256 bytes (the allocation granularity), absolute sizes are returned unchanged.
  [[nodiscard]] std::size_t resolve(std::size_t free_bytes) const noexcept;

  /// "8 GiB", "50%": for messages and describe().
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(size_value const&, size_value const&) = default;
};

/// Parses a size (see the file comment). Throws config_error whose message is the
/// problem only, e.g. `"12XB": unknown unit "XB"` (add size_hint when showing it).
[[nodiscard]] size_value parse_size(std::string_view text);

/// Human-readable bytes with IEC units and at most two decimals: "0 B", "1000 B",
/// "1.5 GiB", "256 MiB". Used by describe() and reports.
[[nodiscard]] std::string format_bytes(std::uint64_t bytes);

/// The accepted size forms, for hints in error messages.
inline constexpr std::string_view size_hint =
    "a size such as 4096, 512MiB, 8GiB, 1.5GB or 50% of free device memory; "
    "units B, KiB/MiB/GiB/TiB or K/M/G/T (1024), kB/MB/GB/TB (1000)";

}  // namespace gpumem::config
