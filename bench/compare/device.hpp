#pragma once
// The device side of the comparison harness: CUDA runtime calls checked, the device's
// description for the record, streams, and the "kernel" the multi-stream measurement
// launches per allocation.

#include "contender.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpumem_compare {

/// Throws std::runtime_error("<what>: <cudaGetErrorName>") unless e == cudaSuccess.
void cuda_check(cudaError_t e, char const* what);

struct device_info {
  std::string name;
  int driver_version = 0;   ///< cudaDriverGetVersion, e.g. 13000
  int runtime_version = 0;  ///< cudaRuntimeGetVersion
  std::uint64_t total_bytes = 0;
  int clock_khz = 0;       ///< SM clock, for the spin kernel's cycle count
  bool simulated = false;  ///< gpumem's simulated device (src/simdevice)
};

/// Makes device 0 current (creating its primary context) and describes it.
[[nodiscard]] device_info open_device();

/// cudaMemGetInfo's free and used bytes of the current device.
struct device_memory {
  std::uint64_t free = 0, total = 0;
  [[nodiscard]] std::uint64_t used() const noexcept { return total - free; }
};
[[nodiscard]] device_memory query_device_memory();

/// Streams owned for the whole run (cudaStreamNonBlocking unless asked otherwise).
class stream_set {
 public:
  stream_set() = default;
  explicit stream_set(std::size_t n, unsigned flags = cudaStreamNonBlocking);
  ~stream_set();
  stream_set(stream_set const&) = delete;
  stream_set& operator=(stream_set const&) = delete;
  stream_set(stream_set&& o) noexcept : streams_{std::move(o.streams_)} {}
  [[nodiscard]] stream_t operator[](std::size_t i) const { return streams_.at(i); }
  [[nodiscard]] std::size_t size() const noexcept { return streams_.size(); }
  void synchronize_all() const;

 private:
  std::vector<cudaStream_t> streams_;
};

/// Launches a one-thread kernel that spins for a number of GPU clock cycles and writes
/// one 8-byte word into the buffer it is given (RMM's multi-stream benchmark shape).
/// The kernel is PTX JIT-compiled through the driver (no nvcc needed to build). On a
/// device without modules (the simulated one) a host function that spins stands in;
/// how() says which.
class spin_launcher {
 public:
  explicit spin_launcher(device_info const& dev);
  /// Spins about `seconds` on `stream`, writing into out (>= 8 bytes of device memory).
  void launch(stream_t stream, void* out, double seconds) const;
  [[nodiscard]] std::string const& how() const noexcept { return how_; }
  [[nodiscard]] bool real_kernel() const noexcept { return function_ != nullptr; }

 private:
  void* function_ = nullptr;   ///< CUfunction
  void* launch_fn_ = nullptr;  ///< cuLaunchKernel
  double clock_hz_ = 0;
  std::string how_;
};

}  // namespace gpumem_compare
