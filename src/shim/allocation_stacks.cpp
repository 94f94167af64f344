#include "allocation_stacks.hpp"

#include "stack_table.hpp"

#include <sched.h>

#include <atomic>
#include <cstdlib>

namespace gpumem::shim {
namespace {

struct entry {
  std::uintptr_t pointer;  // 0: empty
  std::uint64_t bytes;
  std::uint32_t slot;
};

struct alignas(64) shard {
  std::atomic<bool> busy{false};
  entry* table = nullptr;
  std::size_t capacity = 0;  // a power of two, or 0
  std::size_t used = 0;
};

constexpr std::size_t shard_count = 64;
shard shards[shard_count];

std::size_t hash_pointer(std::uintptr_t p) noexcept {
  std::uint64_t h = p >> 8;  // device allocations are 256-byte aligned
  h *= 0x9e3779b97f4a7c15ULL;
  return static_cast<std::size_t>(h ^ (h >> 29));
}

class shard_lock {
 public:
  explicit shard_lock(shard& s) noexcept : s_{s} {
    for (int spins = 0; s_.busy.exchange(true, std::memory_order_acquire); ++spins) {
      if (spins > 64) ::sched_yield();
    }
  }
  ~shard_lock() { s_.busy.store(false, std::memory_order_release); }
  shard_lock(shard_lock const&) = delete;
  shard_lock& operator=(shard_lock const&) = delete;

 private:
  shard& s_;
};

void place(entry* table, std::size_t capacity, entry const& e) noexcept {
  std::size_t i = hash_pointer(e.pointer) & (capacity - 1);
  while (table[i].pointer != 0) i = (i + 1) & (capacity - 1);
  table[i] = e;
}

bool grow(shard& s) noexcept {
  std::size_t const capacity = s.capacity == 0 ? 256 : s.capacity * 2;
  auto* fresh = static_cast<entry*>(std::calloc(capacity, sizeof(entry)));
  if (fresh == nullptr) return false;
  for (std::size_t i = 0; i < s.capacity; ++i) {
    if (s.table[i].pointer != 0) place(fresh, capacity, s.table[i]);
  }
  std::free(s.table);
  s.table = fresh;
  s.capacity = capacity;
  return true;
}

shard& shard_of(std::uintptr_t p) noexcept { return shards[(hash_pointer(p) >> 20) % shard_count]; }

}  // namespace

void attribute_allocation(std::uintptr_t pointer, std::size_t bytes, std::uint32_t slot) noexcept {
  if (pointer == 0) return;
  shard& s = shard_of(pointer);
  {
    shard_lock lock{s};
    if ((s.used + 1) * 2 > s.capacity && !grow(s)) return;
    std::size_t i = hash_pointer(pointer) & (s.capacity - 1);
    while (s.table[i].pointer != 0 && s.table[i].pointer != pointer) i = (i + 1) & (s.capacity - 1);
    if (s.table[i].pointer == pointer) {
      // Reused before its free was seen: the old record goes.
      remove_live(s.table[i].slot, s.table[i].bytes);
    } else {
      ++s.used;
    }
    s.table[i] = entry{pointer, bytes, slot};
  }
  add_live(slot, bytes);
}

void release_allocation(std::uintptr_t pointer) noexcept {
  if (pointer == 0) return;
  shard& s = shard_of(pointer);
  entry found{};
  {
    shard_lock lock{s};
    if (s.capacity == 0) return;
    std::size_t const mask = s.capacity - 1;
    std::size_t i = hash_pointer(pointer) & mask;
    while (s.table[i].pointer != 0 && s.table[i].pointer != pointer) i = (i + 1) & mask;
    if (s.table[i].pointer == 0) return;
    found = s.table[i];
    // Backward-shift deletion: later entries of the run move up into the hole.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask; s.table[j].pointer != 0; j = (j + 1) & mask) {
      std::size_t const home = hash_pointer(s.table[j].pointer) & mask;
      // Move j into the hole unless its home lies cyclically in (hole, j].
      bool const stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
      if (!stays) {
        s.table[hole] = s.table[j];
        hole = j;
      }
    }
    s.table[hole] = entry{};
    --s.used;
  }
  remove_live(found.slot, found.bytes);
}

void reset_allocation_stacks_after_fork() noexcept {
  for (auto& s : shards) {
    s.busy.store(false, std::memory_order_relaxed);
    // The parent's memory is the child's copy: drop it without freeing (another
    // parent thread may have held the lock mid-update).
    s.table = nullptr;
    s.capacity = 0;
    s.used = 0;
  }
}

}  // namespace gpumem::shim
