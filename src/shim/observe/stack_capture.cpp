#include "observe/stack_capture.hpp"

#include <dlfcn.h>
#include <pthread.h>
#include <unwind.h>

#include <atomic>
#include <cstddef>

namespace gpumem::shim {
namespace {

// Upper bound on frames walked per capture (shim frames included): a corrupt
// stack cannot keep the walk going.
constexpr int max_walk = 512;

struct shim_range {
  std::uintptr_t lo = 0, hi = 0;
};

shim_range const& own_range() noexcept {
  static shim_range const r = [] {
    shim_range out;
    dl_find_object found{};
    if (_dl_find_object(reinterpret_cast<void*>(&capture_stack), &found) == 0) {
      out.lo = reinterpret_cast<std::uintptr_t>(found.dlfo_map_start);
      out.hi = reinterpret_cast<std::uintptr_t>(found.dlfo_map_end);
    }
    return out;
  }();
  return r;
}

struct walk_state {
  std::uintptr_t* out;
  int max;
  int n = 0;
  int walked = 0;
  std::uintptr_t lo = 0, hi = 0;  // the shim's code
  std::uintptr_t last_ip = 0;
  std::uintptr_t last_fp = 0;   // frame pointer register in the last frame recorded
  std::uintptr_t last_cfa = 0;  // stack address the last frame lies above
};

_Unwind_Reason_Code on_frame(_Unwind_Context* ctx, void* arg) {
  auto& w = *static_cast<walk_state*>(arg);
  auto const ip = static_cast<std::uintptr_t>(_Unwind_GetIP(ctx));
  if (ip == 0 || ++w.walked > max_walk) return _URC_END_OF_STACK;
  // The shim's own frames say nothing about the program: its hooks, and its
  // runtime hook again when the real runtime's call came back to the driver hook.
  if (ip >= w.lo && ip < w.hi) return _URC_NO_REASON;
  w.out[w.n++] = ip;
  w.last_ip = ip;
#if defined(__x86_64__)
  w.last_fp = static_cast<std::uintptr_t>(_Unwind_GetGR(ctx, 6));  // DWARF register 6: rbp
#endif
  w.last_cfa = static_cast<std::uintptr_t>(_Unwind_GetCFA(ctx));
  return w.n >= w.max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

#if defined(__x86_64__)
struct stack_bounds {
  std::uintptr_t lo = 0, hi = 0;
  bool known = false;
};

// The calling thread's stack, asked for once per thread.
stack_bounds const& thread_stack() noexcept {
  static thread_local stack_bounds b;
  if (!b.known) {
    b.known = true;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      std::size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        b.lo = reinterpret_cast<std::uintptr_t>(addr);
        b.hi = b.lo + size;
      }
      pthread_attr_destroy(&attr);
    }
  }
  return b;
}

// Continues a walk that DWARF ended at code without unwind information: each frame
// is [saved frame pointer, return address] at the frame pointer.
void walk_frame_pointers(walk_state& w) noexcept {
  auto const& stack = thread_stack();
  // Only on the thread's own stack: code running on another one (a fiber, a
  // signal stack) has bounds we do not know, and reading past them could fault.
  if (w.last_cfa < stack.lo || w.last_cfa >= stack.hi) return;
  std::uintptr_t fp = w.last_fp;
  std::uintptr_t floor = w.last_cfa;
  while (w.n < w.max && ++w.walked <= max_walk) {
    if (fp < floor || fp > stack.hi - 2 * sizeof(std::uintptr_t) || (fp & (sizeof(std::uintptr_t) - 1)) != 0) return;
    auto const* frame = reinterpret_cast<std::uintptr_t const*>(fp);
    std::uintptr_t const next = frame[0];
    std::uintptr_t const ret = frame[1];
    if (ret < 4096) return;
    w.out[w.n++] = ret;
    if (next <= fp) return;  // frames move outwards, to higher addresses
    floor = fp + 2 * sizeof(std::uintptr_t);
    fp = next;
  }
}
#endif

}  // namespace

int capture_stack(std::uintptr_t* out, int max) noexcept {
  if (out == nullptr || max <= 0) return 0;
  auto const& r = own_range();
  walk_state w{out, max};
  w.lo = r.lo;
  w.hi = r.hi;
  _Unwind_Backtrace(&on_frame, &w);
#if defined(__x86_64__)
  // Ended early at an address no loaded object holds: generated code (a JIT, a
  // perf trampoline). Frame pointers may carry on from there.
  if (w.n > 0 && w.n < w.max && w.walked < max_walk && w.last_fp != 0) {
    dl_find_object found{};
    if (_dl_find_object(reinterpret_cast<void*>(w.last_ip), &found) != 0) walk_frame_pointers(w);
  }
#endif
  return w.n;
}

}  // namespace gpumem::shim
