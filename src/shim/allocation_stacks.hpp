#pragma once
// Which recorded stack each live allocation came from, so that frees take their
// bytes off the right stack's live count (stack_table.hpp: add_live/remove_live)
// and the out-of-memory snapshot can name the call sites holding the memory.
// Only allocations that got a stack are kept; a free of any other pointer costs
// one probe of one shard.
//
// 64 shards, each an open-addressing table (linear probing, backward-shift
// deletion, no tombstones) under a spin lock held for a probe or two; a shard grows
// (calloc, doubling) at half load. Without host memory an allocation is simply not
// attributed.
//
// A free racing with a new allocation of the same address on another thread may
// be applied to the new one; the per-stack live counts are then off by that
// allocation (they are a diagnostic, never used for accounting).
//
// Thread safety: any thread. After fork the child starts empty (reset_after_fork).

#include <cstddef>
#include <cstdint>

namespace gpumem::shim {

/// Remembers that the allocation at `pointer` (`bytes`) came from stack `slot`,
/// and adds it to that stack's live bytes.
void attribute_allocation(std::uintptr_t pointer, std::size_t bytes, std::uint32_t slot) noexcept;
/// Takes a freed allocation off its stack's live bytes, if it had a stack.
void release_allocation(std::uintptr_t pointer) noexcept;
/// Forked child: nothing it inherited is live in it.
void reset_allocation_stacks_after_fork() noexcept;

}  // namespace gpumem::shim
