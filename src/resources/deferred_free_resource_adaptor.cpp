#include <gpumem/call_context.hpp>
#include <gpumem/deferred_free_resource_adaptor.hpp>
#include <gpumem/detail/driver_api.hpp>

#include <functional>
#include <thread>
#include <utility>

namespace gpumem {

deferred_free_resource_adaptor::deferred_free_resource_adaptor(device_memory_resource* upstream,
                                                               std::size_t flush_threshold, int device)
    : upstream_{upstream}, threshold_{flush_threshold}, device_{device} {
  if (upstream_ == nullptr) throw logic_error{"gpumem: deferred_free_resource_adaptor needs an upstream"};
}

deferred_free_resource_adaptor::~deferred_free_resource_adaptor() {
  // Owners destroy chains only while the driver is alive (never at exit), so the
  // pending blocks can still go back; flush() refuses during a capture, and then
  // they stay with the upstream's own bookkeeping.
  flush();
}

void deferred_free_resource_adaptor::capture_ended() noexcept {
  // Never below zero: an EndCapture for a capture begun before the shim counted.
  long cur = active_captures_.load(std::memory_order_acquire);
  while (cur > 0 && !active_captures_.compare_exchange_weak(cur, cur - 1, std::memory_order_acq_rel)) {
  }
}

deferred_free_resource_adaptor::shard& deferred_free_resource_adaptor::my_shard() noexcept {
  static thread_local std::size_t const index = std::hash<std::thread::id>{}(std::this_thread::get_id());
  return shards_[index % shard_count];
}

void* deferred_free_resource_adaptor::do_allocate(std::size_t bytes, stream_ref stream) {
  try {
    return upstream_->allocate(bytes, stream);
  } catch (out_of_memory const&) {
    // The pending blocks may be exactly what is missing: make them reusable once.
    if (pending_bytes() == 0 || !flush()) throw;
  }
  return upstream_->allocate(bytes, stream);
}

void deferred_free_resource_adaptor::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (p == nullptr) return;
  if (!current_call().synchronous_free) {
    upstream_->deallocate(p, bytes, stream);
    return;
  }
  try {
    auto& s = my_shard();
    std::lock_guard lock{s.mtx};
    s.blocks.push_back(pending_block{p, bytes, stream});
  } catch (...) {
    // No host memory for the list: keep the promise the slow way (one sync) unless a
    // capture forbids it; then stream order is all we can give.
    if (!capture_active()) (void)synchronize_device();
    upstream_->deallocate(p, bytes, stream);
    return;
  }
  if (pending_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes > threshold_) flush();
}

bool deferred_free_resource_adaptor::synchronize_device() noexcept {
  auto const& d = detail::driver();
  if (d.init_result != CUDA_SUCCESS) return false;
  CUcontext current = nullptr;
  if (d.cuCtxGetCurrent(&current) != CUDA_SUCCESS) return false;
  CUcontext target = current;
  bool retained = false;
  if (device_ >= 0) {
    CUdevice dev{};
    if (d.cuDeviceGet(&dev, device_) != CUDA_SUCCESS) return false;
    if (d.cuDevicePrimaryCtxRetain(&target, dev) != CUDA_SUCCESS) return false;
    retained = true;
  }
  if (target == nullptr) return false;
  bool ok = true;
  if (target != current) ok = d.cuCtxSetCurrent(target) == CUDA_SUCCESS;
  if (ok) ok = d.cuCtxSynchronize() == CUDA_SUCCESS;
  if (target != current) ok = (d.cuCtxSetCurrent(current) == CUDA_SUCCESS) && ok;
  if (retained) {
    CUdevice dev{};
    if (d.cuDeviceGet(&dev, device_) == CUDA_SUCCESS) (void)d.cuDevicePrimaryCtxRelease(dev);
  }
  return ok;
}

bool deferred_free_resource_adaptor::flush() noexcept {
  std::lock_guard flush_lock{flush_mtx_};
  if (capture_active()) return false;  // a sync now would invalidate the capture
  std::vector<pending_block> taken;
  for (auto& s : shards_) {
    std::lock_guard lock{s.mtx};
    if (taken.empty()) {
      taken.swap(s.blocks);
    } else {
      try {
        taken.insert(taken.end(), s.blocks.begin(), s.blocks.end());
        s.blocks.clear();
      } catch (...) {
        break;  // no host memory: flush what we have, the rest waits
      }
    }
  }
  if (taken.empty()) return true;
  if (!synchronize_device()) {
    // Put them back; the next flush tries again.
    auto& s = my_shard();
    std::lock_guard lock{s.mtx};
    try {
      s.blocks.insert(s.blocks.end(), taken.begin(), taken.end());
      return false;
    } catch (...) {
      // Cannot keep them pending: stream order is the best left.
    }
  }
  std::size_t total = 0;
  for (auto const& b : taken) {
    upstream_->deallocate(b.ptr, b.bytes, b.stream);
    total += b.bytes;
  }
  pending_bytes_.fetch_sub(total, std::memory_order_relaxed);
  flushes_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::size_t deferred_free_resource_adaptor::do_release() {
  flush();
  return upstream_->release();
}

resource_info deferred_free_resource_adaptor::do_info() const {
  // Pending blocks are free from the program's point of view (it freed them).
  auto info = upstream_->info();
  auto const pending = pending_bytes();
  info.used_bytes = info.used_bytes > pending ? info.used_bytes - pending : 0;
  info.free_bytes += pending;
  return info;
}

void deferred_free_resource_adaptor::do_stream_destroyed(stream_ref stream) noexcept {
  // A pending block must never name a dead stream when it goes back upstream; it
  // only goes back after a device synchronization, so the legacy stream is exact.
  auto const key = stream_key(stream);
  for (auto& s : shards_) {
    std::lock_guard lock{s.mtx};
    for (auto& b : s.blocks) {
      if (stream_key(b.stream) == key) b.stream = stream_ref{};
    }
  }
  upstream_->stream_destroyed(stream);
}

bool deferred_free_resource_adaptor::do_is_equal(device_memory_resource const& other) const noexcept {
  auto const* o = dynamic_cast<deferred_free_resource_adaptor const*>(&other);
  return o != nullptr && upstream_->is_equal(*o->upstream_);
}

}  // namespace gpumem
