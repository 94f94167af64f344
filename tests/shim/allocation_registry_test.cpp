// allocation_registry on its own: exact insert/take/lookup, double-free tombstones
// and their bound, the stacks entries carry, interior lookups of every size, device drops, concurrent use
// against per-thread oracles, growth under load, and a forked child's reset.
#include "serve/allocation_registry.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace gpumem::shim {

// Reaches the registry's locks and tables, for the fork and memory-bound tests.
struct registry_test_access {
  static void lock_shard(allocation_registry& r, std::size_t si) { r.shards_[si].lock.lock(); }
  static void unlock_shard(allocation_registry& r, std::size_t si) { r.shards_[si].lock.unlock(); }
  static std::mutex& index_mutex(allocation_registry& r) { return r.index_mtx_; }
  static std::size_t capacity(allocation_registry& r, std::size_t si) {
    std::lock_guard g{r.shards_[si].lock};
    return r.shards_[si].keys == nullptr ? 0 : std::size_t{r.shards_[si].mask} + 1;
  }
};

namespace {

using reg = allocation_registry;
constexpr std::uintptr_t KiB = 1024;
constexpr std::uintptr_t MiB = 1024 * KiB;
constexpr std::uintptr_t GiB = 1024 * MiB;

allocation chain(std::size_t bytes, int device = 0, alloc_kind kind = alloc_kind::sync) {
  allocation a;
  a.bytes = bytes;
  a.device = device;
  a.kind = kind;
  a.entry = "cudaMalloc";
  a.stream = reinterpret_cast<CUstream>(std::uintptr_t{0x2});
  return a;
}
allocation passthrough(std::size_t bytes, int device = 0) { return chain(bytes, device, alloc_kind::passthrough); }

void expect_same(allocation const& a, allocation const& b) {
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.stream, b.stream);
  EXPECT_EQ(a.chain, b.chain);
  EXPECT_EQ(a.entry, b.entry);
}

/// The n-th 256-byte-aligned address from `from` up whose entry lives in shard `si`.
std::vector<std::uintptr_t> addresses_in_shard(std::size_t si, std::size_t n, std::uintptr_t from) {
  std::vector<std::uintptr_t> out;
  for (std::uintptr_t p = from; out.size() < n; p += 256) {
    if (reg::shard_of(p) == si) out.push_back(p);
  }
  return out;
}

TEST(AllocationRegistry, InsertTakeAndDoubleTake) {
  reg r;
  std::uintptr_t const p = 0x7f0000000000;
  r.insert(p, chain(1000));
  allocation a;
  ASSERT_EQ(r.take(p, a), take_result::taken);
  expect_same(a, chain(1000));
  allocation untouched = passthrough(7);
  EXPECT_EQ(r.take(p, untouched), take_result::already_freed);
  EXPECT_EQ(untouched.bytes, 7U) << "a refused take must not write its output";
  EXPECT_EQ(r.take(p, a), take_result::already_freed) << "the tombstone stays after a refused second free";
  EXPECT_EQ(r.take(p + 256, a), take_result::unknown);

  // Pass-through memory leaves no tombstone: CUDA judges its second free.
  std::uintptr_t const q = 0x7f0000100000;
  r.insert(q, passthrough(64));
  EXPECT_EQ(r.take(q, a), take_result::taken);
  EXPECT_EQ(r.take(q, a), take_result::unknown);
  EXPECT_EQ(r.live_totals(), (std::pair<std::size_t, std::size_t>{0, 0}));
}

TEST(AllocationRegistry, LookupDoesNotConsumeAndRestoreUndoesATake) {
  reg r;
  std::uintptr_t const p = 0x7f0000000000;
  allocation a;
  EXPECT_EQ(r.lookup(p, a), lookup_result::unknown);
  r.insert(p, chain(4096, 1));
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(r.lookup(p, a), lookup_result::live);
    expect_same(a, chain(4096, 1));
  }
  EXPECT_EQ(r.live_totals(), (std::pair<std::size_t, std::size_t>{1, 4096}));

  // A free that failed after take() puts the entry back; the next free succeeds.
  ASSERT_EQ(r.take(p, a), take_result::taken);
  EXPECT_EQ(r.lookup(p, a), lookup_result::already_freed);
  EXPECT_TRUE(r.restore(p, chain(4096, 1)));
  ASSERT_EQ(r.lookup(p, a), lookup_result::live);
  EXPECT_EQ(r.live_totals(), (std::pair<std::size_t, std::size_t>{1, 4096}));
  ASSERT_EQ(r.take(p, a), take_result::taken);
  expect_same(a, chain(4096, 1));
  EXPECT_EQ(r.take(p, a), take_result::already_freed);

  // Handed out again meanwhile: restore must not overwrite the new owner.
  r.insert(p, chain(512, 2));
  EXPECT_FALSE(r.restore(p, chain(4096, 1)));
  ASSERT_EQ(r.lookup(p, a), lookup_result::live);
  expect_same(a, chain(512, 2));

  // A pass-through entry is erased by take; restore records it again.
  std::uintptr_t const q = 0x7f0000200000;
  r.insert(q, passthrough(100));
  ASSERT_EQ(r.take(q, a), take_result::taken);
  EXPECT_TRUE(r.restore(q, a));
  EXPECT_EQ(r.lookup(q, a), lookup_result::live);
}

// What the stack observer was told: live bytes and allocations per stack.
std::map<std::uint32_t, std::pair<std::int64_t, std::int64_t>> stack_tally;
void tally(std::uint32_t stack, std::size_t bytes, bool live) noexcept {
  auto& [b, n] = stack_tally[stack];
  b += live ? static_cast<std::int64_t>(bytes) : -static_cast<std::int64_t>(bytes);
  n += live ? 1 : -1;
}
std::pair<std::int64_t, std::int64_t> tallied(std::uint32_t stack) { return stack_tally[stack]; }

TEST(AllocationRegistry, AnAttachedStackCountsWhileItsEntryIsLive) {
  using counts = std::pair<std::int64_t, std::int64_t>;
  stack_tally.clear();
  reg r;
  r.observe_stacks(&tally);
  std::uintptr_t const p = 0x7f0000000000;
  std::uintptr_t const q = 0x7f0000200000;
  r.insert(p, chain(1000));
  allocation a;
  ASSERT_EQ(r.lookup(p, a), lookup_result::live);
  EXPECT_EQ(a.stack, no_stack);
  EXPECT_FALSE(r.attach_stack(q, 7)) << "no live entry at q";
  ASSERT_TRUE(r.attach_stack(p, 7));
  EXPECT_EQ(tallied(7), (counts{1000, 1}));
  ASSERT_EQ(r.lookup(p, a), lookup_result::live);
  EXPECT_EQ(a.stack, 7U);

  // A free takes it off its stack; a restore after a failed free puts it back.
  ASSERT_EQ(r.take(p, a), take_result::taken);
  EXPECT_EQ(a.stack, 7U);
  EXPECT_EQ(tallied(7), (counts{0, 0}));
  EXPECT_FALSE(r.attach_stack(p, 7)) << "a tombstone is not live";
  ASSERT_TRUE(r.restore(p, a));
  EXPECT_EQ(tallied(7), (counts{1000, 1}));

  // The address handed out again before its free was seen: the old entry leaves
  // its stack, the new one has none yet.
  r.insert(p, chain(200));
  EXPECT_EQ(tallied(7), (counts{0, 0}));
  ASSERT_EQ(r.lookup(p, a), lookup_result::live);
  EXPECT_EQ(a.stack, no_stack);

  // Attaching again moves the entry to the new stack.
  ASSERT_TRUE(r.attach_stack(p, 8));
  ASSERT_TRUE(r.attach_stack(p, 9));
  EXPECT_EQ(tallied(8), (counts{0, 0}));
  EXPECT_EQ(tallied(9), (counts{200, 1}));

  // A device reset drops its entries, pass-through ones included, and their stacks
  // let go; the tombstone a chain free leaves counts nowhere.
  r.insert(q, passthrough(64, 1));
  ASSERT_TRUE(r.attach_stack(q, 10));
  EXPECT_EQ(tallied(10), (counts{64, 1}));
  r.drop_device(1);
  EXPECT_EQ(tallied(10), (counts{0, 0}));
  ASSERT_EQ(r.take(p, a), take_result::taken);
  r.drop_device(0);
  EXPECT_EQ(tallied(9), (counts{0, 0}));
  r.observe_stacks(nullptr);
}

TEST(AllocationRegistry, InsertIfAbsentAtBothLevels) {
  reg r;
  std::uintptr_t const p = 0x7f0000000000;
  allocation a;
  // The runtime hook and the driver hook under it both report the allocation.
  EXPECT_TRUE(r.insert_if_absent(p, passthrough(300)));
  EXPECT_FALSE(r.insert_if_absent(p, passthrough(999)));
  ASSERT_EQ(r.lookup(p, a), lookup_result::live);
  EXPECT_EQ(a.bytes, 300U) << "the second report must not replace the first";
  EXPECT_EQ(r.live_totals(), (std::pair<std::size_t, std::size_t>{1, 300}));
  ASSERT_EQ(r.take(p, a), take_result::taken);
  EXPECT_TRUE(r.insert_if_absent(p, passthrough(5)));
  EXPECT_EQ(r.live_totals(), (std::pair<std::size_t, std::size_t>{1, 5}));

  // Over a tombstone it records.
  std::uintptr_t const q = 0x7f0000100000;
  r.insert(q, chain(256));
  ASSERT_EQ(r.take(q, a), take_result::taken);
  EXPECT_TRUE(r.insert_if_absent(q, passthrough(77)));
  ASSERT_EQ(r.lookup(q, a), lookup_result::live);
  EXPECT_EQ(a.bytes, 77U);

  // insert() replaces a live entry, totals follow.
  r.insert(q, chain(1000));
  ASSERT_EQ(r.lookup(q, a), lookup_result::live);
  EXPECT_EQ(a.bytes, 1000U);
  EXPECT_EQ(r.live_totals(), (std::pair<std::size_t, std::size_t>{2, 1005}));
}

TEST(AllocationRegistry, TombstoneReplacedWhenTheAddressIsReused) {
  reg r;
  std::uintptr_t const p = 0x7f0000000000;
  allocation a;
  r.insert(p, chain(2 * MiB));
  ASSERT_EQ(r.take(p, a), take_result::taken);
  // Freed: invisible to every other question.
  EXPECT_FALSE(r.find_containing(p));
  EXPECT_FALSE(r.find_containing(p + MiB));
  EXPECT_EQ(r.live_totals(), (std::pair<std::size_t, std::size_t>{0, 0}));
  std::size_t visited = 0;
  r.for_each_live([&](std::uintptr_t, allocation const&) { ++visited; });
  EXPECT_EQ(visited, 0U);

  r.insert(p, chain(4 * KiB, 3));  // the pool hands the address out again
  auto hit = r.find_containing(p + 100);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->first, p);
  EXPECT_EQ(hit->second.bytes, 4 * KiB);
  EXPECT_FALSE(r.find_containing(p + 4 * KiB));
  ASSERT_EQ(r.take(p, a), take_result::taken);
  EXPECT_EQ(a.device, 3);
  EXPECT_EQ(r.take(p, a), take_result::already_freed);
}

TEST(AllocationRegistry, TombstonesAreBoundedOldestEvictedFirst) {
  reg r;
  constexpr std::size_t bound = reg::recent_frees_per_shard;
  std::size_t const si = reg::shard_of(0x7f0000000000);
  auto const ps = addresses_in_shard(si, bound + 2, 0x7f0000000000);
  allocation a;
  for (std::size_t i = 0; i < bound; ++i) {
    r.insert(ps[i], chain(256));
    ASSERT_EQ(r.take(ps[i], a), take_result::taken);
  }
  // Exactly `bound` recent frees of this shard: all still recognised.
  for (std::size_t i = 0; i < bound; ++i) EXPECT_EQ(r.take(ps[i], a), take_result::already_freed) << i;
  // One more free in the shard evicts the oldest, and only it.
  r.insert(ps[bound], chain(256));
  ASSERT_EQ(r.take(ps[bound], a), take_result::taken);
  EXPECT_EQ(r.take(ps[0], a), take_result::unknown);
  for (std::size_t i = 1; i <= bound; ++i) EXPECT_EQ(r.take(ps[i], a), take_result::already_freed) << i;
  // A reused address leaves the FIFO: the next free evicts ps[2], not a stale place.
  r.insert(ps[1], chain(256));
  r.insert(ps[bound + 1], chain(256));
  ASSERT_EQ(r.take(ps[bound + 1], a), take_result::taken);
  EXPECT_EQ(r.take(ps[2], a), take_result::already_freed) << "ps[1]'s stale place was evicted instead";
  ASSERT_EQ(r.take(ps[1], a), take_result::taken);
  EXPECT_EQ(r.take(ps[2], a), take_result::unknown);
  EXPECT_EQ(r.take(ps[3], a), take_result::already_freed);
}

TEST(AllocationRegistry, TombstoneMemoryStaysBoundedOverManyFrees) {
  reg r;
  allocation a;
  constexpr std::size_t frees = 200000;
  for (std::size_t i = 0; i < frees; ++i) {
    std::uintptr_t const p = 0x100000000000 + i * 512;
    r.insert(p, chain(512));
    ASSERT_EQ(r.take(p, a), take_result::taken);
  }
  std::size_t recognised = 0;
  for (std::size_t i = 0; i < frees; ++i) {
    if (r.take(0x100000000000 + i * 512, a) == take_result::already_freed) ++recognised;
  }
  // Every shard saw far more than its bound of frees: each keeps exactly its bound.
  EXPECT_EQ(recognised, reg::shard_count * reg::recent_frees_per_shard);
  // The last frees are among those recognised.
  for (std::size_t i = frees - 64; i < frees; ++i) {
    EXPECT_EQ(r.take(0x100000000000 + i * 512, a), take_result::already_freed) << i;
  }
  // And the tables did not grow with the frees: 32 tombstones fit 64 slots at 3/4 load.
  for (std::size_t si = 0; si < reg::shard_count; ++si) EXPECT_LE(registry_test_access::capacity(r, si), 64U) << si;
}

TEST(AllocationRegistry, InteriorLookupsFromOneByteToHugeAllocations) {
  reg r;
  struct block {
    std::uintptr_t base;
    std::size_t bytes;
  };
  std::uintptr_t const b = 0x7f0000000000;
  std::vector<block> const blocks = {
      {b, 1},          // one byte
      {b + 256, 0},    // zero bytes: owns its base only
      {b + 512, 256},  // three adjacent 256-byte blocks
      {b + 768, 256},
      {b + 1024, 256},
      {b + 4096, 4 * KiB},
      {b + 1 * MiB, 1 * MiB},
      {b + 1 * GiB, 3 * GiB + 17},  // odd size
      {0x200000000000, 100 * GiB},  // huge
      {0x300000000000, 6 * GiB},    // huge, pass-through
  };
  for (auto const& x : blocks) { r.insert(x.base, x.base == 0x300000000000 ? passthrough(x.bytes) : chain(x.bytes)); }
  auto expect_in = [&](std::uintptr_t p, block const& x) {
    auto const hit = r.find_containing(p);
    ASSERT_TRUE(hit) << std::hex << p;
    EXPECT_EQ(hit->first, x.base) << std::hex << p;
    EXPECT_EQ(hit->second.bytes, x.bytes) << std::hex << p;
  };
  auto expect_none = [&](std::uintptr_t p) { EXPECT_FALSE(r.find_containing(p)) << std::hex << p; };
  for (auto const& x : blocks) {
    std::size_t const ext = x.bytes == 0 ? 1 : x.bytes;
    expect_in(x.base, x);
    expect_in(x.base + ext - 1, x);
    expect_in(x.base + ext / 2, x);
  }
  expect_none(b + 1);  // just past the one-byte block
  expect_none(b + 255);
  expect_none(b + 257);           // past the zero-byte block's base
  expect_in(b + 767, blocks[2]);  // adjacent blocks: the last byte of one...
  expect_in(b + 768, blocks[3]);  // ...and the first of the next
  expect_in(b + 1023, blocks[3]);
  expect_none(b + 1280);  // right after the third
  expect_none(b + 8 * KiB);
  expect_none(b + 2 * MiB);
  expect_none(b + 4 * GiB + 17);
  expect_none(b - 1);
  expect_none(0x200000000000 + 100 * GiB);
  expect_none(0x1fffffffffff);
  expect_none(0);
  expect_none(~std::uintptr_t{0});

  // Removing one changes only its own range.
  allocation a;
  ASSERT_EQ(r.take(b + 768, a), take_result::taken);
  expect_none(b + 800);
  expect_in(b + 767, blocks[2]);
  expect_in(b + 1024, blocks[4]);
  ASSERT_EQ(r.take(0x200000000000, a), take_result::taken);
  expect_none(0x200000000000 + 50 * GiB);
}

TEST(AllocationRegistry, FreedBlockInsideALiveAllocationFindsTheLiveOne) {
  reg r;
  allocation a;
  std::uintptr_t const outer = 0x7f0000000000;
  r.insert(outer + 4096, chain(256));
  ASSERT_EQ(r.take(outer + 4096, a), take_result::taken);  // a tombstone at outer+4096
  r.insert(outer, passthrough(1 * MiB));                   // CUDA reused the range
  auto const hit = r.find_containing(outer + 4096);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->first, outer);
}

TEST(AllocationRegistry, DropDeviceForgetsLiveEntriesAndTombstonesOfThatDeviceOnly) {
  reg r;
  allocation a;
  std::vector<std::uintptr_t> dev0;
  std::vector<std::uintptr_t> dev1;
  // Mostly device 0, densely: long probe runs of device-0 entries in every shard.
  for (std::uintptr_t i = 0; i < 20000; ++i) {
    std::uintptr_t const p = 0x7f0000000000 + i * 4096;
    int const dev = i % 8 == 0 ? 1 : 0;
    r.insert(p, chain(4096, dev));
    (dev == 0 ? dev0 : dev1).push_back(p);
  }
  // Some of each device freed (tombstones).
  for (std::size_t i = 0; i < 100; ++i) {
    ASSERT_EQ(r.take(dev0[i], a), take_result::taken);
    ASSERT_EQ(r.take(dev1[i], a), take_result::taken);
  }
  ASSERT_TRUE(r.find_containing(dev0[500] + 10));  // the interior index is in use
  r.drop_device(0);
  for (std::size_t i = 0; i < dev0.size(); ++i) {
    ASSERT_EQ(r.take(dev0[i], a), take_result::unknown) << i;
    ASSERT_FALSE(r.find_containing(dev0[i] + 10)) << i;
  }
  for (std::size_t i = 0; i < dev1.size(); ++i) {
    auto const want = i < 100 ? lookup_result::already_freed : lookup_result::live;
    ASSERT_EQ(r.lookup(dev1[i], a), want) << i;
    if (i >= 100) {
      auto const hit = r.find_containing(dev1[i] + 4095);
      ASSERT_TRUE(hit) << i;
      EXPECT_EQ(hit->first, dev1[i]);
    }
  }
  EXPECT_EQ(r.live_totals(), (std::pair<std::size_t, std::size_t>{dev1.size() - 100, (dev1.size() - 100) * 4096}));

  // After the reset the device hands the same range out again, in other shapes: no
  // dropped entry may shadow the new ones.
  // Pages 801..806 were device 0's; the new block starts inside 801 and covers the
  // old bases 802..806.
  std::uintptr_t const big = 0x7f0000000000 + 801 * 4096 + 1024;
  std::size_t const big_bytes = 6 * 4096 - 1024;
  r.insert(big, chain(big_bytes, 0));
  for (std::uintptr_t off = 0; off < big_bytes; off += 512) {
    auto const hit = r.find_containing(big + off);
    ASSERT_TRUE(hit) << off;
    EXPECT_EQ(hit->first, big) << off;
  }
}

TEST(AllocationRegistry, ForEachLiveVisitsEachLiveEntryOnceAndMayCallBackIn) {
  reg r;
  allocation a;
  std::map<std::uintptr_t, std::size_t> want;
  for (std::uintptr_t i = 0; i < 5000; ++i) {
    std::uintptr_t const p = 0x7f0000000000 + i * 768;
    r.insert(p, chain(i + 1));
    want[p] = i + 1;
  }
  for (std::uintptr_t i = 0; i < 5000; i += 3) {
    ASSERT_EQ(r.take(0x7f0000000000 + i * 768, a), take_result::taken);
    want.erase(0x7f0000000000 + i * 768);
  }
  std::map<std::uintptr_t, std::size_t> seen;
  r.for_each_live([&](std::uintptr_t p, allocation const& x) {
    EXPECT_TRUE(seen.emplace(p, x.bytes).second) << "visited twice: " << p;
    allocation y;
    EXPECT_EQ(r.lookup(p, y), lookup_result::live);  // no lock is held around the callback
  });
  EXPECT_EQ(seen, want);
  std::size_t bytes = 0;
  for (auto const& [p, n] : want) bytes += n;
  EXPECT_EQ(r.live_totals(), (std::pair<std::size_t, std::size_t>{want.size(), bytes}));
}

// One thread, every interleaving of changes and interior lookups the index can meet:
// a lookup after each change (journal path), after thousands (shards re-read whole),
// and in between, checked against an ordered oracle.
TEST(AllocationRegistry, InteriorIndexFollowsChangesAgainstAnOracle) {
  reg r;
  std::mt19937_64 rng{12345};
  constexpr std::size_t slots = 3000;
  constexpr std::uintptr_t span = 64 * KiB;  // slot i: [base + i*span, +span)
  std::uintptr_t const base = 0x500000000000;
  std::map<std::uintptr_t, std::size_t> oracle;  // live base -> bytes
  auto check = [&](std::uintptr_t p) {
    auto it = oracle.upper_bound(p);
    std::optional<std::pair<std::uintptr_t, std::size_t>> want;
    if (it != oracle.begin()) {
      --it;
      if (p - it->first < (it->second == 0 ? 1 : it->second)) want = *it;
    }
    auto const got = r.find_containing(p);
    ASSERT_EQ(got.has_value(), want.has_value()) << std::hex << p;
    if (got) {
      EXPECT_EQ(got->first, want->first);
      EXPECT_EQ(got->second.bytes, want->second);
    }
  };
  std::size_t const gaps[] = {1, 2, 5, 17, 40, 300, 5000};
  allocation a;
  for (int round = 0; round < 60; ++round) {
    std::size_t const between = gaps[rng() % std::size(gaps)];
    for (std::size_t k = 0; k < between; ++k) {
      std::size_t const slot = rng() % slots;
      std::uintptr_t p = base + slot * span + (rng() % 4) * 256;
      auto const live = oracle.find(base + slot * span);
      if (live != oracle.end()) p = live->first;  // the slot's current allocation
      bool const is_live = oracle.contains(p);
      if (is_live) {
        ASSERT_EQ(r.take(p, a), take_result::taken);
        oracle.erase(p);
      } else if (oracle.lower_bound(base + slot * span) == oracle.lower_bound(base + (slot + 1) * span)) {
        std::size_t const bytes = rng() % 3 == 0 ? rng() % 300 : rng() % (span - 1024);
        r.insert(p, (rng() & 1) != 0 ? chain(bytes) : passthrough(bytes));
        oracle[p] = bytes;
      }
    }
    for (int q = 0; q < 200; ++q) {
      std::size_t const slot = rng() % slots;
      check(base + slot * span + rng() % span);
    }
    for (auto const& [p, n] : oracle) {
      if (rng() % 16 == 0) {
        check(p + (n == 0 ? 0 : rng() % n));
        check(p + (n == 0 ? 1 : n));
      }
    }
  }
}

// Writers own disjoint regions and check every answer about them exactly; readers
// check allocations that never change. Interior lookups run all the while.
TEST(AllocationRegistry, ConcurrentLookupsWhileOthersInsertAndTake) {
  reg r;
  constexpr int writers = 8;
  constexpr int readers = 4;
  constexpr int ops = 12000;
  std::size_t const classes[] = {1, 256, 4 * KiB, 1 * MiB, 1 * GiB, 64 * GiB};
  struct slot {
    std::uintptr_t base;
    std::size_t capacity;
  };
  auto region = [](int t) { return std::uintptr_t{0x100000000000} + static_cast<std::uintptr_t>(t) * (1ULL << 40); };
  std::vector<std::vector<slot>> layout(writers);
  for (int t = 0; t < writers; ++t) {
    std::uintptr_t at = region(t);
    for (int j = 0; j < 48; ++j) {
      std::size_t const cap = classes[static_cast<std::size_t>(j) % std::size(classes)];
      layout[static_cast<std::size_t>(t)].push_back({at, cap});
      at += (cap + 511) / 256 * 256 + 256;  // a gap of at least 256 bytes after each
    }
  }
  // Never-changing allocations for the readers, spread over the same shards.
  std::vector<slot> stable;
  for (std::uintptr_t i = 0; i < 4000; ++i) {
    std::size_t const bytes = classes[i % std::size(classes)];
    std::uintptr_t const p = 0x700000000000 + i * (128 * GiB);
    r.insert(p, chain(bytes, 7));
    stable.push_back({p, bytes});
  }

  std::atomic<int> failures{0};
  std::atomic<bool> writers_done{false};
  auto fail = [&](char const* what, std::uintptr_t p) {
    if (failures.fetch_add(1) < 10) ADD_FAILURE() << what << " at 0x" << std::hex << p;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < writers; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng{static_cast<std::uint64_t>(t) * 7919 + 1};
      auto const& mine = layout[static_cast<std::size_t>(t)];
      std::vector<std::optional<std::size_t>> live(mine.size());  // the oracle: bytes when live
      std::vector<bool> freed(mine.size(), false);
      allocation a;
      for (int op = 0; op < ops; ++op) {
        std::size_t const j = rng() % mine.size();
        std::uintptr_t const p = mine[j].base;
        if (live[j]) {
          if (r.take(p, a) != take_result::taken || a.bytes != *live[j] || a.device != t) fail("take", p);
          live[j].reset();
          freed[j] = true;
        } else {
          if (freed[j] && rng() % 4 == 0) {
            // A second free: recognised, or forgotten once evicted; never taken.
            auto const again = r.take(p, a);
            if (again == take_result::taken) fail("double take", p);
          }
          std::size_t const bytes = rng() % 8 == 0 ? 0 : 1 + rng() % mine[j].capacity;
          r.insert(p, chain(bytes, t));
          live[j] = bytes;
        }
        // Ask about a random place of a random slot of mine: the answer is exact.
        std::size_t const k = rng() % mine.size();
        std::uintptr_t const q = mine[k].base + rng() % (mine[k].capacity + 256);
        auto const hit = r.find_containing(q);
        bool const want = live[k] && q - mine[k].base < (*live[k] == 0 ? 1 : *live[k]);
        if (hit.has_value() != want) fail(want ? "interior lookup missed" : "interior lookup found a freed block", q);
        if (hit && (hit->first != mine[k].base || hit->second.bytes != *live[k])) fail("wrong allocation", q);
        if (live[k] && r.lookup(mine[k].base, a) != lookup_result::live) fail("lookup", mine[k].base);
      }
      for (std::size_t j = 0; j < mine.size(); ++j) {
        if (live[j] && r.take(mine[j].base, a) != take_result::taken) fail("final take", mine[j].base);
      }
    });
  }
  for (int t = 0; t < readers; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng{static_cast<std::uint64_t>(t) + 1000};
      while (!writers_done.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 64; ++i) {
          auto const& s = stable[rng() % stable.size()];
          std::uintptr_t const q = s.base + rng() % s.capacity;
          auto const hit = r.find_containing(q);
          if (!hit || hit->first != s.base || hit->second.bytes != s.capacity) fail("stable lookup", q);
          if (r.find_containing(s.base + s.capacity + rng() % 256)) fail("stable gap", s.base + s.capacity);
          // Anything found in a writer's region is one of its slots and contains q.
          int const w = static_cast<int>(rng() % writers);
          std::uintptr_t const x = region(w) + rng() % (100 * GiB);
          if (auto const h = r.find_containing(x);
              h && (h->second.device != w || x - h->first >= std::max<std::size_t>(h->second.bytes, 1))) {
            fail("foreign answer", x);
          }
        }
      }
    });
  }
  for (int t = 0; t < writers; ++t) threads[static_cast<std::size_t>(t)].join();
  writers_done = true;
  for (std::size_t t = writers; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(r.live_totals().first, stable.size());
}

TEST(AllocationRegistry, GrowsUnderLoadWithoutLosingEntries) {
  reg r;
  constexpr int threads_n = 8;
  constexpr std::uintptr_t per_thread = 25000;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_n; ++t) {
    threads.emplace_back([&, t] {
      allocation a;
      std::uintptr_t const base = 0x200000000000 + static_cast<std::uintptr_t>(t) * (1ULL << 36);
      for (std::uintptr_t i = 0; i < per_thread; ++i) {
        std::uintptr_t const p = base + i * 1024;
        r.insert(p, chain(1000 + i % 24, t));
        // Churn beside the growth: every third entry freed and handed out again.
        if (i % 3 == 0) {
          if (r.take(p, a) != take_result::taken) failures.fetch_add(1);
          r.insert(p, chain(1000 + i % 24, t));
        }
        if (i % 97 == 0) {
          std::uintptr_t const back = base + (i / 2) * 1024;
          auto const hit = r.find_containing(back + 999);
          if (!hit || hit->first != back) failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  std::size_t bytes = 0;
  allocation a;
  for (int t = 0; t < threads_n; ++t) {
    std::uintptr_t const base = 0x200000000000 + static_cast<std::uintptr_t>(t) * (1ULL << 36);
    for (std::uintptr_t i = 0; i < per_thread; ++i) {
      ASSERT_EQ(r.lookup(base + i * 1024, a), lookup_result::live) << t << " " << i;
      ASSERT_EQ(a.bytes, 1000 + i % 24);
      ASSERT_EQ(a.device, t);
      bytes += a.bytes;
    }
  }
  EXPECT_EQ(r.live_totals(), (std::pair<std::size_t, std::size_t>{threads_n * per_thread, bytes}));
  for (int t = 0; t < threads_n; ++t) {
    std::uintptr_t const base = 0x200000000000 + static_cast<std::uintptr_t>(t) * (1ULL << 36);
    for (std::uintptr_t i = 0; i < per_thread; ++i) ASSERT_EQ(r.take(base + i * 1024, a), take_result::taken);
  }
  EXPECT_EQ(r.live_totals(), (std::pair<std::size_t, std::size_t>{0, 0}));
}

// The fork handler runs in a child whose other threads are gone: a shard lock and
// the index mutex held by one of them at fork time must not hang the child.
TEST(AllocationRegistry, ResetAfterForkLeavesAUsableEmptyRegistry) {
  reg r;
  std::uintptr_t const held_at = 0x7f0000000000;
  for (std::uintptr_t i = 0; i < 1000; ++i) r.insert(held_at + i * 4096, chain(4096));
  ASSERT_TRUE(r.find_containing(held_at + 10));

  std::mutex m;
  std::condition_variable cv;
  bool holding = false;
  bool release = false;
  std::thread holder{[&] {
    registry_test_access::lock_shard(r, reg::shard_of(held_at));
    registry_test_access::index_mutex(r).lock();
    {
      std::unique_lock lk{m};
      holding = true;
      cv.notify_all();
      cv.wait(lk, [&] { return release; });
    }
    registry_test_access::index_mutex(r).unlock();
    registry_test_access::unlock_shard(r, reg::shard_of(held_at));
  }};
  {
    std::unique_lock lk{m};
    cv.wait(lk, [&] { return holding; });
  }
  pid_t const pid = fork();
  if (pid == 0) {
    alarm(10);  // a hang fails the test instead of stalling it
    r.reset_after_fork();
    allocation a;
    int bad = 0;
    if (r.live_totals() != std::pair<std::size_t, std::size_t>{0, 0}) bad |= 1;
    if (r.lookup(held_at, a) != lookup_result::unknown) bad |= 2;
    r.insert(held_at, chain(100));
    r.insert(held_at + 4096, chain(8192));
    if (r.take(held_at, a) != take_result::taken || a.bytes != 100) bad |= 4;
    if (r.take(held_at, a) != take_result::already_freed) bad |= 8;
    auto const hit = r.find_containing(held_at + 4096 + 5000);  // through the index
    if (!hit || hit->first != held_at + 4096) bad |= 16;
    std::size_t n = 0;
    r.for_each_live([&](std::uintptr_t, allocation const&) { ++n; });
    if (n != 1) bad |= 32;
    _exit(bad);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  {
    std::lock_guard lk{m};
    release = true;
  }
  cv.notify_all();
  holder.join();
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed checks (bit mask)";
  // The parent's registry is untouched.
  EXPECT_EQ(r.live_totals().first, 1000U);
}

}  // namespace
}  // namespace gpumem::shim
