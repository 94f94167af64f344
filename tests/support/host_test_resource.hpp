#pragma once
// host_test_resource: a device_memory_resource double backed by host memory, for
// adaptor tests that must not depend on a device. 256-byte aligned, thread-safe,
// counts calls, and fails on demand (the "failing upstream" of the adaptor tests).

#include <gpumem/device_memory_resource.hpp>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

namespace gpumem::test {

class host_test_resource final : public device_memory_resource {
 public:
  /// Every allocate fails with `code` (CUDA_SUCCESS: none fail) ...
  void fail_with(CUresult code) noexcept { fail_code_.store(code); }
  /// ... or only those larger than `bytes`, with out_of_memory (0: no cap).
  void set_capacity(std::size_t bytes) noexcept { capacity_.store(bytes); }

  [[nodiscard]] long allocate_calls() const noexcept { return allocs_.load(); }
  [[nodiscard]] long deallocate_calls() const noexcept { return frees_.load(); }
  [[nodiscard]] long unknown_frees() const noexcept { return unknown_.load(); }
  [[nodiscard]] std::size_t live_bytes() const {
    std::lock_guard lock{mutex_};
    return live_bytes_;
  }
  [[nodiscard]] std::size_t live_count() const {
    std::lock_guard lock{mutex_};
    return live_.size();
  }
  [[nodiscard]] long release_calls() const noexcept { return releases_.load(); }
  [[nodiscard]] long stream_destroyed_calls() const noexcept { return destroyed_.load(); }

  ~host_test_resource() override {
    for (auto& [p, n] : live_) std::free(p);
  }

 private:
  void* do_allocate(std::size_t bytes, stream_ref) override {
    allocs_.fetch_add(1);
    if (bytes == 0) return nullptr;
    if (auto const c = fail_code_.load(); c != CUDA_SUCCESS) throw_on_error(c, "host_test_resource::allocate");
    auto const cap = capacity_.load();
    if (cap != 0 && bytes > cap) throw out_of_memory{"host_test_resource: " + std::to_string(bytes) + " > capacity"};
    void* p = std::aligned_alloc(allocation_alignment, align_up(bytes, allocation_alignment));
    if (p == nullptr) throw out_of_memory{"host_test_resource: host out of memory"};
    std::lock_guard lock{mutex_};
    live_.emplace(p, bytes);
    live_bytes_ += bytes;
    return p;
  }
  void do_deallocate(void* p, std::size_t, stream_ref) noexcept override {
    frees_.fetch_add(1);
    if (p == nullptr) return;
    std::lock_guard lock{mutex_};
    auto it = live_.find(p);
    if (it == live_.end()) {
      unknown_.fetch_add(1);  // never free what we did not hand out
      return;
    }
    live_bytes_ -= it->second;
    live_.erase(it);
    std::free(p);
  }
  std::size_t do_release() override {
    releases_.fetch_add(1);
    return 0;
  }
  [[nodiscard]] resource_info do_info() const override {
    std::lock_guard lock{mutex_};
    return {.reserved_bytes = live_bytes_, .used_bytes = live_bytes_, .free_bytes = 0, .largest_free_block = 0};
  }
  void do_stream_destroyed(stream_ref) noexcept override { destroyed_.fetch_add(1); }

  mutable std::mutex mutex_;
  std::unordered_map<void*, std::size_t> live_;
  std::size_t live_bytes_{};
  std::atomic<CUresult> fail_code_{CUDA_SUCCESS};
  std::atomic<std::size_t> capacity_{0};
  std::atomic<long> allocs_{0}, frees_{0}, unknown_{0}, releases_{0}, destroyed_{0};
};

}  // namespace gpumem::test
