// fixed_size_memory_resource: preallocation, size limits, O(1) LIFO reuse,
// growth by chunks (and by one block when the upstream is short), release of
// free chunks, exact info, double frees, threads, and stream ordering on the sim.

#include <gpumem/call_context.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/fixed_size_memory_resource.hpp>

#include <support/arena_test_resource.hpp>
#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t KiB = 1024;

char* as_char(void* p) { return static_cast<char*>(p); }

TEST(FixedSize, BadArgumentsThrow) {
  test::arena_test_resource arena{64 * KiB};
  EXPECT_THROW(fixed_size_memory_resource(nullptr, 4 * KiB, 8), logic_error);
  EXPECT_THROW(fixed_size_memory_resource(&arena, 0, 8), logic_error);
  EXPECT_THROW(fixed_size_memory_resource(&arena, 4 * KiB, 0), logic_error);
  EXPECT_TRUE(arena.allocations().empty());
  EXPECT_THROW(fixed_size_memory_resource(&arena, 64 * KiB, 2), out_of_memory);  // first chunk does not fit
}

TEST(FixedSize, PreallocatesOneChunk) {
  test::arena_test_resource arena{1024 * KiB};
  fixed_size_memory_resource fs{&arena, 4 * KiB, 8};
  EXPECT_EQ(fs.block_size(), 4 * KiB);
  EXPECT_EQ(fs.blocks_per_chunk(), 8U);
  ASSERT_EQ(arena.allocations().size(), 1U);
  EXPECT_EQ(arena.allocations()[0].bytes, 32 * KiB);
  auto const i = fs.info();
  EXPECT_EQ(i.reserved_bytes, 32 * KiB);
  EXPECT_EQ(i.used_bytes, 0U);
  EXPECT_EQ(i.free_bytes, 32 * KiB);
  EXPECT_EQ(i.largest_free_block, 4 * KiB);
}

TEST(FixedSize, BlockSizeRoundsTo256) {
  test::arena_test_resource arena{64 * KiB};
  fixed_size_memory_resource fs{&arena, 1000, 4};
  EXPECT_EQ(fs.block_size(), 1024U);
  EXPECT_EQ(arena.allocations()[0].bytes, 4 * KiB);
}

TEST(FixedSize, OneBlockPerRequestUpToTheBlockSize) {
  test::arena_test_resource arena{1024 * KiB};
  fixed_size_memory_resource fs{&arena, 4 * KiB, 8};
  char* const base = arena.base();
  EXPECT_EQ(fs.allocate(0), nullptr);
  void* a = fs.allocate(1);
  void* b = fs.allocate(4 * KiB);
  EXPECT_EQ(a, base);  // ascending addresses from a fresh chunk
  EXPECT_EQ(b, base + 4 * KiB);
  EXPECT_EQ(fs.info().used_bytes, 8 * KiB);
  try {
    static_cast<void>(fs.allocate(4 * KiB + 1));
    ADD_FAILURE() << "expected bad_alloc";
  } catch (out_of_memory const&) { ADD_FAILURE() << "too large is not out of memory"; } catch (bad_alloc const& e) {
    EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_VALUE);
  }
  fs.deallocate(a, 1);
  fs.deallocate(b, 4 * KiB);
  EXPECT_EQ(fs.info().used_bytes, 0U);
}

TEST(FixedSize, ReuseIsLastInFirstOut) {
  test::arena_test_resource arena{1024 * KiB};
  fixed_size_memory_resource fs{&arena, 4 * KiB, 8};
  void* a = fs.allocate(100);
  void* b = fs.allocate(100);
  fs.deallocate(a, 100);
  fs.deallocate(b, 100);
  EXPECT_EQ(fs.allocate(100), b);
  EXPECT_EQ(fs.allocate(100), a);
  fs.deallocate(a, 100);
  fs.deallocate(b, 100);
  EXPECT_EQ(arena.allocations().size(), 1U);
}

TEST(FixedSize, GrowsByAChunkWhenExhausted) {
  test::arena_test_resource arena{1024 * KiB};
  fixed_size_memory_resource fs{&arena, 4 * KiB, 8};
  std::vector<void*> ps;
  for (int i = 0; i < 8; ++i) ps.push_back(fs.allocate(4 * KiB));
  EXPECT_EQ(arena.allocations().size(), 1U);
  ps.push_back(fs.allocate(4 * KiB));
  ASSERT_EQ(arena.allocations().size(), 2U);
  EXPECT_EQ(arena.allocations()[1].bytes, 32 * KiB);
  EXPECT_EQ(ps.back(), arena.allocations()[1].ptr);
  auto const i = fs.info();
  EXPECT_EQ(i.reserved_bytes, 64 * KiB);
  EXPECT_EQ(i.used_bytes, 36 * KiB);
  EXPECT_EQ(i.free_bytes, 28 * KiB);
  for (void* p : ps) fs.deallocate(p, 4 * KiB);
}

TEST(FixedSize, FallsBackToOneBlockThenRunsOut) {
  test::arena_test_resource arena{40 * KiB};  // one chunk of 32 KiB, then room for two blocks
  fixed_size_memory_resource fs{&arena, 4 * KiB, 8};
  std::vector<void*> ps;
  for (int i = 0; i < 10; ++i) ps.push_back(fs.allocate(4 * KiB));
  std::vector<std::size_t> sizes;
  for (auto const& c : arena.allocations()) sizes.push_back(c.bytes);
  EXPECT_EQ(sizes, (std::vector<std::size_t>{32 * KiB, 4 * KiB, 4 * KiB}));
  EXPECT_THROW(static_cast<void>(fs.allocate(4 * KiB)), out_of_memory);
  EXPECT_EQ(fs.info().reserved_bytes, 40 * KiB);
  fs.deallocate(ps.back(), 4 * KiB);
  EXPECT_EQ(fs.allocate(4 * KiB), ps.back());
  for (void* p : ps) fs.deallocate(p, 4 * KiB);
}

TEST(FixedSize, ReleaseReturnsExactlyTheFreeChunks) {
  test::arena_test_resource arena{1024 * KiB};
  fixed_size_memory_resource fs{&arena, 4 * KiB, 4};
  std::vector<void*> ps;
  for (int i = 0; i < 6; ++i) ps.push_back(fs.allocate(4 * KiB));  // chunk 1 full, 2 of chunk 2
  ASSERT_EQ(arena.allocations().size(), 2U);
  char* const chunk1 = static_cast<char*>(arena.allocations()[0].ptr);
  for (int i = 0; i < 4; ++i) fs.deallocate(ps[static_cast<std::size_t>(i)], 4 * KiB);
  fs.deallocate(ps[4], 4 * KiB);  // chunk 2 still has ps[5] in use

  EXPECT_EQ(fs.release(), 16 * KiB);
  auto const frees = arena.deallocations();
  ASSERT_EQ(frees.size(), 1U);
  EXPECT_EQ(frees[0].ptr, chunk1);
  EXPECT_EQ(frees[0].bytes, 16 * KiB);
  auto const i = fs.info();
  EXPECT_EQ(i.reserved_bytes, 16 * KiB);
  EXPECT_EQ(i.used_bytes, 4 * KiB);
  EXPECT_EQ(i.free_bytes, 12 * KiB);
  // The released chunk's blocks are gone from the free lists.
  for (int k = 0; k < 3; ++k) {
    void* p = fs.allocate(4 * KiB);
    EXPECT_FALSE(as_char(p) >= chunk1 && as_char(p) < chunk1 + 16 * KiB);
    fs.deallocate(p, 4 * KiB);
  }
  fs.deallocate(ps[5], 4 * KiB);
  EXPECT_EQ(fs.release(), 16 * KiB);
  EXPECT_EQ(arena.live_bytes(), 0U);
  EXPECT_EQ(arena.bad_frees(), 0U);
}

TEST(FixedSize, DoubleFreesAreIgnored) {
  test::arena_test_resource arena{1024 * KiB};
  fixed_size_memory_resource fs{&arena, 4 * KiB, 8};
  void* a = fs.allocate(4 * KiB);
  void* b = fs.allocate(4 * KiB);
  fs.deallocate(a, 4 * KiB);
  fs.deallocate(a, 4 * KiB);  // double free
  EXPECT_EQ(fs.info().used_bytes, 4 * KiB);
  void* c = fs.allocate(4 * KiB);
  void* d = fs.allocate(4 * KiB);
  EXPECT_EQ(c, a);
  EXPECT_NE(d, a);
  EXPECT_NE(d, b);
  for (void* p : {b, c, d}) fs.deallocate(p, 4 * KiB);
  EXPECT_EQ(fs.info().used_bytes, 0U);
}

// A foreign or interior pointer, or a size over the block size, is the caller's bug:
// a release build ignores it; a debug build stops there (FixedSizeDeathTest).
#ifdef NDEBUG
TEST(FixedSize, MisalignedAndForeignFreesAreIgnoredInReleaseBuilds) {
  test::arena_test_resource arena{1024 * KiB};
  fixed_size_memory_resource fs{&arena, 4 * KiB, 8};
  void* b = fs.allocate(4 * KiB);
  fs.deallocate(as_char(b) + 256, 4 * KiB);  // inside a block
  int on_stack = 0;
  fs.deallocate(&on_stack, sizeof on_stack);
  fs.deallocate(b, 8 * KiB);  // over the block size
  EXPECT_EQ(fs.info().used_bytes, 4 * KiB);
  EXPECT_NE(fs.allocate(4 * KiB), b);
  fs.deallocate(b, 4 * KiB);
}
#else
TEST(FixedSize, MisalignedAndForeignFreesAreIgnoredInReleaseBuilds) {
  GTEST_SKIP() << "assertions are on (no NDEBUG): FixedSizeDeathTest checks that they abort";
}
#endif

#ifndef NDEBUG
class FixedSizeDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(FixedSizeDeathTest, ForeignAndInteriorPointersAbort) {
  test::arena_test_resource arena{1024 * KiB};
  fixed_size_memory_resource fs{&arena, 4 * KiB, 8};
  void* b = fs.allocate(4 * KiB);
  int on_stack = 0;
  EXPECT_DEATH(fs.deallocate(&on_stack, sizeof on_stack), "fixed_size: deallocate of a pointer the resource does not");
  EXPECT_DEATH(fs.deallocate(as_char(b) + 256, 4 * KiB), "fixed_size: deallocate of a pointer inside a block");
  fs.deallocate(b, 4 * KiB);
}

TEST_F(FixedSizeDeathTest, ASizeOverTheBlockSizeAborts) {
  test::arena_test_resource arena{1024 * KiB};
  fixed_size_memory_resource fs{&arena, 4 * KiB, 8};
  void* b = fs.allocate(4 * KiB);
  EXPECT_DEATH(fs.deallocate(b, 8 * KiB), "fixed_size: deallocate with a size of 0 or over the block size");
  fs.deallocate(b, 100);  // any size up to the block's: the block is the unit
  EXPECT_EQ(fs.info().used_bytes, 0U);
}
#else
TEST(FixedSizeDeathTest, ChecksNeedAssertions) { GTEST_SKIP() << "GPUMEM_ASSERT is compiled out (NDEBUG)"; }
#endif

TEST(FixedSize, EveryBlockHasItsOwnInUseFlag) {
  // Flags are spread over cache lines (block i on line i % 64): chunks of one
  // block, of a power-of-two count, of more blocks than lines, of more than a line
  // holds per line, and a block size that is not a power of two.
  struct shape {
    std::size_t block;
    std::size_t blocks;
  };
  for (auto const [block, n] : {shape{4 * KiB, 1}, shape{4 * KiB, 64}, shape{768, 200}, shape{256, 5000}}) {
    SCOPED_TRACE(std::to_string(n) + " blocks of " + std::to_string(block) + " bytes");
    test::arena_test_resource arena{block * n};
    fixed_size_memory_resource fs{&arena, block, n};
    char* const base = arena.base();
    std::vector<char*> ps;
    for (std::size_t i = 0; i < n; ++i) ps.push_back(as_char(fs.allocate(block)));
    std::vector<char*> sorted = ps;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], base + i * block);
    for (char* p : ps) fs.deallocate(p, block);
    for (char* p : ps) fs.deallocate(p, block);  // double frees: ignored
#ifdef NDEBUG
    fs.deallocate(base + block / 2, block);  // inside a block: ignored (a debug build aborts)
#endif
    EXPECT_EQ(fs.info().used_bytes, 0U);
    std::vector<char*> again;  // every block once more, nothing grows
    for (std::size_t i = 0; i < n; ++i) again.push_back(as_char(fs.allocate(block)));
    std::sort(again.begin(), again.end());
    EXPECT_EQ(again, sorted);
    EXPECT_EQ(arena.allocations().size(), 1U);
    EXPECT_THROW(static_cast<void>(fs.allocate(block)), out_of_memory);
    for (char* p : again) fs.deallocate(p, block);
  }
}

TEST(FixedSize, DestructorReturnsEveryChunk) {
  test::arena_test_resource arena{1024 * KiB};
  {
    fixed_size_memory_resource fs{&arena, 4 * KiB, 2};
    for (int i = 0; i < 5; ++i) static_cast<void>(fs.allocate(4 * KiB));
    EXPECT_EQ(arena.live_bytes(), 24 * KiB);
  }
  EXPECT_EQ(arena.live_bytes(), 0U);
  EXPECT_EQ(arena.bad_frees(), 0U);
}

/// Forwards to an arena and counts the gives-back made with synchronous semantics.
class sync_counting_upstream final : public device_memory_resource {
 public:
  explicit sync_counting_upstream(device_memory_resource* up) : up_{up} {}
  int synchronous_frees = 0;
  int ordered_frees = 0;

 private:
  void* do_allocate(std::size_t bytes, stream_ref s) override { return up_->allocate(bytes, s); }
  void do_deallocate(void* p, std::size_t bytes, stream_ref s) noexcept override {
    ++(current_call().synchronous ? synchronous_frees : ordered_frees);
    up_->deallocate(p, bytes, s);
  }
  device_memory_resource* up_;
};

TEST(FixedSize, DestructorGivesChunksBackAsTheyWereObtained) {
  // Chunks come with synchronous semantics (usable at once by any stream); in-use
  // ones given back at destruction keep that promise, as the pool's slabs do.
  test::arena_test_resource arena{1024 * KiB};
  sync_counting_upstream up{&arena};
  {
    fixed_size_memory_resource fs{&up, 4 * KiB, 2};
    for (int i = 0; i < 5; ++i) static_cast<void>(fs.allocate(4 * KiB));
  }
  EXPECT_EQ(up.synchronous_frees, 3);
  EXPECT_EQ(up.ordered_frees, 0);
  EXPECT_EQ(arena.live_bytes(), 0U);
}

TEST(FixedSize, EightThreadsNeverShareABlock) {
  test::arena_test_resource arena{64 * 1024 * KiB};
  fixed_size_memory_resource fs{&arena, 2 * KiB, 64};
  std::atomic<long> corrupt{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      stream_ref const s{reinterpret_cast<cudaStream_t>(t % 2 == 0 ? legacy_stream_handle : per_thread_stream_handle)};
      std::mt19937 rng{static_cast<unsigned>(7 + t)};
      std::vector<std::pair<unsigned char*, unsigned char>> live;
      unsigned char tag = static_cast<unsigned char>(t * 32);
      auto const check_and_free = [&](std::pair<unsigned char*, unsigned char> const& b) {
        if (!std::all_of(b.first, b.first + 2 * KiB, [&](unsigned char v) { return v == b.second; })) {
          corrupt.fetch_add(1);
        }
        fs.deallocate(b.first, 2 * KiB, s);
      };
      for (int i = 0; i < 4000; ++i) {
        if (live.empty() || rng() % 3 != 0) {
          auto* p = static_cast<unsigned char*>(fs.allocate(1 + rng() % (2 * KiB), s));
          std::memset(p, ++tag, 2 * KiB);
          live.emplace_back(p, tag);
        } else {
          std::size_t const k = rng() % live.size();
          check_and_free(live[k]);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (auto const& b : live) check_and_free(b);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupt.load(), 0);
  auto const i = fs.info();
  EXPECT_EQ(i.used_bytes, 0U);
  EXPECT_EQ(i.free_bytes, i.reserved_bytes);
}

/// Two non-blocking streams on the simulated device, destroyed at the end of the scope.
class two_streams {
 public:
  two_streams() {
    auto const& d = detail::driver();
    if (d.cuStreamCreate(&a, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        d.cuStreamCreate(&b, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      ADD_FAILURE() << "cuStreamCreate failed";
    }
  }
  ~two_streams() {
    auto const& d = detail::driver();
    EXPECT_EQ(d.cuStreamDestroy(a), CUDA_SUCCESS);
    EXPECT_EQ(d.cuStreamDestroy(b), CUDA_SUCCESS);
    test::sim_control::get().run_all();
  }
  two_streams(two_streams const&) = delete;
  two_streams& operator=(two_streams const&) = delete;
  CUstream a = nullptr;
  CUstream b = nullptr;
};

/// Event records and waits since construction.
struct event_counts {
  test::sim_control& sim = test::sim_control::get();
  long const rec0 = sim.call_count("cuEventRecord");
  long const wait0 = sim.call_count("cuStreamWaitEvent");
  [[nodiscard]] long records() const { return sim.call_count("cuEventRecord") - rec0; }
  [[nodiscard]] long waits() const { return sim.call_count("cuStreamWaitEvent") - wait0; }
};

bool on_sim() { return test::sim_control::get().present() && detail::driver_available(); }

TEST(FixedSizeOnSim, StreamsReuseWithoutEventsAndTakeSparesWithOne) {
  if (!on_sim()) { GTEST_SKIP() << "needs the simulated device"; }
  ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
  test::arena_test_resource arena{1024 * KiB};
  {
    two_streams st;
    stream_ref const a{st.a};
    stream_ref const b{st.b};
    fixed_size_memory_resource fs{&arena, 4 * KiB, 2};  // the chunk is clean: no stream touched it
    event_counts const ev;
    void* p = fs.allocate(4 * KiB, a);  // clean blocks need no ordering
    void* q = fs.allocate(4 * KiB, a);
    for (int i = 0; i < 50; ++i) {
      fs.deallocate(p, 4 * KiB, a);
      ASSERT_EQ(fs.allocate(4 * KiB, a), p);
    }
    EXPECT_EQ(ev.records(), 0);  // same-stream reuse: no event
    EXPECT_EQ(ev.waits(), 0);
    fs.deallocate(q, 4 * KiB, a);
    fs.deallocate(p, 4 * KiB, a);           // A's latest free
    EXPECT_EQ(fs.allocate(4 * KiB, b), q);  // B takes A's spare and waits on A
    EXPECT_EQ(fs.allocate(4 * KiB, a), p);  // A keeps its latest
    EXPECT_EQ(ev.records(), 1);
    EXPECT_EQ(ev.waits(), 1);
    EXPECT_EQ(arena.allocations().size(), 1U);
    fs.deallocate(q, 4 * KiB, b);
    fs.deallocate(p, 4 * KiB, a);
    fs.stream_destroyed(a);
    fs.stream_destroyed(b);
  }
  EXPECT_EQ(arena.live_bytes(), 0U);
}

TEST(FixedSizeOnSim, AStreamsLastFreeBlockIsTakenOnlyWhenTheUpstreamRefuses) {
  if (!on_sim()) { GTEST_SKIP() << "needs the simulated device"; }
  ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
  for (bool const room : {true, false}) {
    SCOPED_TRACE(room ? "the upstream has room" : "the upstream is full");
    test::arena_test_resource arena{room ? 1024 * KiB : 4 * KiB};
    {
      two_streams st;
      stream_ref const a{st.a};
      stream_ref const b{st.b};
      fixed_size_memory_resource fs{&arena, 4 * KiB, 1};
      void* p = fs.allocate(4 * KiB, a);
      fs.deallocate(p, 4 * KiB, a);  // A's only free block: A will most likely reuse it
      event_counts const ev;
      void* q = fs.allocate(4 * KiB, b);
      if (room) {
        EXPECT_NE(q, p);  // B grows
        EXPECT_EQ(arena.allocations().size(), 2U);
        EXPECT_EQ(ev.records(), 0);
        EXPECT_EQ(fs.allocate(4 * KiB, a), p);
        fs.deallocate(p, 4 * KiB, a);
      } else {
        EXPECT_EQ(q, p);  // B takes it after waiting on A rather than running out of memory
        EXPECT_EQ(arena.allocations().size(), 1U);
        EXPECT_EQ(ev.records(), 1);
        EXPECT_EQ(ev.waits(), 1);
      }
      fs.deallocate(q, 4 * KiB, b);
      fs.stream_destroyed(a);
      fs.stream_destroyed(b);
    }
    EXPECT_EQ(arena.live_bytes(), 0U);
  }
}

TEST(FixedSizeOnSim, AThreadWithoutAContextTakesAnotherStreamsBlock) {
  // A program's own worker thread, on which no context was ever made current, must
  // still order its stream after another's (an event record and a wait need a
  // context) rather than run out of memory.
  if (!on_sim()) { GTEST_SKIP() << "needs the simulated device"; }
  ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
  test::arena_test_resource arena{4 * KiB};  // one block: no room to grow
  {
    two_streams st;
    fixed_size_memory_resource fs{&arena, 4 * KiB, 1};
    void* p = fs.allocate(4 * KiB, stream_ref{st.a});
    fs.deallocate(p, 4 * KiB, stream_ref{st.a});
    event_counts const ev;
    void* q = nullptr;
    std::thread worker{[&] {
      CUcontext current = nullptr;
      EXPECT_EQ(detail::driver().cuCtxGetCurrent(&current), CUDA_SUCCESS);
      EXPECT_EQ(current, nullptr);
      try {
        q = fs.allocate(4 * KiB, stream_ref{st.b});
      } catch (std::exception const& e) { ADD_FAILURE() << e.what(); }
    }};
    worker.join();
    EXPECT_EQ(q, p);
    EXPECT_EQ(ev.records(), 1);
    EXPECT_EQ(ev.waits(), 1);
    fs.deallocate(q, 4 * KiB, stream_ref{st.b});
    fs.stream_destroyed(stream_ref{st.a});
    fs.stream_destroyed(stream_ref{st.b});
  }
  EXPECT_EQ(arena.live_bytes(), 0U);
}

TEST(FixedSizeOnSim, SixteenThreadsOnTheirOwnStreamsShareOneChunk) {
  // Google Benchmark's 16-thread shape with 1 GiB blocks, on an upstream with room
  // for one chunk of 16 blocks only: stream 0 is warmed first, holding two blocks
  // at once, so one of the other 15 threads finds the clean list empty and must
  // take stream 0's spare block, ordered by an event. Benchmark threads never make
  // a context current; their event records failed, so that thread grew instead
  // (16 GiB a chunk) or, with no room left, ran out of memory in every round.
  if (!on_sim()) { GTEST_SKIP() << "needs the simulated device"; }
  ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
  auto const& d = detail::driver();
  constexpr int threads = 16;
  constexpr std::size_t GiB = std::size_t{1} << 30;
  std::vector<CUstream> streams(threads);
  for (auto& s : streams) ASSERT_EQ(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  test::arena_test_resource arena{threads * GiB};  // exactly one chunk: no room to grow
  {
    fixed_size_memory_resource fs{&arena, GiB, threads};
    stream_ref const first{streams[0]};
    for (int i = 0; i < 100; ++i) fs.deallocate(fs.allocate(GiB, first), GiB, first);
    {
      void* a = fs.allocate(GiB, first);
      void* b = fs.allocate(GiB, first);
      fs.deallocate(a, GiB, first);
      fs.deallocate(b, GiB, first);
    }
    std::atomic<int> failures{0};
    for (int round = 0; round < 3; ++round) {
      std::atomic<int> ready{0};
      std::vector<std::thread> workers;
      for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
          stream_ref const s{streams[static_cast<std::size_t>(t)]};
          try {
            fs.deallocate(fs.allocate(GiB, s), GiB, s);
            ready.fetch_add(1);
            while (ready.load() < threads) std::this_thread::yield();
            for (int i = 0; i < 2000; ++i) fs.deallocate(fs.allocate(GiB, s), GiB, s);
          } catch (std::exception const&) {
            failures.fetch_add(1);
            ready.fetch_add(1);
          }
        });
      }
      for (auto& w : workers) w.join();
    }
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(arena.allocations().size(), 1U);
    auto const i = fs.info();
    EXPECT_EQ(i.reserved_bytes, threads * GiB);
    EXPECT_EQ(i.used_bytes, 0U);
    for (auto s : streams) fs.stream_destroyed(stream_ref{s});
  }
  for (auto s : streams) EXPECT_EQ(d.cuStreamDestroy(s), CUDA_SUCCESS);
  test::sim_control::get().run_all();
  EXPECT_EQ(arena.live_bytes(), 0U);
}

}  // namespace
}  // namespace gpumem
