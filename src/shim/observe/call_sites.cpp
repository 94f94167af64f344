#include "observe/call_sites.hpp"

#include "observe/stack_capture.hpp"
#include "serve/allocation_registry.hpp"
#include "shim_state.hpp"

#include <pthread.h>

#include <cstddef>

namespace gpumem::shim {
namespace {

static_assert(max_stacks - 1 < no_stack, "no stack slot is the registry's no_stack");

struct stack_policy {
  bool on = false;
  std::uint32_t sample = 1;
  std::size_t min_size = 0;
};

void after_fork_in_child() noexcept { reset_live_after_fork(); }

// The registry says when an allocation carrying a stack comes and goes.
void count_live(std::uint32_t stack, std::size_t bytes, bool live) noexcept {
  if (live) {
    add_live(stack, bytes);
  } else {
    remove_live(stack, bytes);
  }
}

stack_policy const& policy() noexcept {
  static stack_policy const p = [] {
    stack_policy out;
    auto const& st = state();
    out.on = st.mode == shim_mode::active && st.settings.stacks > 0 && stack_depth() > 0;
    out.sample = st.settings.stack_sample == 0 ? 1 : st.settings.stack_sample;
    out.min_size = st.settings.stack_min_size;
    if (out.on) {
      registry().observe_stacks(&count_live);
      pthread_atfork(nullptr, nullptr, &after_fork_in_child);
    }
    return out;
  }();
  return p;
}

// Out of line: the capture buffer lives only while a stack is taken.
[[gnu::noinline]] stack_ref capture_and_intern() noexcept {
  std::uintptr_t frames[config::max_stack_frames];
  int const n = capture_stack(frames, stack_depth());
  return intern_stack(frames, n);
}

}  // namespace

bool stacks_enabled() noexcept { return policy().on; }

stack_ref record_current_stack() noexcept { return stacks_enabled() ? capture_and_intern() : stack_ref{}; }

stack_ref note_call_site(log_row const& e) noexcept {
  auto const& p = policy();
  if (!p.on) return {};
  switch (e.action) {
    case log_action::allocate: {
      if (e.result != nullptr || e.pointer == 0) return {};
      static thread_local std::uint32_t since_last = 0;
      bool take = e.size >= p.min_size;
      if (++since_last >= p.sample) {
        since_last = 0;
        take = true;
      }
      if (!take) return {};
      stack_ref const s = capture_and_intern();
      // Its bytes count on the stack while the registry holds it live.
      if (s) static_cast<void>(registry().attach_stack(reinterpret_cast<std::uintptr_t>(e.pointer), s.slot));
      return s;
    }
    case log_action::allocate_failure: return capture_and_intern();
    case log_action::free: return {};  // the registry's take() counted it off its stack
  }
  return {};
}

}  // namespace gpumem::shim
