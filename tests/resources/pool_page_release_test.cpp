// pool_memory_resource's page release: over an upstream that can give the device
// memory of whole pages back (vmm_memory_resource's decommit/commit), the pool holds
// device memory where memory is live or cached, not wherever its addresses once were.
//
// Two upstreams: arena_test_resource in its paged mode (a released page is
// PROT_NONE: touching one faults, so a page released while live crashes the test),
// and the real vmm_memory_resource on the simulated device, whose device memory is
// counted by the simulator and whose queued work runs late, as a GPU's does.

#include <gpumem/call_context.hpp>
#include <gpumem/cuda_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/pool_memory_resource.hpp>
#include <gpumem/stream_tracker.hpp>
#include <gpumem/vmm_memory_resource.hpp>

#include <support/arena_test_resource.hpp>
#include <support/device_helpers.hpp>
#include <support/ordering_probe.hpp>
#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

/// cudaMalloc / cudaFree as the shim's safe mode issues them.
struct synchronous_scope : scoped_call_context {
  synchronous_scope() : scoped_call_context{"cudaMalloc", -1, true} {}
};

void* sync_alloc(device_memory_resource& r, std::size_t n) {
  synchronous_scope sc;
  return r.allocate(n);
}
void sync_free(device_memory_resource& r, void* p, std::size_t n) {
  synchronous_scope sc;
  r.deallocate(p, n);
}

char* as_char(void* p) { return static_cast<char*>(p); }

/// Writes `v` over [p, p + n) from the host and reads it back. The arena is host
/// memory: a released page there is PROT_NONE, and touching it ends the test.
bool host_fill(void* p, std::size_t n, unsigned char v) {
  std::memset(p, v, n);
  auto const* c = static_cast<unsigned char const*>(p);
  for (std::size_t i = 0; i < n; i += 4096) {
    if (c[i] != v) return false;
  }
  return c[n - 1] == v;
}

/// Whether [p, p + n) still holds `v` (sampled every 4 KiB and at its end).
bool host_check(void const* p, std::size_t n, unsigned char v) {
  auto const* c = static_cast<unsigned char const*>(p);
  for (std::size_t i = 0; i < n; i += 4096) {
    if (c[i] != v) return false;
  }
  return c[n - 1] == v;
}

class PoolPageRelease : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::sim_control::get().present() || !detail::driver_available()) {
      GTEST_SKIP() << "needs the simulated device (barriers, and work that runs late)";
    }
    ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
    device_ = detail::current_device();
    arena_.contiguous(2 * MiB);
    arena_.pages(true);
  }

  // A non-blocking stream the barriers join, for work that runs late. Callers wrap
  // both in ASSERT_NO_FATAL_FAILURE, so a failed driver call ends the test.
  void make_tracked(CUstream* s) {
    ASSERT_EQ(detail::driver().cuStreamCreate(s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    stream_tracker::of(device_).stream_created(*s, CU_STREAM_NON_BLOCKING);
  }
  void destroy_tracked(CUstream s) {
    stream_tracker::of(device_).stream_destroying(s);
    ASSERT_EQ(detail::driver().cuStreamDestroy(s), CUDA_SUCCESS);
  }

  test::arena_test_resource arena_{512 * MiB};
  int device_ = -1;
};

// A request that no free block fits is served with the device memory of free
// pages elsewhere in the pool, not with more: the footprint stays at what is live.
TEST_F(PoolPageRelease, FreePagesGoBackBeforeThePoolGrows) {
  pool_memory_resource pool{&arena_, pool_options{0, {}, 2 * MiB}};
  void* a = sync_alloc(pool, 8 * MiB);
  void* b = sync_alloc(pool, 8 * MiB);
  void* c = sync_alloc(pool, 8 * MiB);
  ASSERT_TRUE(host_fill(a, 8 * MiB, 0x11));
  sync_free(pool, a, 8 * MiB);
  sync_free(pool, c, 8 * MiB);  // two holes of 8 MiB, with b between them
  std::size_t const before = pool.pool_size();

  void* d = sync_alloc(pool, 16 * MiB);  // fits neither hole
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(host_fill(d, 16 * MiB, 0x22));
  ASSERT_TRUE(host_fill(b, 8 * MiB, 0x33));
  // b and d are live (24 MiB); the holes' pages went back for d's.
  EXPECT_LE(pool.pool_size(), before);
  EXPECT_EQ(pool.pool_size(), 24 * MiB);
  EXPECT_GT(pool.address_bytes(), pool.pool_size());
  EXPECT_EQ(arena_.live_bytes() - arena_.decommitted_bytes(), pool.pool_size());
  EXPECT_EQ(pool.info().reserved_bytes, pool.pool_size());
  EXPECT_EQ(pool.info().used_bytes, 24 * MiB);
  EXPECT_EQ(pool.info().pages_released_total, arena_.decommitted_bytes());
  EXPECT_EQ(pool.info().released_bytes, arena_.decommitted_bytes());
  EXPECT_EQ(arena_.bad_page_calls(), 0U);
  sync_free(pool, b, 8 * MiB);
  sync_free(pool, d, 16 * MiB);
}

// Released addresses are mapped again for a request they hold, before the pool asks
// its upstream for new ones.
TEST_F(PoolPageRelease, ReleasedAddressesAreMappedAgainForARequestTheyHold) {
  pool_memory_resource pool{&arena_, pool_options{0, {}, 2 * MiB}};
  void* a = sync_alloc(pool, 8 * MiB);
  void* b = sync_alloc(pool, 8 * MiB);
  void* c = sync_alloc(pool, 8 * MiB);
  sync_free(pool, a, 8 * MiB);
  sync_free(pool, c, 8 * MiB);
  void* d = sync_alloc(pool, 16 * MiB);  // a's and c's pages released for it
  ASSERT_GE(arena_.decommitted_bytes(), 16 * MiB);
  auto const upstream_calls = arena_.allocations().size();

  void* e = sync_alloc(pool, 8 * MiB);  // nothing free is backed: a's or c's addresses again
  EXPECT_TRUE(e == a || e == c);
  EXPECT_EQ(arena_.allocations().size(), upstream_calls);
  EXPECT_GE(arena_.commit_calls(), 1U);
  EXPECT_EQ(pool.info().pages_recommitted_total, 8 * MiB);
  ASSERT_TRUE(host_fill(e, 8 * MiB, 0x44));
  EXPECT_EQ(pool.pool_size(), 32 * MiB);
  for (auto [p, n] : {std::pair{b, 8 * MiB}, std::pair{d, 16 * MiB}, std::pair{e, 8 * MiB}}) sync_free(pool, p, n);
  EXPECT_EQ(arena_.bad_page_calls(), 0U);
}

// A released range joins the free block beside it: a request that neither holds is
// served by mapping only the pages the block lacks (stitching), at the block's
// address, rather than by a growth that maps the whole request.
TEST_F(PoolPageRelease, AReleasedRangeAndTheFreeBlockBesideItServeARequestTogether) {
  pool_memory_resource pool{&arena_, pool_options{32 * MiB, {}, 2 * MiB}};  // one region
  void* a = sync_alloc(pool, 8 * MiB);                                      // [0, 8 MiB)
  void* b = sync_alloc(pool, 8 * MiB);                                      // [8, 16 MiB)
  void* c = sync_alloc(pool, 16 * MiB);                                     // [16, 32 MiB)
  ASSERT_EQ(as_char(b), as_char(a) + 8 * MiB);
  sync_free(pool, b, 8 * MiB);
  EXPECT_EQ(pool.trim(4 * MiB), 4 * MiB);  // b's last 4 MiB go; its first 4 MiB stay free and backed
  EXPECT_EQ(pool.pool_size(), 28 * MiB);
  auto const upstream_calls = arena_.allocations().size();

  void* d = sync_alloc(pool, 8 * MiB);  // 4 MiB free + 4 MiB released, side by side
  EXPECT_EQ(d, b);
  EXPECT_EQ(pool.info().pages_recommitted_total, 4 * MiB);  // only what the free block lacked
  EXPECT_EQ(arena_.allocations().size(), upstream_calls);   // no growth
  EXPECT_EQ(pool.pool_size(), 32 * MiB);
  ASSERT_TRUE(host_fill(d, 8 * MiB, 0x6d));
  ASSERT_TRUE(host_fill(a, 8 * MiB, 0x6e));
  ASSERT_TRUE(host_fill(c, 16 * MiB, 0x6f));
  sync_free(pool, a, 8 * MiB);
  sync_free(pool, d, 8 * MiB);
  sync_free(pool, c, 16 * MiB);
  EXPECT_EQ(arena_.bad_page_calls(), 0U);
}

// A block's pages go; its ends that share a page with other memory stay, and the
// block stays usable for requests that fit those ends.
TEST_F(PoolPageRelease, OnlyWholePagesInsideAFreeBlockGoBack) {
  pool_memory_resource pool{&arena_, pool_options{16 * MiB, {}, 2 * MiB}};  // one region
  void* head = sync_alloc(pool, MiB);                                       // [0, 1 MiB)
  void* hole = sync_alloc(pool, 6 * MiB);                                   // [1, 7 MiB): pages [2, 6 MiB) whole
  void* tail = sync_alloc(pool, MiB);                                       // [7, 8 MiB); [8, 16 MiB) free
  ASSERT_EQ(as_char(hole), as_char(head) + MiB);
  ASSERT_EQ(as_char(tail), as_char(head) + 7 * MiB);
  sync_free(pool, hole, 6 * MiB);
  EXPECT_EQ(pool.trim(0), 12 * MiB);  // the hole's 4 MiB of whole pages and the free 8 MiB
  EXPECT_EQ(arena_.decommitted_bytes(), 12 * MiB);
  EXPECT_EQ(pool.pool_size(), 4 * MiB);
  EXPECT_EQ(pool.address_bytes(), 16 * MiB);
  ASSERT_TRUE(host_fill(head, MiB, 1));
  ASSERT_TRUE(host_fill(tail, MiB, 2));
  // The two 1 MiB ends of the hole are still free and backed.
  EXPECT_EQ(pool.info().free_bytes, 2 * MiB);
  void* x = sync_alloc(pool, MiB);
  void* y = sync_alloc(pool, MiB);
  EXPECT_TRUE((x == hole && y == as_char(hole) + 5 * MiB) || (y == hole && x == as_char(hole) + 5 * MiB));
  ASSERT_TRUE(host_fill(x, MiB, 3));
  ASSERT_TRUE(host_fill(y, MiB, 4));
  EXPECT_EQ(pool.pool_size(), 4 * MiB);  // no page was mapped again for them
  for (void* p : {head, tail, x, y}) sync_free(pool, p, MiB);
  EXPECT_EQ(arena_.bad_page_calls(), 0U);
}

// trim(keep) keeps at most `keep` free bytes backed; trim(0) gives the pool's memory
// back whole, released pages included.
TEST_F(PoolPageRelease, TrimKeepsWhatItIsToldAndNoMore) {
  pool_memory_resource pool{&arena_, pool_options{0, {}, 2 * MiB}};
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(sync_alloc(pool, 4 * MiB));
  void* keep_live = sync_alloc(pool, 4 * MiB);
  for (void* p : blocks) sync_free(pool, p, 4 * MiB);
  ASSERT_EQ(pool.pool_size(), 68 * MiB);

  pool.trim(16 * MiB);
  EXPECT_LE(pool.pool_size(), 4 * MiB + 16 * MiB);
  EXPECT_GE(pool.pool_size(), 4 * MiB + 16 * MiB - 2 * MiB);
  EXPECT_EQ(pool.pending_bytes(), 0U);  // reclaimed first
  EXPECT_EQ(pool.info().used_bytes, 4 * MiB);
  ASSERT_TRUE(host_fill(keep_live, 4 * MiB, 5));

  sync_free(pool, keep_live, 4 * MiB);
  pool.trim(0);
  EXPECT_EQ(pool.pool_size(), 0U);
  EXPECT_EQ(pool.address_bytes(), 0U);  // whole regions went back upstream
  EXPECT_EQ(arena_.live_bytes(), 0U);
  EXPECT_EQ(arena_.bad_frees(), 0U);
  EXPECT_EQ(arena_.bad_page_calls(), 0U);
}

// The maximum bounds the device memory the pool holds, not its addresses: a pool
// whose free memory is scattered still serves a request its free memory could hold.
TEST_F(PoolPageRelease, TheMaximumBoundsDeviceMemoryNotAddresses) {
  pool_memory_resource pool{&arena_, pool_options{0, 32 * MiB, 2 * MiB}};
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(sync_alloc(pool, 8 * MiB));
  ASSERT_EQ(pool.pool_size(), 32 * MiB);
  sync_free(pool, blocks[0], 8 * MiB);
  sync_free(pool, blocks[2], 8 * MiB);  // 16 MiB free, in two 8 MiB holes

  void* big = sync_alloc(pool, 16 * MiB);
  ASSERT_NE(big, nullptr);
  ASSERT_TRUE(host_fill(big, 16 * MiB, 6));
  EXPECT_LE(pool.pool_size(), 32 * MiB);
  EXPECT_THROW(static_cast<void>(sync_alloc(pool, 2 * MiB)), out_of_memory);  // all 32 MiB live
  ASSERT_TRUE(host_fill(blocks[1], 8 * MiB, 7));
  ASSERT_TRUE(host_fill(blocks[3], 8 * MiB, 8));
  sync_free(pool, big, 16 * MiB);
  sync_free(pool, blocks[1], 8 * MiB);
  sync_free(pool, blocks[3], 8 * MiB);
  EXPECT_EQ(arena_.bad_page_calls(), 0U);
}

// A commit the device refuses leaves the range released; the request then grows the
// pool or fails cleanly, never hands out a released page.
TEST_F(PoolPageRelease, ARefusedCommitNeverHandsOutAReleasedPage) {
  pool_memory_resource pool{&arena_, pool_options{0, {}, 2 * MiB}};
  void* a = sync_alloc(pool, 8 * MiB);
  void* b = sync_alloc(pool, 8 * MiB);
  void* c = sync_alloc(pool, 8 * MiB);
  sync_free(pool, a, 8 * MiB);
  sync_free(pool, c, 8 * MiB);
  void* d = sync_alloc(pool, 16 * MiB);
  arena_.fail_commits(1);
  void* e = sync_alloc(pool, 8 * MiB);  // the released range refused: served by a growth instead
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e, a);
  EXPECT_NE(e, c);
  ASSERT_TRUE(host_fill(e, 8 * MiB, 9));
  void* f = sync_alloc(pool, 8 * MiB);  // a's range again, committed this time
  ASSERT_TRUE(host_fill(f, 8 * MiB, 10));
  for (auto [p, n] : {std::pair{b, 8 * MiB}, std::pair{d, 16 * MiB}, std::pair{e, 8 * MiB}, std::pair{f, 8 * MiB}}) {
    sync_free(pool, p, n);
  }
  EXPECT_EQ(arena_.bad_page_calls(), 0U);
}

// Stream-ordered frees on many streams: each stream's list holds memory the others
// cannot use without an event, and none of it alone fits a larger request. A miss
// reclaims the lists (one barrier), so the memory coalesces and serves it, or its
// pages go, rather than the pool growing by the request each time.
TEST_F(PoolPageRelease, OtherStreamsListsAreReclaimedBeforeThePoolGrows) {
  std::vector<CUstream> streams(4);
  for (auto& st : streams) ASSERT_NO_FATAL_FAILURE(make_tracked(&st));
  {
    pool_memory_resource pool{&arena_, pool_options{0, {}, 2 * MiB, device_}};
    std::vector<void*> blocks;
    for (auto st : streams) blocks.push_back(pool.allocate(24 * MiB, stream_ref{st}));
    for (std::size_t i = 0; i < streams.size(); ++i) pool.deallocate(blocks[i], 24 * MiB, stream_ref{streams[i]});
    std::size_t const before = pool.pool_size();
    // Each stream in turn asks for more than any one list holds, and more each time:
    // the four 24 MiB blocks lie side by side and, reclaimed, hold every request.
    std::size_t n = 40 * MiB;
    for (auto st : streams) {
      void* p = pool.allocate(n, stream_ref{st});
      ASSERT_TRUE(host_fill(p, n, 0x5c));
      pool.deallocate(p, n, stream_ref{st});
      n += 16 * MiB;
    }
    EXPECT_EQ(pool.pool_size(), before);  // not 40 + 56 + 72 + 88 MiB more
    EXPECT_EQ(arena_.bad_page_calls(), 0U);
  }
  for (auto st : streams) {
    ASSERT_EQ(detail::driver().cuStreamSynchronize(st), CUDA_SUCCESS);
    ASSERT_NO_FATAL_FAILURE(destroy_tracked(st));
  }
}

// Work queued before a free may still run when the pool wants the block's pages:
// they go only once that work has run. On the simulated device queued work runs
// late, and a page released before it would fault in the kernel's stand-in.
TEST_F(PoolPageRelease, QueuedWorkFinishesBeforeItsPagesGoBack) {
  vmm_memory_resource vmm;
  if (vmm.contiguous_granularity() == 0) GTEST_SKIP() << "no virtual memory management";
  auto& sim = test::sim_control::get();
  test::ordering_probe probe{detail::driver().cuLaunchHostFunc};
  CUstream s = nullptr;
  ASSERT_NO_FATAL_FAILURE(make_tracked(&s));
  {
    pool_memory_resource pool{&vmm, pool_options{0, {}, 2 * MiB, device_}};
    std::size_t const device_before = sim.live_bytes(device_);
    void* a = sync_alloc(pool, 8 * MiB);
    void* b = sync_alloc(pool, 8 * MiB);
    void* c = sync_alloc(pool, 8 * MiB);
    ASSERT_EQ(probe.touch(s, a, 8 * MiB, probe.next_generation()), CUDA_SUCCESS);  // still queued
    sync_free(pool, a, 8 * MiB);
    sync_free(pool, c, 8 * MiB);
    void* d = sync_alloc(pool, 16 * MiB);  // a's and c's pages go back for it: after the probe ran
    EXPECT_EQ(probe.ran(), 1);
    ASSERT_EQ(probe.touch(s, d, 16 * MiB, probe.next_generation()), CUDA_SUCCESS);
    ASSERT_EQ(detail::driver().cuStreamSynchronize(s), CUDA_SUCCESS);
    EXPECT_EQ(probe.violations(), 0);
    EXPECT_EQ(pool.pool_size(), 24 * MiB);
    EXPECT_EQ(sim.live_bytes(device_) - device_before, 24 * MiB);  // what the device gave
    sync_free(pool, b, 8 * MiB);
    sync_free(pool, d, 16 * MiB);
    pool.trim(0);
    EXPECT_EQ(sim.live_bytes(device_), device_before);
  }
  ASSERT_NO_FATAL_FAILURE(destroy_tracked(s));
  EXPECT_EQ(sim.violations(), 0);
}

// The pages a miss gives back are the ones it maps for the request: the memory
// moves without being freed and created anew, and none stays behind the miss.
TEST_F(PoolPageRelease, AMissMapsThePagesItGivesBackAgain) {
  vmm_memory_resource vmm;
  if (vmm.contiguous_granularity() == 0) GTEST_SKIP() << "no virtual memory management";
  auto& sim = test::sim_control::get();
  pool_memory_resource pool{&vmm, pool_options{0, {}, 2 * MiB, device_}};
  std::size_t const device_before = sim.live_bytes(device_);
  void* a = sync_alloc(pool, 8 * MiB);
  void* b = sync_alloc(pool, 8 * MiB);
  void* c = sync_alloc(pool, 8 * MiB);
  ASSERT_TRUE(test::fill_and_check(b, 8 * MiB, 0x4a));
  sync_free(pool, a, 8 * MiB);
  sync_free(pool, c, 8 * MiB);
  auto const creates = sim.call_count("cuMemCreate");
  void* d = sync_alloc(pool, 16 * MiB);  // a's and c's pages, mapped for d
  EXPECT_EQ(sim.call_count("cuMemCreate"), creates);
  EXPECT_EQ(pool.info().pages_released_total, 16 * MiB);
  EXPECT_TRUE(test::fill_and_check(d, 16 * MiB, 0x5b));
  EXPECT_TRUE(test::check(b, 8 * MiB, 0x4a));
  EXPECT_EQ(sim.live_bytes(device_) - device_before, 24 * MiB);
  EXPECT_EQ(pool.pool_size(), 24 * MiB);
  sync_free(pool, b, 8 * MiB);
  sync_free(pool, d, 16 * MiB);
  pool.trim(0);
  EXPECT_EQ(sim.live_bytes(device_), device_before);
  EXPECT_EQ(sim.violations(), 0);
}

// A miss while the GPU is behind does not wait for it: it maps new memory and the
// free pages stay, as long as what misses so hold stays within 1/32 of the pool.
// Past that, a miss waits for the queued work and gives pages back. (On the
// simulated device a mapping runs queued work, as cuMemSetAccess is synchronous:
// the host's waits are counted as the pool's cuEventSynchronize calls.)
TEST_F(PoolPageRelease, AMissWhileTheGpuIsBehindMapsNewMemoryWithinABound) {
  vmm_memory_resource vmm;
  if (vmm.contiguous_granularity() == 0) GTEST_SKIP() << "no virtual memory management";
  auto& sim = test::sim_control::get();
  test::ordering_probe probe{detail::driver().cuLaunchHostFunc};
  CUstream s = nullptr;
  ASSERT_NO_FATAL_FAILURE(make_tracked(&s));
  {
    pool_memory_resource pool{&vmm, pool_options{0, {}, 2 * MiB, device_}};
    std::size_t const device_before = sim.live_bytes(device_);
    void* big = sync_alloc(pool, 192 * MiB);  // 1/32 of the pool: about 6 MiB
    void* a = sync_alloc(pool, 2 * MiB);
    void* b = sync_alloc(pool, 2 * MiB);
    void* c = sync_alloc(pool, 2 * MiB);
    std::size_t const rest = pool.info().free_bytes;  // the growth's tail, after c
    void* x = rest != 0 ? sync_alloc(pool, rest) : nullptr;
    ASSERT_EQ(probe.touch(s, a, 2 * MiB, probe.next_generation()), CUDA_SUCCESS);  // still queued
    sync_free(pool, a, 2 * MiB);
    sync_free(pool, c, 2 * MiB);
    std::size_t const before = pool.pool_size();
    long const waits = sim.call_count("cuEventSynchronize");
    void* d = sync_alloc(pool, 4 * MiB);                     // fits neither hole; their pages would go after the probe
    EXPECT_EQ(sim.call_count("cuEventSynchronize"), waits);  // the host did not wait for it
    EXPECT_GE(pool.pool_size(), before + 4 * MiB);
    EXPECT_EQ(pool.info().pages_released_total, 0U);

    // 4 MiB held so; a second such miss (6 MiB, with d freed while work on it is
    // queued) would pass the bound: it waits, and gives pages back.
    ASSERT_EQ(probe.touch(s, d, 4 * MiB, probe.next_generation()), CUDA_SUCCESS);
    sync_free(pool, d, 4 * MiB);
    void* e = sync_alloc(pool, 6 * MiB);
    EXPECT_GT(sim.call_count("cuEventSynchronize"), waits);
    EXPECT_GT(pool.info().pages_released_total, 0U);
    ASSERT_EQ(probe.touch(s, e, 6 * MiB, probe.next_generation()), CUDA_SUCCESS);
    ASSERT_EQ(detail::driver().cuStreamSynchronize(s), CUDA_SUCCESS);
    EXPECT_EQ(probe.violations(), 0);
    EXPECT_EQ(sim.live_bytes(device_) - device_before, pool.pool_size());
    for (auto [p, n] : {std::pair{big, 192 * MiB}, {b, 2 * MiB}, {e, 6 * MiB}, {x, rest}}) {
      if (p != nullptr) sync_free(pool, p, n);
    }
    pool.trim(0);
    EXPECT_EQ(sim.live_bytes(device_), device_before);
  }
  ASSERT_NO_FATAL_FAILURE(destroy_tracked(s));
  EXPECT_EQ(sim.violations(), 0);
}

// Memory that waits for a barrier is reclaimed before a miss maps pages, even when
// it alone cannot hold the request: made clean, it joins what lies beside it.
// Without that, the request was mapped whole, with the memory of free pages moved
// from elsewhere, while its neighbour waited for a barrier.
TEST_F(PoolPageRelease, AMissReclaimsWaitingMemoryBeforeItMapsPages) {
  CUstream s = nullptr;
  ASSERT_NO_FATAL_FAILURE(make_tracked(&s));  // barriers join it: each costs more, so they are rarer
  {
    pool_memory_resource pool{&arena_, pool_options{0, {}, 2 * MiB, device_}};
    void* a = sync_alloc(pool, 6 * MiB);
    void* b = sync_alloc(pool, 6 * MiB);
    void* c = sync_alloc(pool, 16 * MiB);
    ASSERT_EQ(as_char(c), as_char(b) + 6 * MiB);
    std::size_t const tail = pool.info().free_bytes;  // the growth's rest: kept apart from c
    void* t = tail != 0 ? sync_alloc(pool, tail) : nullptr;
    ASSERT_TRUE(host_fill(a, 6 * MiB, 0x6d));
    sync_free(pool, c, 16 * MiB);  // enough for the free to make a barrier: clean
    sync_free(pool, b, 6 * MiB);   // too little: it waits
    ASSERT_EQ(pool.info().pending_bytes, 6 * MiB);
    std::size_t const before = pool.pool_size();
    auto const barriers = stream_tracker::of(device_).barrier_count();

    void* d = sync_alloc(pool, 20 * MiB);  // more than b or c holds, less than both together
    EXPECT_EQ(d, b);
    EXPECT_GT(stream_tracker::of(device_).barrier_count(), barriers);
    ASSERT_TRUE(host_fill(d, 20 * MiB, 0x6e));
    EXPECT_TRUE(host_check(a, 6 * MiB, 0x6d));
    EXPECT_EQ(pool.pool_size(), before);  // no page mapped for it, none moved
    EXPECT_EQ(pool.info().pages_released_total, 0U);
    EXPECT_EQ(arena_.bad_page_calls(), 0U);
    sync_free(pool, a, 6 * MiB);
    sync_free(pool, d, 20 * MiB);
    if (t != nullptr) sync_free(pool, t, tail);
  }
  ASSERT_NO_FATAL_FAILURE(destroy_tracked(s));
}

// Many threads, both families, frees while work is queued, sizes that keep the pool
// releasing and committing pages: every block handed out is usable (a released page
// would fault) and keeps its contents while live.
TEST_F(PoolPageRelease, ManyThreadsNeverSeeAReleasedPage) {
  vmm_memory_resource vmm;
  if (vmm.contiguous_granularity() == 0) GTEST_SKIP() << "no virtual memory management";
  pool_memory_resource pool{&vmm, pool_options{0, 96 * MiB, 2 * MiB, device_}};
  auto& sim = test::sim_control::get();
  long const unmaps = sim.call_count("cuMemUnmap");
  long const maps = sim.call_count("cuMemMap");
  constexpr int threads = 4;
  constexpr int rounds = 150;
  std::atomic<int> corrupted{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng{static_cast<unsigned>(t) * 7919U + 1U};
      std::uniform_int_distribution<std::size_t> size_of{1, 12};
      struct held {
        void* p;
        std::size_t n;
        unsigned char v;
        bool synchronous;
      };
      std::vector<held> mine;
      for (int i = 0; i < rounds; ++i) {
        if (mine.size() > 3 || (!mine.empty() && rng() % 3 == 0)) {
          held const h = mine[rng() % mine.size()];
          if (!host_check(h.p, h.n, h.v)) corrupted.fetch_add(1);
          if (h.synchronous) {
            sync_free(pool, h.p, h.n);
          } else {
            pool.deallocate(h.p, h.n);
          }
          std::erase_if(mine, [&](held const& x) { return x.p == h.p; });
          continue;
        }
        std::size_t const n = size_of(rng) * MiB + (rng() % 4) * 4096;
        bool const synchronous = rng() % 2 == 0;
        void* p = nullptr;
        try {
          p = synchronous ? sync_alloc(pool, n) : pool.allocate(n);
        } catch (out_of_memory const&) {
          refused.fetch_add(1);
          continue;
        }
        auto const v = static_cast<unsigned char>(rng());
        std::memset(p, v, n);
        mine.push_back({p, n, v, synchronous});
      }
      for (auto const& h : mine) {
        if (!host_check(h.p, h.n, h.v)) corrupted.fetch_add(1);
        sync_free(pool, h.p, h.n);
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(corrupted.load(), 0);
  EXPECT_LE(pool.pool_size(), 96 * MiB);
  // The run did release pages and map them again (else it tested nothing here).
  EXPECT_GT(sim.call_count("cuMemUnmap"), unmaps);
  EXPECT_GT(sim.call_count("cuMemMap"), maps + 48);
  pool.trim(0);
  EXPECT_EQ(pool.pool_size(), 0U);
  EXPECT_EQ(sim.violations(), 0);
  std::printf("%d requests refused at the maximum; %ld unmaps, %ld maps\n", refused.load(),
              sim.call_count("cuMemUnmap") - unmaps, sim.call_count("cuMemMap") - maps);
}

}  // namespace
}  // namespace gpumem
