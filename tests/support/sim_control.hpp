#pragma once
// Test-side access to the simulated device's control API (src/simdevice/gpumemsim.h).
//
// The functions are looked up with dlsym in the libcuda.so.1 the process
// already loaded (RTLD_NOLOAD first), so the same test binary runs against a
// real GPU: there present() is false and sim-only checks GTEST_SKIP().
//
//   auto& sim = gpumem::test::sim_control::get();
//   if (!sim.present()) GTEST_SKIP() << "needs the simulated device";
//   sim.reset_violations(); ... EXPECT_EQ(sim.violations(), 0);
//
// Thread safety: the look-up happens once (thread-safe static); every call is a
// plain call into the sim, which is thread-safe.

#include <dlfcn.h>

#include <cstddef>

namespace gpumem::test {

class sim_control {
 public:
  static sim_control& get() {
    static sim_control instance;
    return instance;
  }

  [[nodiscard]] bool present() const noexcept { return present_ != nullptr && present_() == 1; }
  [[nodiscard]] long violations() const noexcept { return violations_ != nullptr ? violations_() : 0; }
  void reset_violations() const noexcept {
    if (reset_violations_ != nullptr) reset_violations_();
  }
  [[nodiscard]] std::size_t live_allocations(int device) const noexcept {
    return live_allocations_ != nullptr ? live_allocations_(device) : 0;
  }
  [[nodiscard]] std::size_t live_bytes(int device) const noexcept {
    return live_bytes_ != nullptr ? live_bytes_(device) : 0;
  }
  /// Runs every pending stream operation (as if every stream were synchronized).
  void run_all() const noexcept {
    if (run_all_ != nullptr) run_all_();
  }
  /// Calls of one exported entry point so far ("cuMemAlloc_v2"; "*": every entry
  /// point together); 0 without the sim.
  [[nodiscard]] long call_count(char const* entry) const noexcept {
    return call_count_ != nullptr ? call_count_(entry) : 0;
  }
  /// Resizes a device (only while nothing is live on it).
  void set_device_memory(int device, std::size_t bytes) const noexcept {
    if (set_device_memory_ != nullptr) set_device_memory_(device, bytes);
  }
  /// POSIX fd shareable handles: 1 supported (default), 0 not, 2 the attribute
  /// says 1 but cuMemCreate refuses the request (gpumemsim.h).
  void set_posix_fd_handles(int mode) const noexcept {
    if (set_posix_fd_handles_ != nullptr) set_posix_fd_handles_(mode);
  }

 private:
  sim_control() {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) h = dlopen("libcuda.so.1", RTLD_NOW);  // nothing loaded it yet
    if (h == nullptr) return;
    lookup(h, "gpumemsim_present", present_);
    lookup(h, "gpumemsim_violations", violations_);
    lookup(h, "gpumemsim_reset_violations", reset_violations_);
    lookup(h, "gpumemsim_live_allocations", live_allocations_);
    lookup(h, "gpumemsim_live_bytes", live_bytes_);
    lookup(h, "gpumemsim_run_all", run_all_);
    lookup(h, "gpumemsim_call_count", call_count_);
    lookup(h, "gpumemsim_set_device_memory", set_device_memory_);
    lookup(h, "gpumemsim_set_posix_fd_handles", set_posix_fd_handles_);
  }

  template <class F>
  static void lookup(void* h, char const* name, F*& out) noexcept {
    out = reinterpret_cast<F*>(dlsym(h, name));
  }

  int (*present_)() = nullptr;
  long (*violations_)() = nullptr;
  void (*reset_violations_)() = nullptr;
  std::size_t (*live_allocations_)(int) = nullptr;
  std::size_t (*live_bytes_)(int) = nullptr;
  void (*run_all_)() = nullptr;
  long (*call_count_)(char const*) = nullptr;
  void (*set_device_memory_)(int, std::size_t) = nullptr;
  void (*set_posix_fd_handles_)(int) = nullptr;
};

}  // namespace gpumem::test
