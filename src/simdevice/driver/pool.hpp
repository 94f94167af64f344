#pragma once
// Memory pools of the simulated device. A pool here only keeps accounting and
// attributes: its memory comes straight from the device heap and returns there
// when the stream-ordered free runs, so a pool never caches (TrimTo has nothing
// to release and reserved == used).
//
// Thread safety: attributes and counters are guarded by the pool's mutex; pool
// objects are never deleted (destroyed handles are detected, not reused).

#include "sim_api.hpp"

#include <cstdint>
#include <mutex>

namespace gpumemsim {

struct mem_pool {
  int device = 0;
  bool is_default = false;
  bool destroyed = false;
  std::mutex mutex;
  std::uint64_t release_threshold = 0;
  int reuse_follow_event = 1;
  int reuse_opportunistic = 1;
  int reuse_internal_deps = 1;
  std::uint64_t used = 0;
  std::uint64_t used_high = 0;

  void on_allocate(std::uint64_t bytes);
  void on_free(std::uint64_t bytes);
};

mem_pool* new_pool(int device, bool is_default);
/// The live pool behind a handle, or nullptr (a destroyed handle counts a violation).
mem_pool* pool_from_handle(CUmemoryPool h, char const* entry);
inline CUmemoryPool to_handle(mem_pool* p) noexcept { return reinterpret_cast<CUmemoryPool>(p); }

}  // namespace gpumemsim

namespace gpumemsim {
/// Makes a pool handle invalid (cuMemPoolDestroy).
void retire_pool(mem_pool* p);
/// Retires every created (non-default) pool of a device and restarts the
/// default pool's counters (primary context reset).
void reset_pools_of(int device);
}  // namespace gpumemsim
