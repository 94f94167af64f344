#pragma once
// GPUMEM_ASSERT(cond, what): an invariant check for debug builds, compiled out
// when NDEBUG is defined (Release and RelWithDebInfo), so hot paths pay nothing.
// A failed check prints the condition, the location and `what` (through gpumem's
// diagnostics, whatever the log level), then aborts: continuing would hand out
// corrupted memory. GPUMEM_COLD marks slow paths so the compiler keeps them out of
// the hot code's way.

#include <gpumem/diagnostics.hpp>

#include <cstdlib>

#define GPUMEM_COLD __attribute__((cold, noinline))

#ifdef NDEBUG
#define GPUMEM_ASSERT(cond, what) static_cast<void>(0)
#else
#define GPUMEM_ASSERT(cond, what)                                                                                      \
  ((cond) ? static_cast<void>(0)                                                                                       \
          : (::gpumem::log_unfiltered("internal invariant broken: %s (%s) at %s:%d", what, #cond, __FILE__, __LINE__), \
             std::abort()))
#endif
