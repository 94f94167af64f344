#pragma once
// arena_test_resource: an upstream double for the caching resources' tests.
//
// Carves host memory from one arena, first fit in address order, so that two
// consecutive allocations are adjacent (slab boundaries can be tested) and a
// freed range is reused. Capacity = arena size: beyond it allocate throws
// out_of_memory, as a full device would. Records every call (size, pointer,
// stream) so tests can check exactly what reached the upstream. Thread-safe.
//
// contiguous(g): it then stands for vmm_memory_resource, reporting granularity g
// and that an allocation extends the live one ending where it starts.
//
// pages(true) (with contiguous(g)): it also stands for vmm_memory_resource's page
// release: decommit() makes whole g-pages of live allocations inaccessible
// (PROT_NONE, their memory dropped), so a test that touches a released page
// faults, and commit() makes them usable again. The arena's base is aligned to
// 2 MiB for it.
//
// waits_for_streams(true): a free first waits for its stream
// (cuStreamSynchronize), as vmm_memory_resource does before it unmaps, so memory
// given back is handed out again only after the work the caller ordered before
// it. Off by default: it needs a driver and real stream handles.

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/device_memory_resource.hpp>

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpumem::test {

class arena_test_resource final : public device_memory_resource {
 public:
  struct call {
    void* ptr;
    std::size_t bytes;
    std::uintptr_t stream;
  };

  explicit arena_test_resource(std::size_t capacity) : capacity_{align_up(capacity, allocation_alignment)} {
    mapped_ = capacity_ + base_alignment;
    void* m = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw std::runtime_error{"arena_test_resource: mmap failed"};
    mapping_ = static_cast<char*>(m);
    base_ = mapping_ +
            (align_up(reinterpret_cast<std::uintptr_t>(m), base_alignment) - reinterpret_cast<std::uintptr_t>(m));
    holes_.emplace(base_, capacity_);
  }
  ~arena_test_resource() override { munmap(mapping_, mapped_); }

  [[nodiscard]] std::vector<call> allocations() const {
    std::lock_guard lock{mutex_};
    return allocs_;
  }
  [[nodiscard]] std::vector<call> deallocations() const {
    std::lock_guard lock{mutex_};
    return frees_;
  }
  [[nodiscard]] std::size_t live_bytes() const {
    std::lock_guard lock{mutex_};
    return live_bytes_;
  }
  [[nodiscard]] std::size_t failed_allocations() const {
    std::lock_guard lock{mutex_};
    return failures_;
  }
  /// Frees of pointers or sizes this resource never handed out.
  [[nodiscard]] std::size_t bad_frees() const {
    std::lock_guard lock{mutex_};
    return bad_frees_;
  }
  [[nodiscard]] char* base() const noexcept { return base_; }
  /// Report contiguous growth with granularity `g` (0: none, the default).
  void contiguous(std::size_t g) noexcept { granularity_ = g; }
  /// Accept decommit() and commit() of whole pages of the granularity.
  void pages(bool on) noexcept { pages_ = on; }
  /// Bytes decommitted now, and the calls made.
  [[nodiscard]] std::size_t decommitted_bytes() const {
    std::lock_guard lock{mutex_};
    return released_.size() * granularity_;
  }
  [[nodiscard]] std::size_t decommit_calls() const {
    std::lock_guard lock{mutex_};
    return decommits_;
  }
  [[nodiscard]] std::size_t commit_calls() const {
    std::lock_guard lock{mutex_};
    return commits_;
  }
  /// Calls that broke the rules: a range not of whole live pages, a page released
  /// twice or committed while mapped.
  [[nodiscard]] std::size_t bad_page_calls() const {
    std::lock_guard lock{mutex_};
    return bad_page_calls_;
  }
  /// Wait for a free's stream before its memory can be handed out again.
  void waits_for_streams(bool on) noexcept { waits_for_streams_ = on; }
  /// Frees whose stream could not be synchronized (their memory is never reused).
  [[nodiscard]] std::size_t failed_waits() const {
    std::lock_guard lock{mutex_};
    return failed_waits_;
  }

 private:
  void* do_allocate(std::size_t bytes, stream_ref s) override {
    std::lock_guard lock{mutex_};
    if (bytes == 0) return nullptr;
    std::size_t const size = align_up(bytes, allocation_alignment);
    for (auto it = holes_.begin(); it != holes_.end(); ++it) {
      if (it->second < size) continue;
      char* p = it->first;
      std::size_t const rest = it->second - size;
      holes_.erase(it);
      if (rest != 0) holes_.emplace(p + size, rest);
      live_.emplace(p, size);
      live_bytes_ += size;
      allocs_.push_back({p, bytes, stream_handle(s)});
      return p;
    }
    ++failures_;
    throw out_of_memory{"arena_test_resource: no room for " + std::to_string(bytes) + " bytes"};
  }

  void do_deallocate(void* ptr, std::size_t bytes, stream_ref s) noexcept override {
    if (waits_for_streams_ && detail::driver().cuStreamSynchronize(to_cu(s)) != CUDA_SUCCESS) {
      std::lock_guard lock{mutex_};
      ++failed_waits_;
      return;
    }
    std::lock_guard lock{mutex_};
    auto* p = static_cast<char*>(ptr);
    auto it = live_.find(p);
    if (it == live_.end() || it->second != align_up(bytes, allocation_alignment)) {
      ++bad_frees_;
      return;
    }
    frees_.push_back({p, bytes, stream_handle(s)});
    std::size_t size = it->second;
    if (pages_) {
      for (auto r = released_.lower_bound(p); r != released_.end() && *r < p + size;) r = released_.erase(r);
      mprotect(p, size, PROT_READ | PROT_WRITE);
    }
    live_bytes_ -= size;
    live_.erase(it);
    // Coalesce with the neighbouring holes.
    auto next = holes_.lower_bound(p);
    if (next != holes_.end() && next->first == p + size) {
      size += next->second;
      next = holes_.erase(next);
    }
    if (next != holes_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == p) {
        p = prev->first;
        size += prev->second;
        holes_.erase(prev);
      }
    }
    holes_.emplace(p, size);
  }

  [[nodiscard]] std::size_t do_contiguous_granularity() const noexcept override { return granularity_; }
  [[nodiscard]] bool do_extends(void const* earlier_end, void const* next) const noexcept override {
    if (granularity_ == 0 || earlier_end != next) return false;
    std::lock_guard lock{mutex_};
    auto const it = live_.find(static_cast<char*>(const_cast<void*>(next)));
    if (it == live_.end() || it == live_.begin()) return false;
    auto const prev = std::prev(it);
    return prev->first + prev->second == it->first;
  }

  /// Whether [p, p + n) is whole pages inside consecutive live allocations, each
  /// page released or not as `released` says. Caller holds mutex_.
  [[nodiscard]] bool whole_pages(char* p, std::size_t n, bool released) const {
    if (!pages_ || granularity_ == 0 || n == 0 || (reinterpret_cast<std::uintptr_t>(p) % granularity_) != 0 ||
        (n % granularity_) != 0) {
      return false;
    }
    for (char* at = p; at < p + n; at += granularity_) {
      auto it = live_.upper_bound(at);
      if (it == live_.begin()) return false;
      --it;
      if (at >= it->first + it->second || released_.contains(at) != released) return false;
    }
    return true;
  }

  bool do_decommit(void* ptr, std::size_t n) noexcept override {
    std::lock_guard lock{mutex_};
    auto* p = static_cast<char*>(ptr);
    if (!whole_pages(p, n, false)) {
      ++bad_page_calls_;
      return false;
    }
    for (char* at = p; at < p + n; at += granularity_) released_.insert(at);
    madvise(p, n, MADV_DONTNEED);  // its contents are gone, as a device's would be
    mprotect(p, n, PROT_NONE);
    ++decommits_;
    return true;
  }

  void do_commit(void* ptr, std::size_t n) override {
    std::lock_guard lock{mutex_};
    auto* p = static_cast<char*>(ptr);
    if (!whole_pages(p, n, true)) {
      ++bad_page_calls_;
      throw logic_error{"arena_test_resource: commit of pages that are not released"};
    }
    if (commit_fails_ > 0) {
      --commit_fails_;
      throw out_of_memory{"arena_test_resource: commit refused"};
    }
    for (char* at = p; at < p + n; at += granularity_) released_.erase(at);
    mprotect(p, n, PROT_READ | PROT_WRITE);
    ++commits_;
  }

 public:
  /// The next `n` commits throw out_of_memory.
  void fail_commits(std::size_t n) {
    std::lock_guard lock{mutex_};
    commit_fails_ = n;
  }

 private:
  [[nodiscard]] resource_info do_info() const override {
    std::lock_guard lock{mutex_};
    return {.reserved_bytes = live_bytes_, .used_bytes = live_bytes_, .free_bytes = 0, .largest_free_block = 0};
  }

  static constexpr std::size_t base_alignment = std::size_t{2} << 20;
  std::size_t capacity_;
  std::size_t mapped_{};
  char* mapping_{};
  std::size_t granularity_ = 0;
  bool pages_ = false;
  std::set<char*> released_;  // page starts
  std::size_t decommits_{};
  std::size_t commits_{};
  std::size_t commit_fails_{};
  std::size_t bad_page_calls_{};
  bool waits_for_streams_ = false;
  std::size_t failed_waits_{};
  char* base_{};
  mutable std::mutex mutex_;
  std::map<char*, std::size_t> holes_;  // free ranges, address order
  std::map<char*, std::size_t> live_;   // pointer -> rounded size
  std::size_t live_bytes_{};
  std::size_t failures_{};
  std::size_t bad_frees_{};
  std::vector<call> allocs_;
  std::vector<call> frees_;
};

}  // namespace gpumem::test
