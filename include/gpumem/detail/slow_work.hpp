#pragma once
// slow_work: a per-thread count of the things gpumem does that can take long — a
// CUDA driver call (every entry of the driver() table counts itself), a wait for a
// free-list lock another thread holds, the pool's slow path under its growth lock
// (growth, reclamation, release) — so that a caller can tell, with one load before
// and one after a call, whether the call was served from gpumem's free lists alone.
//
// The allocation log reads its clock at a call's end only when this count moved
// during the call: a row of a call served from the free lists (tens of ns) takes one
// clock read, not two, and leaves DurationNs empty (shim/observe/event_log.hpp). What is
// counted covers what takes long in practice; a few rare waits are not (a stream's
// first lookup taking the free lists' table lock, the foreign batches' lock), and a
// call slowed by one of those logs no duration.
//
// Thread safety: per thread; nothing is shared.

#include <cstdint>

namespace gpumem::detail {

inline thread_local std::uint32_t tl_slow_work = 0;

/// The calling thread is about to do something that may take long.
inline void note_slow_work() noexcept { ++tl_slow_work; }

/// The calling thread's count; compare two reads (it wraps).
[[nodiscard]] inline std::uint32_t slow_work_count() noexcept { return tl_slow_work; }

}  // namespace gpumem::detail
