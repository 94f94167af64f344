#pragma once
// resource_chain: the resources of one device, built from settings, owned together.
//
// Order, outermost first: statistics (live: bytes the program holds) → the chain's
// entries as written → statistics (device: bytes reserved from the device) → the
// device resource. Safe mode needs no entry of its own: every caching resource
// honours call_context::synchronous itself.
//
// Thread safety: the resources are thread-safe; the chain object itself is immutable
// after build_chain. Destroying it returns cached memory to the device, so destroy it
// only while the driver is alive (the shim never destroys chains at exit).

#include <gpumem/config/settings.hpp>
#include <gpumem/device_memory_resource.hpp>

#include <memory>
#include <string>
#include <vector>

namespace gpumem {
class statistics_resource_adaptor;
class tracking_resource_adaptor;
class limiting_resource_adaptor;
class csv_log_writer;
}  // namespace gpumem

namespace gpumem::config {

class resource_chain {
 public:
  resource_chain(resource_chain const&) = delete;
  resource_chain& operator=(resource_chain const&) = delete;
  resource_chain(resource_chain&&) = delete;
  resource_chain& operator=(resource_chain&&) = delete;
  ~resource_chain();

  /// Where the shim allocates (the live statistics adaptor).
  [[nodiscard]] device_memory_resource& top() noexcept;
  /// Outermost: bytes the program holds.
  [[nodiscard]] statistics_resource_adaptor& live_stats() noexcept;
  /// Just above the device resource: bytes reserved from the device, upstream calls.
  [[nodiscard]] statistics_resource_adaptor& device_stats() noexcept { return *device_stats_; }
  /// The first tracking adaptor, nullptr unless the chain has one.
  [[nodiscard]] tracking_resource_adaptor* tracker() noexcept;
  /// The outermost limiting adaptor, nullptr unless limited (cudaMemGetInfo reports its
  /// limit as total).
  [[nodiscard]] limiting_resource_adaptor* limiter() noexcept;
  /// top().info(): what the whole chain holds.
  [[nodiscard]] resource_info info() const;
  /// "limiting(8 GiB) → pool(initial 4 GiB, max 70 GiB) → cuda":
  /// the configured entries with resolved sizes (the two statistics adaptors every
  /// chain has are not shown).
  [[nodiscard]] std::string describe() const;
  /// The entries' types outermost first, including the implicit ones
  /// ("statistics", ..., "statistics", "cuda"): for tests and reports.
  [[nodiscard]] std::vector<std::string> const& types() const noexcept { return types_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The device's context is about to be reset and this chain retired: memory that
  /// outlives contexts (vmm_memory_resource's mappings) goes back to the device now,
  /// as cuMemAlloc's memory goes with the context. Call release() first. Never throws.
  void device_reset() noexcept;

 private:
  friend std::unique_ptr<resource_chain> build_chain(settings const&, int);
  friend class chain_builder;
  resource_chain() = default;

  int device_ = -1;
  // Innermost first: each entry's upstream is built (and so destroyed) before it.
  std::vector<std::unique_ptr<device_memory_resource>> owned_;
  std::vector<std::string> types_;        // outermost first
  std::vector<std::string> description_;  // outermost first, configured entries only
  device_memory_resource* top_ = nullptr;
  statistics_resource_adaptor* live_stats_ = nullptr;
  statistics_resource_adaptor* device_stats_ = nullptr;
  tracking_resource_adaptor* tracker_ = nullptr;
  limiting_resource_adaptor* limiter_ = nullptr;
};

/// Builds `device`'s chain. The device's context must be current: percent sizes resolve
/// against cuMemGetInfo's free bytes (via gpumem::detail::driver()), and log file
/// templates are expanded with `device`. Throws config_error for values that only fail
/// once resolved (maximum < initial after percentages, an unwritable log file), and the
/// resources' own errors (cuda_error, out_of_memory) when they cannot be created.
/// settings::disabled is not consulted: whether to build at all is the caller's choice.
[[nodiscard]] std::unique_ptr<resource_chain> build_chain(settings const& s, int device);

}  // namespace gpumem::config
