#include "pool.hpp"

#include "state.hpp"

#include <unordered_set>

namespace gpumemsim {
namespace {

struct pool_registry {
  std::mutex mutex;
  std::unordered_set<void const*> live;
  std::unordered_set<void const*> dead;
};
pool_registry& pools() {
  static auto* r = new pool_registry;
  return *r;
}

}  // namespace

void mem_pool::on_allocate(std::uint64_t bytes) {
  std::lock_guard lock(mutex);
  used += bytes;
  if (used > used_high) used_high = used;
}

void mem_pool::on_free(std::uint64_t bytes) {
  std::lock_guard lock(mutex);
  used -= bytes;
}

mem_pool* new_pool(int device, bool is_default) {
  auto* p = new mem_pool;
  p->device = device;
  p->is_default = is_default;
  auto& r = pools();
  std::lock_guard lock(r.mutex);
  r.live.insert(p);
  return p;
}

mem_pool* pool_from_handle(CUmemoryPool h, char const* entry) {
  auto& r = pools();
  std::lock_guard lock(r.mutex);
  if (r.live.count(h) != 0) return reinterpret_cast<mem_pool*>(h);
  if (r.dead.count(h) != 0) violation("use of destroyed memory pool %p (%s)", static_cast<void*>(h), entry);
  return nullptr;
}

void retire_pool(mem_pool* p) {
  auto& r = pools();
  std::lock_guard lock(r.mutex);
  r.live.erase(p);
  r.dead.insert(p);
  std::lock_guard plock(p->mutex);
  p->destroyed = true;
}

void reset_pools_of(int device) {
  auto& r = pools();
  std::lock_guard lock(r.mutex);
  for (auto it = r.live.begin(); it != r.live.end();) {
    auto* p = static_cast<mem_pool*>(const_cast<void*>(*it));
    if (p->device != device) {
      ++it;
      continue;
    }
    std::lock_guard plock(p->mutex);
    p->used = 0;
    p->used_high = 0;
    if (p->is_default) {
      ++it;
      continue;
    }
    p->destroyed = true;
    r.dead.insert(p);
    it = r.live.erase(it);
  }
}

}  // namespace gpumemsim
