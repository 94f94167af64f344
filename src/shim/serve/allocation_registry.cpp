#include "serve/allocation_registry.hpp"

#include <algorithm>
#include <bit>
#include <mutex>
#include <new>

namespace gpumem::shim {

const char* to_string(alloc_kind k) noexcept {
  switch (k) {
    case alloc_kind::sync: return "sync";
    case alloc_kind::async: return "async";
    case alloc_kind::pitch: return "pitch";
    case alloc_kind::managed:  // one word for users: whether gpumem's chain or CUDA served it
    case alloc_kind::managed_chain: return "managed";
    case alloc_kind::captured: return "captured";
    case alloc_kind::foreign_pool: return "foreign_pool";
    case alloc_kind::passthrough: return "passthrough";
  }
  return "?";
}

namespace {

// The hot path's helpers are small and called once or twice per operation: inline
// them whatever the compiler's size heuristics say.
#if defined(__GNUC__)
#define GPUMEM_HOT_INLINE [[gnu::always_inline]] inline
#else
#define GPUMEM_HOT_INLINE inline
#endif

constexpr std::size_t min_capacity = 16;
static_assert(allocation_registry::shard_count == 256, "the shard is the hash's top 8 bits");
constexpr std::uint32_t fifo_cap = allocation_registry::recent_frees_per_shard;

/// A zero-byte allocation still owns its base address.
constexpr std::size_t extent(std::size_t bytes) noexcept { return bytes == 0 ? 1 : bytes; }

}  // namespace

allocation_registry::~allocation_registry() {
  static_assert(sizeof(shard) == 448, "the header states the fixed size");
  for (auto& s : shards_) free_table(s);
}

std::size_t allocation_registry::shard_of(std::uintptr_t p) noexcept {
  return static_cast<std::size_t>(hash(p) >> 56U);
}

// ---- table primitives (shard lock held) --------------------------------------

GPUMEM_HOT_INLINE std::size_t allocation_registry::find(shard const& s, std::uintptr_t p, std::uint64_t h) noexcept {
  if (s.keys == nullptr) return npos;
  for (std::size_t i = home(s, h);; i = (i + 1) & s.mask) {
    key_slot const& k = s.keys[i];
    if (k.state == empty) return npos;
    if (k.key == p) return i;
  }
}

bool allocation_registry::grow(shard& s) noexcept {
  std::size_t const old_cap = s.keys == nullptr ? 0 : std::size_t{s.mask} + 1;
  std::size_t const cap = old_cap == 0 ? min_capacity : old_cap * 2;
  if (cap > (std::size_t{1} << 31U)) return false;
  auto* keys = new (std::nothrow) key_slot[cap]{};
  auto* vals = new (std::nothrow) value[cap];
  if (keys == nullptr || vals == nullptr) {
    delete[] keys;
    delete[] vals;
    return false;
  }
  key_slot* const old_keys = s.keys;
  value* const old_vals = s.vals;
  s.keys = keys;
  s.vals = vals;
  s.mask = static_cast<std::uint32_t>(cap - 1);
  s.shift = static_cast<std::uint8_t>(64 - std::countr_zero(cap));
  for (std::size_t j = 0; j < old_cap; ++j) {
    if (old_keys[j].state == empty) continue;
    std::size_t i = home(s, hash(old_keys[j].key));
    while (s.keys[i].state != empty) i = (i + 1) & s.mask;
    s.keys[i] = old_keys[j];  // a tombstone keeps its FIFO position
    s.vals[i] = old_vals[j];
  }
  delete[] old_keys;
  delete[] old_vals;
  return true;
}

std::size_t allocation_registry::claim(shard& s, std::uintptr_t p, std::uint64_t h) {
  std::size_t const cap = s.keys == nullptr ? 0 : std::size_t{s.mask} + 1;
  if ((std::size_t{s.used} + 1) * 4 > cap * 3 && !grow(s)) throw std::bad_alloc{};
  std::size_t i = home(s, h);
  while (s.keys[i].state != empty) i = (i + 1) & s.mask;
  s.keys[i].key = p;  // still empty: the caller's set_live makes it live
  ++s.used;
  return i;
}

GPUMEM_HOT_INLINE void allocation_registry::set_live(shard& s, std::size_t i, allocation const& a) noexcept {
  key_slot& k = s.keys[i];
  if (k.state == live) {
    --s.live_count;
    s.live_bytes -= s.vals[i].bytes;
  } else if (k.state == freed) {
    s.fifo_valid &= ~(1U << k.fifo_pos);  // the tombstone ends; its FIFO place goes stale
  }
  k.state = live;
  k.stack = a.stack;
  s.vals[i] = {a.bytes, a.stream, a.chain, a.device, a.kind, a.entry};
  ++s.live_count;
  s.live_bytes += a.bytes;
}

void allocation_registry::erase_at(shard& s, std::size_t i) noexcept {
  if (s.keys[i].state == live) {
    --s.live_count;
    s.live_bytes -= s.vals[i].bytes;
  } else {
    s.fifo_valid &= ~(1U << s.keys[i].fifo_pos);
  }
  // Backward-shift deletion: pull later members of the probe run into the hole so
  // lookups never need deletion markers.
  std::size_t j = i;
  for (;;) {
    j = (j + 1) & s.mask;
    if (s.keys[j].state == empty) break;
    std::size_t const h = home(s, hash(s.keys[j].key));
    // The entry at j may move to i unless its home lies cyclically in (i, j].
    if (((j - h) & s.mask) >= ((j - i) & s.mask)) {
      s.keys[i] = s.keys[j];
      s.vals[i] = s.vals[j];
      i = j;
    }
  }
  s.keys[i] = key_slot{};
  --s.used;
}

std::size_t allocation_registry::forget_oldest_free(shard& s, std::size_t i) noexcept {
  std::uint32_t const oldest = s.fifo_head;
  s.fifo_head = static_cast<std::uint8_t>((oldest + 1) % fifo_cap);
  --s.fifo_size;
  if ((s.fifo_valid & (1U << oldest)) == 0U) return i;  // its address was handed out again
  std::uintptr_t const p = s.keys[i].key;
  std::size_t const j = find(s, s.fifo[oldest], hash(s.fifo[oldest]));
  if (j != npos) erase_at(s, j);  // always found: a valid place names a tombstone
  return find(s, p, hash(p));     // the erase may have shifted p's slot
}

GPUMEM_HOT_INLINE void allocation_registry::make_tombstone(shard& s, std::size_t i) noexcept {
  std::uintptr_t const p = s.keys[i].key;
  if (s.fifo_size == fifo_cap) i = forget_oldest_free(s, i);
  auto const pos = static_cast<std::uint8_t>((s.fifo_head + s.fifo_size) % fifo_cap);
  s.fifo[pos] = p;
  s.fifo_valid |= 1U << pos;
  ++s.fifo_size;
  s.keys[i].state = freed;
  s.keys[i].fifo_pos = pos;
}

GPUMEM_HOT_INLINE void allocation_registry::note_change(shard& s, std::size_t shard_index,
                                                        std::uintptr_t p) const noexcept {
  if (!s.journal_overflow && (s.journal_size == 0 || s.journal[s.journal_size - 1U] != p)) {
    if (s.journal_size == journal_capacity) {
      s.journal_overflow = true;  // the next interior lookup re-reads the whole shard
    } else {
      s.journal[s.journal_size++] = p;
    }
  }
  if (!s.flagged) {
    s.flagged = true;
    dirty_[shard_index / 64].fetch_or(std::uint64_t{1} << (shard_index % 64), std::memory_order_release);
  }
}

void allocation_registry::tell_observer(std::uint32_t stack, std::size_t bytes, bool now_live) const noexcept {
  if (auto const fn = observer_.load(std::memory_order_acquire)) fn(stack, bytes, now_live);
}

void allocation_registry::free_table(shard& s) noexcept {
  delete[] s.keys;
  delete[] s.vals;
  s.keys = nullptr;
  s.vals = nullptr;
}

void allocation_registry::clear_shard(shard& s) noexcept {
  s.keys = nullptr;
  s.vals = nullptr;
  s.mask = 0;
  s.shift = 0;
  s.used = 0;
  s.live_count = 0;
  s.live_bytes = 0;
  s.fifo_valid = 0;
  s.fifo_head = 0;
  s.fifo_size = 0;
  s.journal_size = 0;
  s.journal_overflow = false;
  s.flagged = false;
}

// ---- hot path ------------------------------------------------------------------

bool allocation_registry::insert_impl(std::uintptr_t p, allocation const& a, if_live then) {
  std::uint64_t const h = hash(p);
  std::size_t const si = static_cast<std::size_t>(h >> 56U);
  shard& s = shards_[si];
  std::uint32_t replaced_stack = no_stack;
  std::size_t replaced_bytes = 0;
  {
    std::lock_guard g{s.lock};
    std::size_t i = find(s, p, h);
    if (i == npos) {
      i = claim(s, p, h);
    } else if (s.keys[i].state == live) {
      if (then == if_live::keep_it) return false;
      replaced_stack = s.keys[i].stack;
      replaced_bytes = s.vals[i].bytes;
    }
    set_live(s, i, a);
    note_change(s, si, p);
  }
  // Only a restored entry comes with a stack; a replaced one leaves with its own.
  if (replaced_stack != no_stack) tell_observer(replaced_stack, replaced_bytes, false);
  if (a.stack != no_stack) tell_observer(a.stack, a.bytes, true);
  return true;
}

void allocation_registry::insert(std::uintptr_t p, allocation const& a) {
  (void)insert_impl(p, a, if_live::replace_it);
}

bool allocation_registry::insert_if_absent(std::uintptr_t p, allocation const& a) {
  return insert_impl(p, a, if_live::keep_it);
}

bool allocation_registry::restore(std::uintptr_t p, allocation const& a) noexcept {
  try {
    return insert_impl(p, a, if_live::keep_it);
  } catch (...) { return false; }
}

take_result allocation_registry::take(std::uintptr_t p, allocation& out) noexcept {
  std::uint64_t const h = hash(p);
  std::size_t const si = static_cast<std::size_t>(h >> 56U);
  shard& s = shards_[si];
  {
    std::lock_guard g{s.lock};
    std::size_t const i = find(s, p, h);
    if (i == npos) return take_result::unknown;
    if (s.keys[i].state != live) return take_result::already_freed;
    out = entry_at(s, i);
    if (served_by_gpumem(out.kind)) {
      --s.live_count;
      s.live_bytes -= out.bytes;
      make_tombstone(s, i);
    } else {
      erase_at(s, i);  // CUDA itself recognises a second free of its own memory
    }
    note_change(s, si, p);
  }
  if (out.stack != no_stack) tell_observer(out.stack, out.bytes, false);
  return take_result::taken;
}

bool allocation_registry::attach_stack(std::uintptr_t p, std::uint32_t stack) noexcept {
  std::uint64_t const h = hash(p);
  shard& s = shards_[h >> 56U];
  std::uint32_t previous = no_stack;
  std::size_t bytes = 0;
  {
    std::lock_guard g{s.lock};
    std::size_t const i = find(s, p, h);
    if (i == npos || s.keys[i].state != live) return false;
    previous = s.keys[i].stack;
    s.keys[i].stack = stack;
    bytes = s.vals[i].bytes;
  }
  if (previous != no_stack) tell_observer(previous, bytes, false);
  if (stack != no_stack) tell_observer(stack, bytes, true);
  return true;
}

lookup_result allocation_registry::lookup(std::uintptr_t p, allocation& out) const noexcept {
  std::uint64_t const h = hash(p);
  shard& s = shards_[h >> 56U];
  std::lock_guard g{s.lock};
  std::size_t const i = find(s, p, h);
  if (i == npos) return lookup_result::unknown;
  if (s.keys[i].state != live) return lookup_result::already_freed;
  out = entry_at(s, i);
  return lookup_result::live;
}

// ---- interior lookups ------------------------------------------------------------

void allocation_registry::sync_index() const {
  constexpr std::size_t words = shard_count / 64;
  std::array<std::uint64_t, words> visit{};
  bool const rebuild = !index_valid_;
  for (std::size_t w = 0; w < words; ++w) {
    std::uint64_t const bits = dirty_[w].exchange(0, std::memory_order_acq_rel);
    visit[w] = rebuild ? ~std::uint64_t{0} : bits;
  }
  std::size_t flagged = 0;
  for (auto const w : visit) flagged += static_cast<std::size_t>(std::popcount(w));
  if (flagged == 0) return;
  // The flags just cleared are this call's to apply: until it has, a failure must
  // leave the index marked for a full rebuild.
  index_valid_ = false;

  auto& changes = changes_;
  changes.clear();
  changes.reserve(flagged * journal_capacity);  // no allocation under a shard's lock
  std::array<std::uint64_t, words> reread{};
  bool any_reread = false;
  for (std::size_t si = 0; si < shard_count; ++si) {
    if ((visit[si / 64] & (std::uint64_t{1} << (si % 64))) == 0) continue;
    shard& s = shards_[si];
    std::lock_guard g{s.lock};
    if (rebuild || s.journal_overflow) {
      reread[si / 64] |= std::uint64_t{1} << (si % 64);
      any_reread = true;
    } else {
      for (std::size_t j = 0; j < s.journal_size; ++j) {
        std::uintptr_t const k = s.journal[j];
        std::size_t const i = find(s, k, hash(k));
        bool const is_live = i != npos && s.keys[i].state == live;
        changes.push_back({k, is_live ? extent(s.vals[i].bytes) : 0});
      }
    }
    s.journal_size = 0;
    s.journal_overflow = false;
    s.flagged = false;
  }

  if (rebuild) {
    index_.clear();
  } else if (any_reread) {
    std::erase_if(index_, [&](auto const& kv) {
      std::size_t const si = shard_of(kv.first);
      return (reread[si / 64] & (std::uint64_t{1} << (si % 64))) != 0;
    });
  }
  for (auto const& c : changes) {
    if (c.extent != 0) {
      index_.insert_or_assign(c.key, c.extent);
    } else {
      index_.erase(c.key);
    }
  }
  if (any_reread) {
    // A re-read shard is copied whole; changes made after its flags were cleared
    // are journaled again, so the next lookup sees them even if this copy did too.
    auto& live_keys = shard_copy_;
    for (std::size_t si = 0; si < shard_count; ++si) {
      if ((reread[si / 64] & (std::uint64_t{1} << (si % 64))) == 0) continue;
      shard& s = shards_[si];
      live_keys.clear();
      for (;;) {
        {
          std::lock_guard g{s.lock};
          if (live_keys.capacity() >= s.live_count) {
            for (std::size_t i = 0; s.keys != nullptr && i <= s.mask; ++i) {
              if (s.keys[i].state == live) live_keys.emplace_back(s.keys[i].key, extent(s.vals[i].bytes));
            }
            break;
          }
        }
        live_keys.reserve(live_keys.capacity() * 2 + 64);
      }
      for (auto const& [k, e] : live_keys) index_.insert_or_assign(k, e);
    }
  }
  index_valid_ = true;
}

std::optional<std::pair<std::uintptr_t, allocation>> allocation_registry::confirm(std::uintptr_t base,
                                                                                  std::uintptr_t p) const noexcept {
  std::uint64_t const h = hash(base);
  shard& s = shards_[h >> 56U];
  std::lock_guard g{s.lock};
  std::size_t const i = find(s, base, h);
  if (i == npos || s.keys[i].state != live || p - base >= extent(s.vals[i].bytes)) return std::nullopt;
  return std::pair{base, entry_at(s, i)};
}

std::optional<std::pair<std::uintptr_t, allocation>> allocation_registry::scan_containing(
    std::uintptr_t p) const noexcept {
  for (auto& s : shards_) {
    std::lock_guard g{s.lock};
    for (std::size_t i = 0; s.keys != nullptr && i <= s.mask; ++i) {
      std::uintptr_t const k = s.keys[i].key;
      if (s.keys[i].state == live && p >= k && p - k < extent(s.vals[i].bytes)) return std::pair{k, entry_at(s, i)};
    }
  }
  return std::nullopt;
}

std::optional<std::pair<std::uintptr_t, allocation>> allocation_registry::find_containing(
    std::uintptr_t p) const noexcept {
  // A base pointer: its own shard answers, as for a free.
  {
    std::uint64_t const h = hash(p);
    shard& s = shards_[h >> 56U];
    std::lock_guard g{s.lock};
    std::size_t const i = find(s, p, h);
    if (i != npos && s.keys[i].state == live) return std::pair{p, entry_at(s, i)};
  }
  std::uintptr_t base = 0;
  try {
    std::lock_guard g{index_mtx_};
    sync_index();
    auto it = index_.upper_bound(p);
    if (it == index_.begin()) return std::nullopt;
    --it;
    // Live allocations are disjoint: the greatest base <= p is the only candidate.
    if (p - it->first >= it->second) return std::nullopt;
    base = it->first;
  } catch (...) {
    // No host memory for the index (it is rebuilt next time): look at every entry.
    return scan_containing(p);
  }
  // The index is as of the sync; the shard says whether the entry is still live.
  // If it was freed since, no live allocation contained p at that moment.
  return confirm(base, p);
}

// ---- whole-registry operations -------------------------------------------------------

void allocation_registry::drop_device(int device) noexcept {
  for (std::size_t si = 0; si < shard_count; ++si) {
    shard& s = shards_[si];
    std::lock_guard g{s.lock};
    bool dropped = false;
    // Backward shifts only move entries into the hole at i or later (or entries
    // already visited around the wrap), so re-examining i after an erase visits all.
    for (std::size_t i = 0; s.keys != nullptr && i <= s.mask;) {
      if (s.keys[i].state != empty && s.vals[i].device == device) {
        if (s.keys[i].state == live && s.keys[i].stack != no_stack) {
          tell_observer(s.keys[i].stack, s.vals[i].bytes, false);
        }
        erase_at(s, i);
        dropped = true;
      } else {
        ++i;
      }
    }
    if (dropped) {
      s.journal_overflow = true;
      if (!s.flagged) {
        s.flagged = true;
        dirty_[si / 64].fetch_or(std::uint64_t{1} << (si % 64), std::memory_order_release);
      }
    }
  }
}

void allocation_registry::for_each_live(std::function<void(std::uintptr_t, allocation const&)> const& fn) const {
  std::vector<std::pair<std::uintptr_t, allocation>> copy;
  for (auto& s : shards_) {
    copy.clear();
    for (;;) {
      {
        std::lock_guard g{s.lock};
        if (copy.capacity() >= s.live_count) {
          for (std::size_t i = 0; s.keys != nullptr && i <= s.mask; ++i) {
            if (s.keys[i].state == live) copy.emplace_back(s.keys[i].key, entry_at(s, i));
          }
          break;
        }
      }
      copy.reserve(copy.capacity() * 2 + 64);
    }
    for (auto const& [p, a] : copy) fn(p, a);
  }
}

std::pair<std::size_t, std::size_t> allocation_registry::live_totals() const noexcept {
  std::size_t n = 0;
  std::size_t bytes = 0;
  for (auto& s : shards_) {
    std::lock_guard g{s.lock};
    n += s.live_count;
    bytes += s.live_bytes;
  }
  return {n, bytes};
}

void allocation_registry::reset_after_fork() noexcept {
  for (auto& s : shards_) {
    // A lock held at fork time belongs to a thread that does not exist here; its
    // table may be half rebuilt, so it is abandoned rather than freed.
    bool const was_held = !s.lock.try_lock();
    new (&s.lock) detail::spin_mutex{};
    if (!was_held) free_table(s);
    clear_shard(s);
  }
  for (auto& w : dirty_) w.store(0, std::memory_order_relaxed);
  if (index_mtx_.try_lock()) {
    index_.clear();
    changes_.clear();
    shard_copy_.clear();
    index_mtx_.unlock();
  } else {
    // Held by a parent thread: the index may be mid-update; start over beside it.
    new (&index_mtx_) std::mutex{};
    new (&index_) std::map<std::uintptr_t, std::size_t>{};
    new (&changes_) std::vector<index_change>{};
    new (&shard_copy_) std::vector<std::pair<std::uintptr_t, std::size_t>>{};
  }
  index_valid_ = true;
}

constinit std::atomic<allocation_registry*> g_registry{nullptr};

allocation_registry& make_registry_once() noexcept {
  // NOLINTNEXTLINE(bugprone-unhandled-exception-at-new): running out of memory here ends the process
  static auto* const r = new allocation_registry{};
  g_registry.store(r, std::memory_order_release);
  return *r;
}

}  // namespace gpumem::shim
