#pragma once
// What a configuration says: global switches and the resource chain, as parsed from
// TOML (parse_toml) and the environment (load). Plain data; build_chain turns it into
// resources.

#include <gpumem/config/config_error.hpp>
#include <gpumem/config/process_chain_settings.hpp>
#include <gpumem/config/size_parse.hpp>
#include <gpumem/diagnostics.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace gpumem::config {

/// How the shim treats cudaMalloc/cudaFree (and their driver twins).
enum class sync_mode {
  /// default: CUDA's synchronous semantics (call_context::synchronous): cudaMalloc's
  /// memory is usable at once on any stream, and cudaFree'd memory is reused only
  /// after a device-wide GPU-side barrier (no host synchronization)
  safe,
  stream  ///< trust stream order as RMM does: both are stream-ordered on the legacy stream
};

/// What a synchronization point (cudaDeviceSynchronize, cudaStreamSynchronize,
/// cudaEventSynchronize and their driver twins) leaves cached of the memory a
/// device's chain holds and the program does not: `release_threshold`.
struct release_rule {
  /// bytes: never give back at synchronization points ("unlimited").
  static constexpr std::uint64_t never = ~std::uint64_t{0};
  /// "auto" (default): what the program needed over the last `window_s` seconds
  /// stays cached (the high-water of its live bytes in the intervals between
  /// synchronizations that ended then, less what it holds now); the rest goes back.
  /// So a loop whose steps vary keeps what its largest recent step needs, and
  /// memory unneeded for a whole window goes back at the next synchronization.
  bool automatic = true;
  std::uint64_t bytes = 0;  ///< !automatic: at most this many cached bytes stay; `never`: all
  /// "auto:N" (N seconds, 0..3600; "auto" is 10): 0 keeps only what the last
  /// interval needed.
  std::uint32_t window_s = default_window_s;
  static constexpr std::uint32_t default_window_s = 10;
  static constexpr std::uint32_t longest_window_s = 3600;

  [[nodiscard]] static constexpr release_rule keep(std::uint64_t b) noexcept { return {false, b, 0}; }
  [[nodiscard]] static constexpr release_rule automatic_over(std::uint32_t seconds) noexcept {
    return {true, 0, seconds};
  }
  /// "auto", "auto:N", "unlimited" or the size ("4 GiB").
  [[nodiscard]] std::string to_string() const;
  friend bool operator==(release_rule const&, release_rule const&) = default;
};

/// A release_threshold as written: "auto", "auto:N" (seconds), "unlimited" or an absolute size
/// (parse_size; no percentage). Throws config_error whose message is the problem
/// only (add release_threshold_hint when showing it); `what` names the setting's
/// kind in it ("variable", "key", "option").
[[nodiscard]] release_rule parse_release_rule(std::string_view text, std::string_view what);
inline constexpr std::string_view release_threshold_hint =
    "auto, unlimited, or the cached bytes to keep: a size such as 0, 512MiB or 4GiB; auto:SECONDS sets auto's "
    "window (auto is auto:10)";

// Typed options of each chain entry. Sizes may be percentages of the device's free
// memory; build_chain resolves them. Defaults are those of an entry that omits the key.

/// `pool`: coalescing best-fit sub-allocator (pool_memory_resource).
struct pool_spec {
  size_value initial_size = size_value::of_bytes(0);  ///< 0: grow on demand
  std::optional<size_value> maximum_size;             ///< none: no cap (the device decides)
  size_value min_growth = size_value::of_bytes(std::size_t{2} << 20U);
};
/// `binning`: power-of-two fixed-size bins; larger requests go to the next entry.
struct binning_spec {
  std::vector<std::size_t> bins;  ///< ascending bin sizes, powers of two >= 256 B
};
/// `fixed_size`: one block size (fixed_size_memory_resource).
struct fixed_size_spec {
  size_value block_size = size_value::of_bytes(std::size_t{1} << 20U);
  std::size_t preallocate = 128;  ///< blocks reserved per growth
};
/// `async`: cuMemAllocFromPoolAsync on a pool of its own (a device resource that caches).
struct async_spec {
  std::optional<size_value> release_threshold;
  std::optional<size_value> initial_size;
};
struct cuda_spec {};     ///< `cuda`: cuMemAlloc / cuMemFree
struct vmm_spec {};      ///< `vmm`: cuMemCreate + cuMemMap, each growth right after the last
struct managed_spec {};  ///< `managed`: cuMemAllocManaged
struct limiting_spec {   ///< `limiting`: byte cap
  size_value limit;
};
struct statistics_spec {};  ///< `statistics`: counters at this point of the chain
struct tracking_spec {      ///< `tracking`: outstanding allocations (leak report)
  bool capture_stacks = false;
};
struct logging_spec {  ///< `logging`: CSV rows of every call at this point of the chain
  std::string file;    ///< path template (expand_template), expanded by build_chain
};

using resource_options = std::variant<pool_spec, binning_spec, fixed_size_spec, async_spec, cuda_spec, vmm_spec,
                                      managed_spec, limiting_spec, statistics_spec, tracking_spec, logging_spec>;

/// One [[chain]] entry.
struct resource_spec {
  std::string type;  ///< "pool", "binning", ... (matches options)
  resource_options options;
  std::string source;  ///< file path, "environment" or "embedded default"
  int line = 0;        ///< 1-based position of the entry in `source`; 0 if none
  int column = 0;
};

/// Role of a chain entry: validation and build order depend on it.
enum class resource_role {
  adaptor,  ///< limiting, statistics, tracking, logging: wraps the next entry
  caching,  ///< pool, binning, fixed_size: sub-allocates from the next entry
  device    ///< cuda, async, managed: the last entry
};
[[nodiscard]] resource_role role_of(resource_options const& options) noexcept;
/// Whether the entry keeps freed memory for reuse (pool, binning, fixed_size, async).
[[nodiscard]] bool caches_memory(resource_options const& options) noexcept;

/// Everything the shim and the tools need to know, read once.
struct settings {
  bool disabled = false;  ///< GPUMEM_DISABLE=1: pure pass-through
  sync_mode sync = sync_mode::safe;
  std::string log_file;  ///< CSV allocation log path template ("" = none); the shim writes it
  gpumem::log_level log_level = gpumem::log_level::warn;  ///< messages to stderr (diagnostics.hpp)
  on_error on_config_error = on_error::fail;
  bool report = false;      ///< one-screen summary at exit
  std::string report_file;  ///< "" = stderr; a path template like log_file
  /// Call sites: frames of the calling stack recorded per allocation (0 = off,
  /// at most max_stack_frames). Stacks go to "<log>.stacks", ids to the log's Stack column.
  int stacks = 0;
  /// Record the stack of every stack_sample-th allocation of a thread (1 = all)...
  std::uint32_t stack_sample = 1;
  /// ...and of every allocation of at least this many bytes, whatever the sampling.
  std::size_t stack_min_size = std::size_t{16} << 20U;
  /// What synchronization points give back of the memory the chains cache.
  release_rule release_threshold{};
  std::vector<resource_spec> chain;  ///< outermost first; the last is a device resource
  process_chain_settings host{};     ///< pinned host memory's chain ([host])
  process_chain_settings managed{};  ///< managed memory's chain ([managed])
  std::string source;                ///< "embedded default", or the file path
  /// Non-fatal findings (unknown GPUMEM_* variables, ...), already printed to stderr by
  /// load() unless log_level is error or off.
  std::vector<std::string> warnings;
};

/// Most frames a recorded stack may have (settings::stacks).
inline constexpr int max_stack_frames = 128;

[[nodiscard]] std::string_view to_string(sync_mode m) noexcept;
[[nodiscard]] std::string_view to_string(on_error e) noexcept;

}  // namespace gpumem::config
