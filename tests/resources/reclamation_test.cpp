// Synchronous semantics in the caching resources (call_context::synchronous, the
// shim's safe mode), checked on the simulated device, where work nothing orders
// really does run late: each promise of docs/cuda-semantics.md ("What a program may
// rely on") that a pool keeps, a test here.
//
// ordering_probe (tests/support) stands in for kernels: work queued on a stream that
// uses a block as allocation generation g; it counts a violation when older work
// runs on memory after newer work — the corruption the old safe mode caused when a
// program mixed cudaMalloc/cudaFree with cudaMallocAsync/cudaFreeAsync.

#include <gpumem/call_context.hpp>
#include <gpumem/cuda_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/fixed_size_memory_resource.hpp>
#include <gpumem/pool_memory_resource.hpp>
#include <gpumem/stream_tracker.hpp>
#include "pool/coalescing_free_list.hpp"
#include "pool/stream_free_lists.hpp"

#include <support/ordering_probe.hpp>
#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

/// cudaMalloc / cudaFree as the shim's safe mode issues them.
struct synchronous_scope : scoped_call_context {
  synchronous_scope() : scoped_call_context{"cudaMalloc", -1, true} {}
};

class Reclamation : public ::testing::Test {
 public:  // mixed_families() below drives the fixture too
  void SetUp() override {
    if (!test::sim_control::get().present() || !detail::driver_available()) {
      GTEST_SKIP() << "needs the simulated device (queued work must wait for a synchronization)";
    }
    ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
    device_ = detail::current_device();
    ASSERT_GE(device_, 0);
  }
  void TearDown() override {
    auto const& d = detail::driver();
    for (CUstream s : streams_) EXPECT_EQ(d.cuStreamSynchronize(s), CUDA_SUCCESS);
    test::sim_control::get().run_all();
    for (CUstream s : streams_) {
      tracker().stream_destroying(s);
      EXPECT_EQ(d.cuStreamDestroy(s), CUDA_SUCCESS);
    }
  }

  stream_tracker& tracker() { return stream_tracker::of(device_); }
  std::uint64_t barriers() { return tracker().barrier_count(); }

  /// A non-blocking stream, registered as the shim's cuStreamCreate hook does.
  CUstream make(bool track = true) {
    CUstream s = nullptr;
    EXPECT_EQ(detail::driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    if (track) tracker().stream_created(s, CU_STREAM_NON_BLOCKING);
    streams_.push_back(s);
    return s;
  }
  static void sync(CUstream s) { ASSERT_EQ(detail::driver().cuStreamSynchronize(s), CUDA_SUCCESS); }

  static void* sync_alloc(device_memory_resource& r, std::size_t n) {
    synchronous_scope sc;
    return r.allocate(n);
  }
  static void sync_free(device_memory_resource& r, void* p, std::size_t n) {
    synchronous_scope sc;
    r.deallocate(p, n);
  }

  test::ordering_probe& probe() { return probe_; }

 protected:
  test::ordering_probe probe_{detail::driver().cuLaunchHostFunc};
  cuda_memory_resource cuda_;
  int device_ = -1;
  std::vector<CUstream> streams_;
};

// Promise: memory returned by cudaMalloc can be used at once on any stream, with no
// earlier work still touching it. The old pool served cudaMalloc on the legacy
// stream and took another stream's free list by making only the legacy stream wait.
TEST_F(Reclamation, SynchronousAllocationNeverOvertakesWorkOfAnotherStream) {
  CUstream n1 = make();
  CUstream n2 = make();
  pool_memory_resource pool{&cuda_, pool_options{MiB, MiB, MiB}};  // no room to grow: reuse is forced
  void* p = pool.allocate(512 * KiB, stream_ref{n1});
  auto const g1 = probe_.next_generation();
  ASSERT_EQ(probe_.touch(n1, p, 512 * KiB, g1), CUDA_SUCCESS);
  pool.deallocate(p, 512 * KiB, stream_ref{n1});  // cudaFreeAsync: n1's work may still run

  auto const before = barriers();
  void* q = sync_alloc(pool, MiB);  // cudaMalloc of everything: must reuse p's memory
  ASSERT_EQ(q, p);
  EXPECT_EQ(barriers(), before + 1);  // made usable by one barrier, not by a host wait
  auto const g2 = probe_.next_generation();
  ASSERT_EQ(probe_.touch(n2, q, MiB, g2), CUDA_SUCCESS);  // used at once on an unrelated stream
  sync(n2);
  sync(n1);
  EXPECT_EQ(probe_.violations(), 0);
  EXPECT_EQ(probe_.ran(), 2);
  sync_free(pool, q, MiB);
}

// Promise: after cudaFree returns, all work submitted before it, on any stream, that
// could touch the block counts as finished: the block is reused only after it.
TEST_F(Reclamation, SynchronousFreeIsReusedOnlyBehindABarrier) {
  CUstream n1 = make();
  CUstream n2 = make();
  pool_memory_resource pool{&cuda_, pool_options{MiB, MiB, MiB}};
  void* p = sync_alloc(pool, MiB);
  ASSERT_EQ(probe_.touch(n1, p, MiB, probe_.next_generation()), CUDA_SUCCESS);  // a kernel still running
  sync_free(pool, p, MiB);
  EXPECT_EQ(pool.pending_bytes(), MiB);
  EXPECT_EQ(pool.info().pending_bytes, MiB);
  EXPECT_EQ(pool.info().free_bytes, MiB);  // free from the program's point of view

  void* q = sync_alloc(pool, MiB);
  ASSERT_EQ(q, p);
  EXPECT_EQ(pool.pending_bytes(), 0U);
  ASSERT_EQ(probe_.touch(n2, q, MiB, probe_.next_generation()), CUDA_SUCCESS);
  sync(n2);
  EXPECT_EQ(probe_.violations(), 0);

  // The same for a stream-ordered reuse of a synchronously freed block.
  sync_free(pool, q, MiB);
  void* r = pool.allocate(MiB, stream_ref{n1});
  ASSERT_EQ(r, p);
  ASSERT_EQ(probe_.touch(n1, r, MiB, probe_.next_generation()), CUDA_SUCCESS);
  sync(n1);
  sync(n2);
  EXPECT_EQ(probe_.violations(), 0);
  pool.deallocate(r, MiB, stream_ref{n1});
}

// Promise: cudaMallocAsync/cudaFreeAsync keep stream order: reuse on the same stream
// at once, with no event, no barrier, no host wait.
TEST_F(Reclamation, StreamOrderedReuseStaysFree) {
  CUstream n1 = make();
  pool_memory_resource pool{&cuda_, pool_options{MiB, {}, MiB}};
  auto& sim = test::sim_control::get();
  auto const before = barriers();
  long const records = sim.call_count("cuEventRecord");
  void* p = pool.allocate(4 * KiB, stream_ref{n1});
  for (int i = 0; i < 100; ++i) {
    pool.deallocate(p, 4 * KiB, stream_ref{n1});
    ASSERT_EQ(pool.allocate(4 * KiB, stream_ref{n1}), p);
  }
  EXPECT_EQ(barriers(), before);
  EXPECT_EQ(sim.call_count("cuEventRecord"), records);
  pool.deallocate(p, 4 * KiB, stream_ref{n1});
}

// Promise (stream order): a block freed on one stream is used by another only once
// that stream is ordered after the free.
TEST_F(Reclamation, AnotherStreamTakesAStreamOrderedFreeOnlyAfterItsWork) {
  CUstream n1 = make();
  CUstream n2 = make();
  pool_memory_resource pool{&cuda_, pool_options{MiB, MiB, MiB}};
  void* p = pool.allocate(MiB, stream_ref{n1});
  ASSERT_EQ(probe_.touch(n1, p, MiB, probe_.next_generation()), CUDA_SUCCESS);
  pool.deallocate(p, MiB, stream_ref{n1});
  void* q = pool.allocate(MiB, stream_ref{n2});
  ASSERT_EQ(q, p);
  ASSERT_EQ(probe_.touch(n2, q, MiB, probe_.next_generation()), CUDA_SUCCESS);
  sync(n2);
  EXPECT_EQ(probe_.violations(), 0);
  pool.deallocate(q, MiB, stream_ref{n2});
}

// During a capture no barrier may be made: synchronous frees stay pending and the
// pool grows; after the capture they are reclaimed.
TEST_F(Reclamation, CapturesDeferReclamationAndThePoolGrowsInstead) {
  pool_memory_resource pool{&cuda_, pool_options{0, {}, MiB}};
  void* p = sync_alloc(pool, MiB);
  ASSERT_EQ(stream_tracker::begin_capture([] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  sync_free(pool, p, MiB);
  auto const before = barriers();
  void* q = sync_alloc(pool, MiB);
  EXPECT_NE(q, p);  // grew: the pending block may still be in use
  EXPECT_EQ(barriers(), before);
  EXPECT_EQ(pool.pool_size(), 2 * MiB);
  stream_tracker::capture_ended();
  sync_free(pool, q, MiB);
  EXPECT_EQ(pool.release(), 2 * MiB);  // reclaimed, then both slabs given back
  EXPECT_EQ(pool.pending_bytes(), 0U);
  EXPECT_EQ(barriers(), before + 1);
}

// A request that reclaims is served from the reclaimed memory before any other
// thread can take it: reclaim() hands it the reclaiming thread's clean shard while
// it is still locked, with everything reclaimed already merged in.
TEST_F(Reclamation, AReclaimingRequestIsServedBeforeOtherThreadsSeeTheMemory) {
  detail::stream_free_lists<detail::coalescing_free_list> lists;
  std::size_t const mine = lists.shard_index();
  alignas(256) static char mem[8 * KiB];
  ASSERT_TRUE(lists.add_pending({mem, 4 * KiB, mem}, 4 * KiB));
  ASSERT_TRUE(lists.add_pending({mem + 4 * KiB, 4 * KiB, mem}, 4 * KiB));
  bool called = false;
  bool const reclaimed = lists.reclaim(tracker(), [&](detail::coalescing_free_list& clean) {
    called = true;
    EXPECT_EQ(clean.largest(), 8 * KiB);  // both halves, coalesced
    bool locked_elsewhere = false;
    std::thread other{[&] {
      locked_elsewhere = !lists.clean(mine).mutex.try_lock();
      if (!locked_elsewhere) lists.clean(mine).mutex.unlock();
    }};
    other.join();
    EXPECT_TRUE(locked_elsewhere);
    EXPECT_TRUE(clean.take_best_fit(8 * KiB));
  });
  EXPECT_TRUE(reclaimed);
  EXPECT_TRUE(called);
  EXPECT_EQ(lists.pending_bytes(), 0U);
  EXPECT_TRUE(lists.clean().list.empty());  // taken inside: nobody else could see it
}

// Clean memory is sharded by thread: a reclaim files each thread's synchronous
// frees in that thread's own clean shard, where its next allocations look first,
// and the streams' lists in the reclaiming thread's.
TEST_F(Reclamation, AReclaimFilesEachThreadsFreesInItsOwnCleanShard) {
  detail::stream_free_lists<detail::coalescing_free_list> lists;
  alignas(256) static char mem[8 * KiB];
  std::size_t const mine = lists.shard_index();
  std::size_t theirs = mine;
  std::thread{[&] {
    theirs = lists.shard_index();
    ASSERT_TRUE(lists.add_pending({mem, 4 * KiB, mem}, 4 * KiB));
  }}.join();
  ASSERT_NE(theirs, mine);
  ASSERT_TRUE(lists.add_pending({mem + 4 * KiB, 4 * KiB, mem}, 4 * KiB));
  EXPECT_EQ(lists.clean_hint(), 0U);
  ASSERT_TRUE(lists.reclaim(tracker(), [](detail::coalescing_free_list&) {}));
  EXPECT_EQ(lists.clean(mine).list.free_bytes(), 4 * KiB);
  EXPECT_EQ(lists.clean(theirs).list.free_bytes(), 4 * KiB);
  EXPECT_EQ(lists.clean_hint(), (1U << mine) | (1U << theirs));
  // Neighbours in two shards do not coalesce until the shards are joined.
  EXPECT_EQ(lists.join_clean_into(mine, 0), 4 * KiB);
  EXPECT_EQ(lists.clean(mine).list.largest(), 8 * KiB);
  EXPECT_TRUE(lists.clean(theirs).list.empty());
  EXPECT_EQ(lists.clean_hint(), 1U << mine);
}

// Memory freed by two threads lands in their two clean shards. A request that
// neither shard can serve alone, in a pool that cannot grow, joins the shards
// (the halves coalesce with the free end of the slab) instead of failing.
TEST_F(Reclamation, ARequestNoShardServesAloneJoinsTheShardsInsteadOfFailing) {
  pool_memory_resource pool{&cuda_, pool_options{4 * MiB, 4 * MiB, MiB}};
  void* x = sync_alloc(pool, MiB);  // [0, 1) MiB of the slab stays in use
  void* p = nullptr;
  void* q = nullptr;
  std::thread{[&] { p = sync_alloc(pool, MiB); }}.join();  // [1, 2)
  std::thread{[&] { q = sync_alloc(pool, MiB); }}.join();  // [2, 3)
  ASSERT_EQ(static_cast<char*>(p), static_cast<char*>(x) + MiB);
  ASSERT_EQ(static_cast<char*>(q), static_cast<char*>(x) + 2 * MiB);
  std::thread{[&] { sync_free(pool, p, MiB); }}.join();
  std::thread{[&] { sync_free(pool, q, MiB); }}.join();
  // 3 MiB free in one run, filed by a barrier in two shards (and the slab's end in a third).
  void* big = sync_alloc(pool, 3 * MiB);
  EXPECT_EQ(big, p);
  EXPECT_EQ(pool.pool_size(), 4 * MiB);  // no growth, nothing given back and taken again
  sync_free(pool, big, 3 * MiB);
  sync_free(pool, x, MiB);
}

// Threads allocating synchronously side by side, each from its own clean shard
// once its frees came back to it: every block handed out once, and the pool no
// larger than what waits for a barrier plus a slab per thread.
TEST_F(Reclamation, ThreadsAllocatingSynchronouslyNeverShareABlock) {
  pool_memory_resource pool{&cuda_, pool_options{0, {}, MiB}};
  constexpr int threads = 6;
  std::atomic<int> overlaps{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng{static_cast<unsigned>(99 + t)};
      std::vector<std::pair<unsigned char*, std::size_t>> live;
      auto const tag = static_cast<unsigned char>(t + 1);
      for (int i = 0; i < 3000; ++i) {
        if (live.size() < 8 && (live.empty() || rng() % 2 == 0)) {
          std::size_t const n = 256 * (1 + rng() % 64);
          auto* b = static_cast<unsigned char*>(sync_alloc(pool, n));
          std::memset(b, tag, n);
          live.emplace_back(b, n);
        } else {
          std::size_t const k = rng() % live.size();
          auto [b, n] = live[k];
          if (std::any_of(b, b + n, [&](unsigned char c) { return c != tag; })) overlaps.fetch_add(1);
          sync_free(pool, b, n);
          live[k] = live.back();
          live.pop_back();
        }
        if (i % 64 == 0) std::this_thread::yield();
      }
      for (auto [b, n] : live) sync_free(pool, b, n);
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_LE(pool.pool_size(), 8 * MiB + threads * MiB);
  auto const i = pool.info();
  EXPECT_EQ(i.used_bytes, 0U);
}

// Barriers are batched: a tight cudaMalloc/cudaFree loop makes one per 8 MiB freed
// (a small pool's reclaim threshold), and pending memory never makes the pool grow
// by more than that threshold.
TEST_F(Reclamation, TightSynchronousLoopsBarrierRarelyAndGrowByAtMostTheThreshold) {
  pool_memory_resource pool{&cuda_, pool_options{0, {}, 2 * MiB}};
  auto const before = barriers();
  constexpr int pairs = 4000;
  for (int i = 0; i < pairs; ++i) {
    void* p = sync_alloc(pool, 4 * KiB);
    sync_free(pool, p, 4 * KiB);
  }
  auto const made = barriers() - before;
  EXPECT_GE(made, 1U);
  EXPECT_LE(made, static_cast<std::uint64_t>(pairs / 8));
  EXPECT_LE(pool.pool_size(), 8 * MiB + 2 * MiB);  // the threshold and one slab
}

// A non-blocking stream the tracker was never told about is not ordered by a barrier,

// Small blocks reclaim by count as well as by bytes: 20000 frees of 256 B are 5 MiB,
// below the 8 MiB threshold, yet they must not pile up as 20000 pending blocks (the
// lists and the shim's pointer table would cycle through that many addresses).
TEST_F(Reclamation, ManySmallSynchronousFreesReclaimByCount) {
  pool_memory_resource pool{&cuda_, pool_options{0, {}, 2 * MiB}};
  auto const before = barriers();
  constexpr int pairs = 20000;
  std::size_t most_waiting = 0;
  for (int i = 0; i < pairs; ++i) {
    void* p = sync_alloc(pool, 256);
    sync_free(pool, p, 256);
    most_waiting = std::max(most_waiting, pool.pending_bytes());
  }
  auto const made = barriers() - before;
  EXPECT_GE(made, static_cast<std::uint64_t>(pairs / 4096));
  EXPECT_LE(made, static_cast<std::uint64_t>(pairs / 4096) + 1);
  EXPECT_LE(most_waiting, 4096 * 256);
  EXPECT_LE(pool.pool_size(), 2 * MiB);  // one slab: everything cycles through it
}

// How much freed memory waits before a barrier follows what a barrier costs: with no
// non-blocking stream (a barrier is one event record) a 256 MiB pool reclaims once
// 1 MiB waits; with 16 of them (each a query and a wait, more with work queued)
// once 1/32 of the pool, 8 MiB, waits.
TEST_F(Reclamation, MemoryWaitingForABarrierFollowsTheBarriersCost) {
  auto cycle = [&](std::size_t& most_waiting) {
    pool_memory_resource pool{&cuda_, pool_options{256 * MiB, {}, 2 * MiB}};
    auto const before = barriers();
    most_waiting = 0;
    for (int i = 0; i < 64; ++i) {
      sync_free(pool, sync_alloc(pool, 512 * KiB), 512 * KiB);
      most_waiting = std::max(most_waiting, pool.pending_bytes());
    }
    return barriers() - before;
  };
  std::size_t cheap_waiting = 0;
  auto const cheap = cycle(cheap_waiting);  // 32 MiB freed, 1 MiB at a time
  EXPECT_LE(cheap_waiting, 1 * MiB);
  EXPECT_GE(cheap, 31U);
  for (int i = 0; i < 16; ++i) make();
  std::size_t dear_waiting = 0;
  auto const dear = cycle(dear_waiting);  // 8 MiB at a time
  EXPECT_GT(dear_waiting, 4 * MiB);
  EXPECT_LE(dear_waiting, 8 * MiB);
  EXPECT_LE(dear, 4U);
}

// Frees that no allocation follows (a phase that ends, a model freed) do not wait for
// a barrier until the next miss: once twice the miss path's threshold waits (16 MiB
// here), the freeing thread makes the barrier, and the peak the pool reports counts
// what waited between barriers, not only at them.
TEST_F(Reclamation, FreesThatNoAllocationFollowsAreReclaimedAsTheyWait) {
  for (int i = 0; i < 16; ++i) make();  // barriers are dear: the miss path waits for 8 MiB
  pool_memory_resource pool{&cuda_, pool_options{256 * MiB, {}, 2 * MiB}};
  std::vector<void*> blocks;
  blocks.reserve(128);
  for (int i = 0; i < 128; ++i) blocks.push_back(sync_alloc(pool, MiB));
  auto const before = barriers();
  std::size_t most_waiting = 0;
  for (void* p : blocks) {
    sync_free(pool, p, MiB);
    most_waiting = std::max(most_waiting, pool.pending_bytes());
  }
  EXPECT_LT(most_waiting, 16 * MiB);
  EXPECT_GE(barriers() - before, 8U);
  auto const i = pool.info();
  EXPECT_EQ(i.peak_pending_bytes, 16 * MiB);
  EXPECT_EQ(i.pending_bytes, 0U);
  EXPECT_EQ(i.used_bytes, 0U);
}

// A barrier does not order a non-blocking stream the tracker was never told about,
// so memory it freed in stream order must not become "clean" through one.
TEST_F(Reclamation, AnUnregisteredStreamsFreesAreNeverMadeCleanByABarrier) {
  CUstream unknown = make(/*track=*/false);
  CUstream n2 = make();
  pool_memory_resource pool{&cuda_, pool_options{MiB, MiB, MiB}};
  void* p = pool.allocate(MiB, stream_ref{unknown});
  ASSERT_EQ(probe_.touch(unknown, p, MiB, probe_.next_generation()), CUDA_SUCCESS);
  pool.deallocate(p, MiB, stream_ref{unknown});
  try {
    void* q = sync_alloc(pool, MiB);
    ASSERT_EQ(probe_.touch(n2, q, MiB, probe_.next_generation()), CUDA_SUCCESS);
    sync(n2);
    sync_free(pool, q, MiB);
  } catch (out_of_memory const&) {
    // Also sound: the only memory is what the unknown stream may still use.
  }
  sync(unknown);
  EXPECT_EQ(probe_.violations(), 0);
}

TEST_F(Reclamation, FixedSizeKeepsTheSamePromises) {
  CUstream n1 = make();
  CUstream n2 = make();
  fixed_size_memory_resource fs{&cuda_, 64 * KiB, 1};  // one block: every reuse is of the same one
  void* p = fs.allocate(64 * KiB, stream_ref{n1});
  ASSERT_EQ(probe_.touch(n1, p, 64 * KiB, probe_.next_generation()), CUDA_SUCCESS);
  fs.deallocate(p, 64 * KiB, stream_ref{n1});
  void* q = sync_alloc(fs, 64 * KiB);  // cudaMalloc: may not just wait on the legacy stream
  ASSERT_EQ(probe_.touch(n2, q, 64 * KiB, probe_.next_generation()), CUDA_SUCCESS);
  sync(n2);
  sync_free(fs, q, 64 * KiB);
  EXPECT_EQ(fs.info().pending_bytes, 64 * KiB);
  void* r = sync_alloc(fs, 64 * KiB);
  ASSERT_EQ(probe_.touch(n1, r, 64 * KiB, probe_.next_generation()), CUDA_SUCCESS);
  sync(n1);
  sync(n2);
  EXPECT_EQ(probe_.violations(), 0);
  sync_free(fs, r, 64 * KiB);
}

// fixed_size batches barriers too: a program holding all but one block of a chunk
// and cycling the last with cudaMalloc/cudaFree makes one barrier per chunk's worth
// of frees (it grows by a chunk meanwhile), not one per pair.
TEST_F(Reclamation, FixedSizeBarriersOncePerChunkOfFrees) {
  constexpr std::size_t block = 4 * KiB;
  constexpr std::size_t per_chunk = 8;
  fixed_size_memory_resource fs{&cuda_, block, per_chunk};
  std::vector<void*> held;
  for (std::size_t i = 0; i + 1 < per_chunk; ++i) held.push_back(sync_alloc(fs, block));
  auto const before = barriers();
  constexpr int pairs = 400;
  for (int i = 0; i < pairs; ++i) sync_free(fs, sync_alloc(fs, block), block);
  auto const made = barriers() - before;
  EXPECT_GE(made, 1U);
  EXPECT_LE(made, static_cast<std::uint64_t>(pairs / per_chunk));
  // What the program holds, a chunk's worth waiting, and one chunk grown meanwhile.
  EXPECT_LE(fs.info().reserved_bytes, (per_chunk - 1) * block + 2 * per_chunk * block);
  for (void* p : held) sync_free(fs, p, block);
}

// The stress test of safe mode on the simulated device: 8 threads, each with its own
// non-blocking stream, mixing both allocation families, using synchronously
// allocated blocks on other threads' streams, freeing blocks whose work is still
// queued, freeing other threads' blocks, in a pool small enough that everything is
// reused many times. Every piece of work checks it did not run after the next
// owner's; every allocation checks it overlaps no live one.
struct live_range {
  std::uintptr_t p;
  std::size_t n;
  std::uint64_t generation;
  bool synchronous;  ///< cudaMalloc (else cudaMallocAsync on its owner's stream)
  int owner;
};

class overlap_checker {
 public:
  bool add(live_range const& r) {
    std::lock_guard lock{mutex_};
    auto it = live_.upper_bound(r.p);
    if (it != live_.end() && it->first < r.p + r.n) return false;
    if (it != live_.begin() && std::prev(it)->first + std::prev(it)->second > r.p) return false;
    live_.emplace(r.p, r.n);
    return true;
  }
  void remove(std::uintptr_t p) {
    std::lock_guard lock{mutex_};
    live_.erase(p);
  }

 private:
  std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> live_;
};

/// What mixed_families() saw.
struct mixed_result {
  long overlap_errors = 0;
  long ooms = 0;
  std::uint64_t barriers = 0;
};

/// Eight threads, a stream each (some their per-thread default stream), both families, blocks freed by other threads
/// and work queued at every free: at most `max_live` blocks of <= `max_size` per thread.
mixed_result mixed_families(Reclamation& fixture, pool_memory_resource& pool, int iterations, std::size_t max_live,
                            std::size_t max_size, bool yield_often) {
  constexpr int threads = 8;
  std::vector<CUstream> streams;
  for (int t = 0; t < threads; ++t) streams.push_back(fixture.make());
  auto& probe = fixture.probe();
  overlap_checker overlaps;
  std::atomic<long> overlap_errors{0};
  std::atomic<long> ooms{0};
  std::mutex handoff_mutex;
  std::deque<live_range> handoff;  // blocks another thread frees
  auto const before = fixture.barriers();

  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
      std::mt19937 rng{static_cast<unsigned>(7 + t)};
      std::uniform_int_distribution<std::size_t> size{256, max_size};
      std::uniform_int_distribution<int> pick{0, 99};
      std::uniform_int_distribution<int> other{0, threads - 1};
      // A quarter of the threads work on their per-thread default stream, which no
      // other thread can name.
      CUstream const own = pick(rng) < 25 ? CU_STREAM_PER_THREAD : streams[static_cast<std::size_t>(t)];
      std::vector<live_range> live;
      auto const release = [&](live_range const& r, bool stream_ordered_free) {
        overlaps.remove(r.p);
        // The shim's rule: stream order only when both sides were stream-ordered.
        bool const synchronous = !stream_ordered_free || r.synchronous;
        scoped_call_context sc{"free", -1, synchronous};
        pool.deallocate(reinterpret_cast<void*>(r.p), r.n, stream_ref{own});
      };
      for (int i = 0; i < iterations; ++i) {
        // Other threads get the core in the middle of their pool calls too.
        if (yield_often && pick(rng) < 20) std::this_thread::yield();
        int const action = pick(rng);
        if ((action < 45 && live.size() < max_live) || live.empty()) {
          bool const synchronous = pick(rng) < 50;
          std::size_t const n = size(rng);
          void* p = nullptr;
          try {
            scoped_call_context sc{"alloc", -1, synchronous};
            p = pool.allocate(n, stream_ref{own});
          } catch (out_of_memory const&) {
            ooms.fetch_add(1);
            ASSERT_EQ(detail::driver().cuStreamSynchronize(own), CUDA_SUCCESS);
            continue;
          }
          live_range const r{reinterpret_cast<std::uintptr_t>(p), n, probe.next_generation(), synchronous, t};
          if (!overlaps.add(r)) overlap_errors.fetch_add(1);
          // cudaMalloc memory is used on any stream; cudaMallocAsync memory on its own.
          CUstream const user = synchronous ? streams[static_cast<std::size_t>(other(rng))] : own;
          ASSERT_EQ(probe.touch(user, p, n, r.generation), CUDA_SUCCESS);
          if (synchronous && pick(rng) < 50) { ASSERT_EQ(probe.touch(own, p, n, r.generation), CUDA_SUCCESS); }
          live.push_back(r);
        } else if (action < 85) {
          std::size_t const k = static_cast<std::size_t>(pick(rng)) % live.size();
          live_range const r = live[k];
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
          if (r.synchronous && pick(rng) < 30) {
            std::lock_guard lock{handoff_mutex};
            handoff.push_back(r);  // another thread will cudaFree it
          } else {
            // cudaFree (sync) or cudaFreeAsync on the owner's stream, with work still queued.
            release(r, !r.synchronous || pick(rng) < 30);
          }
        } else if (action < 95) {
          live_range r{};
          {
            std::lock_guard lock{handoff_mutex};
            if (handoff.empty()) continue;
            r = handoff.front();
            handoff.pop_front();
          }
          release(r, false);
        } else {
          ASSERT_EQ(detail::driver().cuStreamSynchronize(own), CUDA_SUCCESS);  // let work drain
        }
      }
      for (auto const& r : live) release(r, false);
    });
  }
  for (auto& w : workers) w.join();
  for (auto const& r : handoff) {
    overlaps.remove(r.p);
    Reclamation::sync_free(pool, reinterpret_cast<void*>(r.p), r.n);
  }
  for (CUstream s : streams) Reclamation::sync(s);
  test::sim_control::get().run_all();
  // Everything was freed: every byte the pool holds is free again (none lost on the way).
  auto const info = pool.info();
  EXPECT_EQ(info.free_bytes, info.reserved_bytes);
  return {overlap_errors.load(), ooms.load(), fixture.barriers() - before};
}

TEST_F(Reclamation, EightThreadsMixingBothFamiliesNeverCorruptEachOther) {
  // At most 12 live blocks of <= 64 KiB per thread: 6 MiB live at worst, so a
  // 10 MiB pool runs out only if reclamation or fragmentation fails.
  pool_memory_resource pool{&cuda_, pool_options{0, 10 * MiB, MiB}};
  auto const r = mixed_families(*this, pool, 2000, 12, 64 * KiB, false);
  EXPECT_EQ(probe_.violations(), 0);
  EXPECT_EQ(r.overlap_errors, 0);
  EXPECT_GT(r.barriers, 0U);  // the test did exercise reclamation
  EXPECT_EQ(r.ooms, 0);       // and never ran out while memory waited for reclamation
  EXPECT_GT(probe_.ran(), 2000);
  RecordProperty("barriers", static_cast<int>(r.barriers));
}

// Free memory moving between lists (a stream taking another stream's blocks, or a
// clean block into its own list) is in none of them for a moment. A request that
// finds no fit then must look again, not fail: here at most 1.5 MiB is live in a
// 4 MiB pool, and the threads yield often so that moves are caught half-way.
TEST_F(Reclamation, NoRequestFailsWhileFreeMemoryMovesBetweenLists) {
  pool_memory_resource pool{&cuda_, pool_options{4 * MiB, 4 * MiB, MiB}};
  auto const r = mixed_families(*this, pool, 6000, 6, 32 * KiB, true);
  EXPECT_EQ(probe_.violations(), 0);
  EXPECT_EQ(r.overlap_errors, 0);
  EXPECT_EQ(r.ooms, 0);
}

}  // namespace
}  // namespace gpumem
