#pragma once
// GPUMEM_HOOK(ret, symbol, (params)): defines the hook exported as `symbol`.
// An asm label gives the exact exported name whatever cuda.h's macros map the
// name to (cuMemAlloc -> cuMemAlloc_v2, cuGetProcAddress -> ..._v2), and lets one
// file define both ABIs of a name. The version script exports only these.
// Hooks never let an exception out: every path below them is noexcept.

#define GPUMEM_HOOK(ret, symbol, params)                                                                       \
  extern "C" __attribute__((visibility("default"))) ret gpumem_hook_##symbol params noexcept __asm__(#symbol); \
  extern "C" ret gpumem_hook_##symbol params noexcept
