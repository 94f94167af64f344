#pragma once
// allocation_registry: every pointer the shim handed out (and every allocation CUDA
// made that the shim saw), with what is needed to free it correctly whatever entry
// point and device the free comes through, and the call stack it was made from when
// one was recorded.
//
// Layout. 256 shards, chosen by a hash of the address. Each shard holds a spin lock
// (detail::spin_mutex: one atomic exchange to take it, one store to release it;
// critical sections are a few probes), an open-addressing
// table of its entries (linear probing, backward-shift deletion, load at most 3/4,
// power-of-two capacity from 16 slots, doubled under the shard's lock when full),
// the FIFO of its recent frees, and a short journal of keys changed since the
// interior index last looked.
//
// Hot path (insert, insert_if_absent, take, lookup, restore): one shard, O(1)
// expected, one lock taken once. No heap allocation once the shard's table has
// reached its peak size (tables never shrink); growth is amortized O(1). Threads
// working on different pointers share a lock only when the pointers hash to the
// same shard (1 in 256 for a pair).
//
// Interior lookups (find_containing: cuMemGetAddressRange, cuPointerGetAttribute
// RANGE_*, cudaPointerGetAttributes, the IPC check):
// - a pointer that is the base of a live allocation is answered from its shard in
//   O(1), like take (frameworks usually ask about base pointers, per call);
// - any other pointer goes to an ordered index (base -> extent) of the live
//   entries, kept off the hot path: each change on the hot path only appends the
//   key to its shard's journal (or, once 16 distinct keys wait there, marks the
//   shard to be re-read whole) and flags the shard in a 256-bit dirty mask. An
//   interior lookup, under the index's own mutex, drains the flagged shards (each
//   under its lock for a few probes, or a copy of its live keys), updates the
//   index, takes the greatest base <= p and confirms it against its shard.
//   Cost: O(d + c log n) with d shards flagged since the previous interior lookup
//   (<= 256), c keys journaled (<= 16 per shard), n live allocations; a lookup that
//   finds re-read shards also scans the index once, O(n + m log n) for their m
//   entries. Live allocations are disjoint (CUDA never hands out overlapping
//   memory), so the greatest base <= p is the only candidate: sizes from 1 byte to
//   many GiB cost the same. (Were two live entries ever nested, p would be
//   answered for the inner one or not at all.) Interior lookups serialize on the
//   index mutex; they never hold a shard's lock for more than one shard's copy.
// - If host memory runs out while the index is updated, the index is rebuilt at
//   the next lookup and this one scans every shard (O(n), no allocation).
//
// Double frees. A freed allocation gpumem served (served_by_gpumem(kind)) stays as a tombstone so
// a second free is recognised (take() == already_freed, refused with
// CUDA_ERROR_INVALID_VALUE) instead of reaching cuMemFree, which could free the
// pool's whole slab when the block sits at its start. Tombstones are bounded: each
// shard keeps at most recent_frees_per_shard (32) of them, the oldest evicted first,
// so at most 256 * 32 = 8192 in all; a tombstone also ends when its address is
// handed out again. A free is therefore recognised as a double free while fewer than
// 32 later chain frees landed in its shard (about 8192 later frees in all, hashing
// being uniform). Past that, take() answers unknown: recognising an unknown pointer
// that lies inside memory a chain owns (and refusing it) is the caller's check
// against the chains, not the registry's. Pass-through kinds leave no tombstone:
// CUDA recognises a second free of its own memory.
//
// A failed free must not consume the entry. Two orders, by who frees the memory:
// - a chain (nothing can reuse the address before the chain's deallocate): validate
//   with lookup() (exact, consumes nothing), then take() only when the free goes
//   ahead; take() re-checks, so its answer is the one that counts (a racing second
//   free of the same pointer gets already_freed);
// - CUDA (pass-through kinds): take() before calling CUDA, restore() if CUDA fails.
//   Taking after CUDA succeeded would race with CUDA handing the address to another
//   thread, whose insert_if_absent would still find the old entry live.
//
// Call stacks. An entry may carry a stack (attach_stack; an index into the shim's
// stack table, opaque here). The registry tells its stack observer whenever an
// entry that carries one becomes live or stops being live (attached, taken,
// restored, replaced, dropped), so the live bytes per stack follow the entries
// without a second pointer table. The observer runs without a shard lock held,
// except from drop_device; it must not call back into the registry.
//
// Memory bound. Tables: 16 + 40 bytes a slot (an entry's stack sits in its key's
// padding), capacity at most 8/3 of the shard's peak entry count (live + its <= 32
// tombstones), at least 16 slots once the shard was used. Index: one std::map node
// per allocation live at the last interior lookup (none until the first one), and
// its scratch: 64 KiB of journaled changes and a copy of the largest shard's live
// keys. Fixed: 256 shards of 448 bytes.
//
// Thread safety: all members are thread-safe. for_each_live and live_totals visit
// the shards one at a time (each copied under its lock, the callback run without
// it), so they never stop the hot path for more than one shard's copy.
// Fork: reset_after_fork() in the child re-creates every lock, whoever held it at
// fork time, and leaves an empty registry.

#include <gpumem/detail/spin_mutex.hpp>

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace gpumem::shim {

struct device_chain;

enum class alloc_kind : std::uint8_t {
  sync,           ///< cudaMalloc / cuMemAlloc, from a chain
  async,          ///< cudaMallocAsync / cuMemAllocAsync / FromPoolAsync, from a chain
  pitch,          ///< cudaMallocPitch / cuMemAllocPitch, from a chain
  managed,        ///< cudaMallocManaged / cuMemAllocManaged: passed to CUDA
  managed_chain,  ///< cudaMallocManaged / cuMemAllocManaged: from the managed chain (managed_memory.hpp)
  captured,       ///< stream-ordered allocation on a capturing stream: passed to CUDA (graph memory)
  foreign_pool,   ///< cuMemAllocFromPoolAsync on a pool the program made: passed to CUDA
  passthrough     ///< any other allocation CUDA made (no context yet, device passes through)
};

[[nodiscard]] constexpr bool from_chain(alloc_kind k) noexcept {
  return k == alloc_kind::sync || k == alloc_kind::async || k == alloc_kind::pitch;
}
/// Handed out by gpumem: a device chain's block or the managed chain's. Such a
/// pointer's free is gpumem's to answer (a second one refused by its tombstone), and
/// the address range queries answer its request, not the memory around it.
[[nodiscard]] constexpr bool served_by_gpumem(alloc_kind k) noexcept {
  return from_chain(k) || k == alloc_kind::managed_chain;
}
[[nodiscard]] const char* to_string(alloc_kind k) noexcept;

/// allocation::stack when no call stack was attached.
inline constexpr std::uint32_t no_stack = ~std::uint32_t{0};

struct allocation {
  std::size_t bytes = 0;      ///< requested (pitch: pitch * height)
  CUstream stream = nullptr;  ///< allocating stream (handles as the resources see them)
  /// Owning chain; for pass-through kinds the chain whose limit the allocation is
  /// charged to (memory of a context the program created), else nullptr.
  device_chain* chain = nullptr;
  int device = -1;
  alloc_kind kind = alloc_kind::sync;
  const char* entry = nullptr;     ///< entry point that allocated (leak reports)
  std::uint32_t stack = no_stack;  ///< the call stack it came from (attach_stack)
};

/// Told that `bytes` of `stack` became live (`live`) or stopped being live.
using stack_observer = void (*)(std::uint32_t stack, std::size_t bytes, bool live) noexcept;

enum class take_result { taken, already_freed, unknown };
enum class lookup_result { live, already_freed, unknown };

class allocation_registry {
 public:
  static constexpr std::size_t shard_count = 256;
  /// Tombstones (recently freed chain pointers) each shard keeps, oldest evicted.
  static constexpr std::size_t recent_frees_per_shard = 32;
  /// Distinct keys a shard journals for the interior index before it is re-read whole.
  static constexpr std::size_t journal_capacity = 16;

  allocation_registry() = default;
  ~allocation_registry();
  allocation_registry(allocation_registry const&) = delete;
  allocation_registry& operator=(allocation_registry const&) = delete;

  /// Records a live allocation at `p` (replacing a tombstone or a live entry).
  /// Throws std::bad_alloc when the shard must grow and host memory is out.
  void insert(std::uintptr_t p, allocation const& a);
  /// The live entry at exactly `p` now carries `stack` (any previous one is
  /// dropped). Returns false, changing nothing, if `p` is not live.
  bool attach_stack(std::uintptr_t p, std::uint32_t stack) noexcept;
  /// Where the registry reports entries carrying a stack coming and going (see the
  /// file comment); nullptr: nowhere. Set it before the first attach_stack.
  void observe_stacks(stack_observer fn) noexcept { observer_.store(fn, std::memory_order_release); }
  /// Records `a` unless `p` is already live (a pass-through seen at both levels).
  /// Returns whether it was recorded now. Throws std::bad_alloc like insert.
  bool insert_if_absent(std::uintptr_t p, allocation const& a);
  /// Removes the live entry at exactly `p` into `out`, leaving a tombstone for chain
  /// kinds. already_freed: `p` is a tombstone (`out` untouched); unknown: never seen,
  /// or its tombstone was evicted.
  take_result take(std::uintptr_t p, allocation& out) noexcept;
  /// take() without consuming: what take() would answer now, `out` filled when live.
  [[nodiscard]] lookup_result lookup(std::uintptr_t p, allocation& out) const noexcept;
  /// Undoes a take() whose free then failed: `p` is live again with `a`. Returns
  /// false, changing nothing, if `p` is live (handed out again meanwhile) or the
  /// shard could not grow (possible only when the entry had left the table: a
  /// pass-through kind, or a tombstone evicted since).
  bool restore(std::uintptr_t p, allocation const& a) noexcept;
  /// The live allocation containing `p` (interior pointers included; a zero-byte
  /// allocation contains its base).
  [[nodiscard]] std::optional<std::pair<std::uintptr_t, allocation>> find_containing(std::uintptr_t p) const noexcept;
  /// Drops every entry (live and tombstone) of `device` (cudaDeviceReset).
  void drop_device(int device) noexcept;
  /// Visits every live entry, shard by shard: each shard's entries are copied under
  /// its lock, then `fn` runs without any lock held (it may call back in).
  /// Throws std::bad_alloc if the copy cannot be made, and whatever `fn` throws.
  void for_each_live(std::function<void(std::uintptr_t, allocation const&)> const& fn) const;
  /// Live entries and their bytes (each shard consistent in itself).
  [[nodiscard]] std::pair<std::size_t, std::size_t> live_totals() const noexcept;
  /// Forked child: forget everything, re-create the locks (a parent thread may have
  /// held one at fork time). Memory of a table whose lock was held is abandoned.
  void reset_after_fork() noexcept;

  /// The shard that holds `p` (placement is deterministic; tests use it).
  [[nodiscard]] static std::size_t shard_of(std::uintptr_t p) noexcept;

 private:
  friend struct registry_test_access;

  enum slot_state : std::uint8_t { empty = 0, live = 1, freed = 2 };
  struct key_slot {
    std::uintptr_t key = 0;
    slot_state state = empty;
    std::uint8_t fifo_pos = 0;       ///< freed: its place in the shard's FIFO of recent frees
    std::uint32_t stack = no_stack;  ///< the entry's allocation::stack
  };
  static_assert(sizeof(key_slot) == 16, "the stack fits in the key's padding");
  /// A slot's value: the allocation but its stack (kept in the key slot).
  struct value {
    std::size_t bytes;
    CUstream stream;
    device_chain* chain;
    int device;
    alloc_kind kind;
    const char* entry;
  };
  static_assert(sizeof(value) == 40, "the header states a slot's size");
  static_assert(recent_frees_per_shard <= 32, "the FIFO's valid bits are one 32-bit word");
  static_assert(journal_capacity <= 255, "journal_size is one byte");

  struct alignas(64) shard {
    // First cache line: everything the hot path touches besides the table.
    detail::spin_mutex lock;
    std::uint32_t mask = 0;  ///< capacity - 1 (keys != nullptr)
    std::uint32_t used = 0;  ///< live + freed slots
    std::uint32_t live_count = 0;
    std::uint64_t live_bytes = 0;
    key_slot* keys = nullptr;
    value* vals = nullptr;
    std::uint32_t fifo_valid = 0;  ///< bit i: fifo[i] is a current tombstone
    std::uint8_t shift = 0;        ///< 64 - log2(capacity): a key's home slot is (hash << 8) >> shift
    std::uint8_t fifo_head = 0;
    std::uint8_t fifo_size = 0;
    std::uint8_t journal_size = 0;
    bool journal_overflow = false;  ///< re-read the whole shard at the next interior lookup
    bool flagged = false;           ///< its bit is set in dirty_ (or being drained)
    std::array<std::uintptr_t, recent_frees_per_shard> fifo{};
    std::array<std::uintptr_t, journal_capacity> journal{};
  };

  // Table primitives; the caller holds the shard's lock.
  // The shard is the hash's top 8 bits, the home slot the bits below them.
  [[nodiscard]] static std::uint64_t hash(std::uintptr_t p) noexcept {
    return (static_cast<std::uint64_t>(p) >> 8U) * 0x9E3779B97F4A7C15ULL;
  }
  [[nodiscard]] static std::size_t home(shard const& s, std::uint64_t h) noexcept {
    return static_cast<std::size_t>((h << 8U) >> s.shift);
  }
  static constexpr std::size_t npos = ~std::size_t{0};
  [[nodiscard]] static std::size_t find(shard const& s, std::uintptr_t p, std::uint64_t h) noexcept;
  static std::size_t claim(shard& s, std::uintptr_t p, std::uint64_t h);  // a new slot for absent p
  [[nodiscard]] static bool grow(shard& s) noexcept;
  static void erase_at(shard& s, std::size_t i) noexcept;
  static void set_live(shard& s, std::size_t i, allocation const& a) noexcept;
  /// The allocation in slot i: its value and its key's stack.
  [[nodiscard]] static allocation entry_at(shard const& s, std::size_t i) noexcept {
    value const& v = s.vals[i];
    return {v.bytes, v.stream, v.chain, v.device, v.kind, v.entry, s.keys[i].stack};
  }
  static void make_tombstone(shard& s, std::size_t i) noexcept;
  static std::size_t forget_oldest_free(shard& s, std::size_t i) noexcept;  // returns i's new slot
  void note_change(shard& s, std::size_t shard_index, std::uintptr_t p) const noexcept;
  void tell_observer(std::uint32_t stack, std::size_t bytes, bool now_live) const noexcept;
  /// What an insert does where `p` is already live: insert() replaces the entry,
  /// insert_if_absent() and restore() keep it.
  enum class if_live : bool { keep_it, replace_it };
  bool insert_impl(std::uintptr_t p, allocation const& a, if_live then);
  static void free_table(shard& s) noexcept;
  static void clear_shard(shard& s) noexcept;

  // Interior index; index_mtx_ is taken before any shard lock, never after.
  void sync_index() const;
  std::optional<std::pair<std::uintptr_t, allocation>> scan_containing(std::uintptr_t p) const noexcept;
  std::optional<std::pair<std::uintptr_t, allocation>> confirm(std::uintptr_t base, std::uintptr_t p) const noexcept;

  mutable std::array<shard, shard_count> shards_{};
  std::atomic<stack_observer> observer_{nullptr};
  alignas(64) mutable std::array<std::atomic<std::uint64_t>, shard_count / 64> dirty_{};
  alignas(64) mutable std::mutex index_mtx_;
  mutable std::map<std::uintptr_t, std::size_t> index_;  ///< base -> extent, live at the last sync
  mutable bool index_valid_ = true;                      ///< false: rebuild from every shard
  struct index_change {
    std::uintptr_t key;
    std::size_t extent;  ///< 0: no longer live
  };
  mutable std::vector<index_change> changes_;                               ///< sync scratch, kept
  mutable std::vector<std::pair<std::uintptr_t, std::size_t>> shard_copy_;  ///< sync scratch, kept
};

/// The registry once made (published by make_registry_once); null before.
extern std::atomic<allocation_registry*> g_registry;
/// Makes the registry (once, whichever thread comes first) and publishes it.
[[nodiscard]] allocation_registry& make_registry_once() noexcept;

/// The process's registry (never destroyed: frees may arrive during exit). Every
/// allocation and free asks for it: once made, one load, inline.
[[nodiscard]] inline allocation_registry& registry() noexcept {
  if (allocation_registry* r = g_registry.load(std::memory_order_acquire)) [[likely]] { return *r; }
  return make_registry_once();
}

}  // namespace gpumem::shim
