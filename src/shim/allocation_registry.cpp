#include "allocation_registry.hpp"

#include <new>

namespace gpumem::shim {

const char* to_string(alloc_kind k) noexcept {
  switch (k) {
    case alloc_kind::sync: return "sync";
    case alloc_kind::async: return "async";
    case alloc_kind::pitch: return "pitch";
    case alloc_kind::managed: return "managed";
    case alloc_kind::captured: return "captured";
    case alloc_kind::foreign_pool: return "foreign_pool";
    case alloc_kind::passthrough: return "passthrough";
  }
  return "?";
}

allocation_registry::shard& allocation_registry::shard_for(std::uintptr_t p) const noexcept {
  // Blocks are >= 256-byte aligned: drop those bits, then mix so neighbours spread.
  std::uint64_t h = static_cast<std::uint64_t>(p >> 8U) * 0x9E3779B97F4A7C15ULL;
  return shards_[(h >> 58U) % shard_count];
}

void allocation_registry::insert(std::uintptr_t p, allocation const& a) {
  auto& s = shard_for(p);
  std::lock_guard lock{s.mtx};
  s.entries.insert_or_assign(p, record{a, true});
}

bool allocation_registry::insert_if_absent(std::uintptr_t p, allocation const& a) {
  auto& s = shard_for(p);
  std::lock_guard lock{s.mtx};
  auto [it, inserted] = s.entries.try_emplace(p, record{a, true});
  if (inserted) return true;
  if (it->second.live) return false;
  it->second = record{a, true};
  return true;
}

take_result allocation_registry::take(std::uintptr_t p, allocation& out) {
  auto& s = shard_for(p);
  std::lock_guard lock{s.mtx};
  auto it = s.entries.find(p);
  if (it == s.entries.end()) return take_result::unknown;
  if (!it->second.live) return take_result::already_freed;
  out = it->second.a;
  if (from_chain(out.kind)) {
    it->second.live = false;  // tombstone until the address is handed out again
  } else {
    s.entries.erase(it);  // CUDA itself recognises a second free of its own memory
  }
  return take_result::taken;
}

std::optional<std::pair<std::uintptr_t, allocation>> allocation_registry::find_containing(std::uintptr_t p) const {
  // The owning entry is the greatest start <= p in whichever shard holds it.
  for (auto const& s : shards_) {
    std::lock_guard lock{s.mtx};
    auto it = s.entries.upper_bound(p);
    if (it == s.entries.begin()) continue;
    --it;
    auto const& r = it->second;
    std::size_t const extent = r.a.bytes == 0 ? 1 : r.a.bytes;
    if (r.live && p - it->first < extent) return std::pair{it->first, r.a};
  }
  return std::nullopt;
}

void allocation_registry::drop_device(int device) {
  for (auto& s : shards_) {
    std::lock_guard lock{s.mtx};
    std::erase_if(s.entries, [device](auto const& kv) { return kv.second.a.device == device; });
  }
}

void allocation_registry::for_each_live(std::function<void(std::uintptr_t, allocation const&)> const& fn) const {
  for (auto const& s : shards_) {
    std::lock_guard lock{s.mtx};
    for (auto const& [p, r] : s.entries) {
      if (r.live) fn(p, r.a);
    }
  }
}

std::pair<std::size_t, std::size_t> allocation_registry::live_totals() const {
  std::size_t n = 0;
  std::size_t bytes = 0;
  for_each_live([&](std::uintptr_t, allocation const& a) {
    ++n;
    bytes += a.bytes;
  });
  return {n, bytes};
}

void allocation_registry::reset_after_fork() noexcept {
  for (auto& s : shards_) {
    // The parent's lock may have been held by a thread that does not exist here.
    new (&s.mtx) std::mutex{};
    s.entries.clear();
  }
}

allocation_registry& registry() noexcept {
  static auto* const r = new allocation_registry{};
  return *r;
}

}  // namespace gpumem::shim
