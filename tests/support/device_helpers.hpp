#pragma once
// Device-side checks that work on the simulated device and on a real GPU alike:
// every access goes through gpumem::detail::driver() (cuMemsetD8 / cuMemcpyDtoH),
// never by dereferencing a device pointer on the host.

#include <gpumem/detail/driver_api.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpumem::test {

/// Reads [p, p+bytes) back; true when every byte is `value`.
inline bool check(void* p, std::size_t bytes, unsigned char value) {
  auto const& d = detail::driver();
  auto const dp = reinterpret_cast<CUdeviceptr>(p);
  if (d.cuCtxSynchronize() != CUDA_SUCCESS) return false;
  std::vector<unsigned char> host(bytes);
  if (d.cuMemcpyDtoH(host.data(), dp, bytes) != CUDA_SUCCESS) return false;
  for (auto b : host)
    if (b != value) return false;
  return true;
}

/// Fills [p, p+bytes) with `value` and reads it back; true when every byte matches.
inline bool fill_and_check(void* p, std::size_t bytes, unsigned char value) {
  auto const& d = detail::driver();
  if (d.cuMemsetD8(reinterpret_cast<CUdeviceptr>(p), value, bytes) != CUDA_SUCCESS) return false;
  return check(p, bytes, value);
}

/// Total memory of the current context's device (0 if unknown).
inline std::size_t device_total_memory() {
  if (detail::ensure_context() != CUDA_SUCCESS) return 0;
  CUdevice dev{};
  std::size_t total = 0;
  auto const& d = detail::driver();
  if (d.cuCtxGetDevice(&dev) != CUDA_SUCCESS || d.cuDeviceTotalMem(&total, dev) != CUDA_SUCCESS) return 0;
  return total;
}

}  // namespace gpumem::test
