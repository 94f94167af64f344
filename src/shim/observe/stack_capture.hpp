#pragma once
// The calling native stack of an allocation, as raw return addresses.
//
// Mechanism: _Unwind_Backtrace of the GCC unwinder the shim already links
// statically (-static-libgcc). It follows DWARF call-frame information
// (.eh_frame, present in every C and C++ library because exceptions need it), so
// it walks through code built without frame pointers — the CUDA libraries, most
// distributions' libraries, PyTorch. It finds each frame's object through glibc's
// _dl_find_object (GCC 12 and later, glibc 2.35 and later): no loader lock, no
// malloc, async-signal-safe. The alternatives lose: frame pointers alone stop at
// the first library built without them; glibc's backtrace() dlopens libgcc_s on
// first use (malloc and the loader lock inside an allocation); libunwind would be a
// second unwinder to link statically, and its default cache blocks signals or takes
// a lock on every step.
//
// Where DWARF unwinding ends at code that has no unwind information — code made at
// run time, like CPython's perf trampolines (`python -X perf`), whose addresses
// /tmp/perf-<pid>.map names after Python functions — the walk goes on by frame
// pointers on x86-64 (the trampolines keep one). Such a walk reads only inside the
// calling thread's stack: each frame pointer must lie inside it, be aligned and
// move outwards, so a stray value ends the walk instead of faulting.
//
// Frames inside the shim are left out: the first frame is the caller of the CUDA
// entry point (libcudart, or the program).
//
// Cost: a DWARF step is roughly 100-300 ns (the shim's own frames are walked too);
// a frame-pointer step a few ns. Nothing is allocated; the first frame-pointer walk
// of a thread asks for its stack bounds (pthread_getattr_np), once.
//
// Thread safety: reentrant.

#include <cstdint>

namespace gpumem::shim {

/// Writes up to `max` return addresses of the calling stack, innermost first, the
/// shim's own frames left out; returns how many.
int capture_stack(std::uintptr_t* out, int max) noexcept;

}  // namespace gpumem::shim
