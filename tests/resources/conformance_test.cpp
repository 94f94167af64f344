// Typed conformance suite: every resource and a few chains must honour the
// device_memory_resource contract (device_memory_resource.hpp) the same way.
//
// Runs against the simulated device or a real GPU; device memory is only touched
// through the driver (cuMemsetD8 / cuMemcpyDtoH). On the sim every test also
// checks that the driver saw no rule violation.

#include <gpumem/async_memory_resource.hpp>
#include <gpumem/binning_memory_resource.hpp>
#include <gpumem/call_context.hpp>
#include <gpumem/cuda_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/fixed_size_memory_resource.hpp>
#include <gpumem/limiting_resource_adaptor.hpp>
#include <gpumem/logging_resource_adaptor.hpp>
#include <gpumem/managed_memory_resource.hpp>
#include <gpumem/per_flag_pools_memory_resource.hpp>
#include <gpumem/pinned_host_memory_resource.hpp>
#include <gpumem/pinned_pool_memory_resource.hpp>
#include <gpumem/pool_memory_resource.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>
#include <gpumem/tracking_resource_adaptor.hpp>
#include <gpumem/vmm_memory_resource.hpp>

#include <support/device_helpers.hpp>
#include <support/host_test_resource.hpp>
#include <support/sim_control.hpp>
#include <support/temp_file.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t unbounded = SIZE_MAX;

// ---- factories: each owns one resource (or chain) built over `base` -------------
// `base` is the bottom of the chain: nullptr means a cuda_memory_resource the
// factory owns; the upstream-failure case passes a failing host double instead.
// max_request: largest request the resource serves (fixed_size: its block).
// has_upstream: false for the leaves that call the driver themselves.
// oversubscribes: managed memory may exceed the device (a real GPU pages it), so
// "too big" for it means more than the address space.

struct over_cuda {
  explicit over_cuda(device_memory_resource* b) : base{b != nullptr ? b : &cuda} {}
  cuda_memory_resource cuda;
  device_memory_resource* base;
};

struct cuda_factory {
  static constexpr std::size_t max_request = unbounded;
  static constexpr bool has_upstream = false;
  explicit cuda_factory(device_memory_resource* = nullptr) {}
  device_memory_resource& resource() { return mr; }
  cuda_memory_resource mr;
};

struct vmm_factory {
  static constexpr std::size_t max_request = unbounded;
  static constexpr bool has_upstream = false;
  explicit vmm_factory(device_memory_resource* = nullptr) {}
  device_memory_resource& resource() { return mr; }
  vmm_memory_resource mr;
};

struct async_factory {
  static constexpr std::size_t max_request = unbounded;
  static constexpr bool has_upstream = false;
  explicit async_factory(device_memory_resource* = nullptr) {}
  device_memory_resource& resource() { return mr; }
  async_memory_resource mr;
};

struct managed_factory {
  static constexpr std::size_t max_request = unbounded;
  static constexpr bool has_upstream = false;
  static constexpr bool oversubscribes = true;
  explicit managed_factory(device_memory_resource* = nullptr) {}
  device_memory_resource& resource() { return mr; }
  managed_memory_resource mr;
};

pool_options small_pool() { return pool_options{.initial_size = std::size_t{0}, .maximum_size = {}}; }

struct pool_factory : over_cuda {
  static constexpr std::size_t max_request = unbounded;
  static constexpr bool has_upstream = true;
  explicit pool_factory(device_memory_resource* b = nullptr) : over_cuda{b}, pool{base, small_pool()} {}
  device_memory_resource& resource() { return pool; }
  pool_memory_resource pool;
};

/// The pool over contiguous growth; the upstream-failure case puts the failing
/// double in vmm's place.
struct pool_over_vmm_factory {
  static constexpr std::size_t max_request = unbounded;
  static constexpr bool has_upstream = true;
  explicit pool_over_vmm_factory(device_memory_resource* b = nullptr)
      : base{b != nullptr ? b : &vmm}, pool{base, small_pool()} {}
  device_memory_resource& resource() { return pool; }
  vmm_memory_resource vmm;
  device_memory_resource* base;
  pool_memory_resource pool;
};

struct fixed_size_factory : over_cuda {
  static constexpr std::size_t max_request = std::size_t{64} << 10;
  static constexpr bool has_upstream = true;
  explicit fixed_size_factory(device_memory_resource* b = nullptr) : over_cuda{b}, fixed{base, max_request, 16} {}
  device_memory_resource& resource() { return fixed; }
  fixed_size_memory_resource fixed;
};

struct binning_factory : over_cuda {
  static constexpr std::size_t max_request = unbounded;
  static constexpr bool has_upstream = true;
  explicit binning_factory(device_memory_resource* b = nullptr)
      : over_cuda{b}, pool{base, small_pool()}, binning{&pool, 10, 16} {}
  device_memory_resource& resource() { return binning; }
  pool_memory_resource pool;
  binning_memory_resource binning;
};

struct statistics_factory : pool_factory {
  explicit statistics_factory(device_memory_resource* b = nullptr) : pool_factory{b}, stats{&pool} {}
  device_memory_resource& resource() { return stats; }
  statistics_resource_adaptor stats;
};

struct limiting_factory : pool_factory {
  explicit limiting_factory(device_memory_resource* b = nullptr)
      : pool_factory{b}, limit{&pool, std::size_t{1} << 40} {}  // far above any device: the device decides
  device_memory_resource& resource() { return limit; }
  limiting_resource_adaptor limit;
};

struct tracking_factory : pool_factory {
  explicit tracking_factory(device_memory_resource* b = nullptr) : pool_factory{b}, track{&pool} {}
  device_memory_resource& resource() { return track; }
  tracking_resource_adaptor track;
};

struct logging_factory : pool_factory {
  explicit logging_factory(device_memory_resource* b = nullptr)
      : pool_factory{b}, stats{&pool}, log{&stats, file.path()} {}
  device_memory_resource& resource() { return log; }
  test::temp_file file;
  statistics_resource_adaptor stats;
  logging_resource_adaptor log;
};

// Pinned host memory: the same contract, host pages instead of device memory. The
// host has no fixed size, so "too big" means more than the address space.
struct pinned_host_factory {
  static constexpr std::size_t max_request = unbounded;
  static constexpr bool has_upstream = false;
  static constexpr bool oversubscribes = true;
  explicit pinned_host_factory(device_memory_resource* = nullptr) {}
  device_memory_resource& resource() { return mr; }
  pinned_host_memory_resource mr{CU_MEMHOSTALLOC_DEVICEMAP};
};

struct pinned_pool_factory {
  static constexpr std::size_t max_request = unbounded;
  static constexpr bool has_upstream = true;
  static constexpr bool fences_on_free = true;
  static constexpr bool oversubscribes = true;
  explicit pinned_pool_factory(device_memory_resource* b = nullptr) : base{b != nullptr ? b : &host}, pool{base} {}
  device_memory_resource& resource() { return pool; }
  pinned_host_memory_resource host{CU_MEMHOSTALLOC_PORTABLE};
  device_memory_resource* base;
  pinned_pool_memory_resource pool;
};

struct limiting_pinned_pool_factory : pinned_pool_factory {
  explicit limiting_pinned_pool_factory(device_memory_resource* b = nullptr)
      : pinned_pool_factory{b}, limit{&pool, std::size_t{1} << 40} {}
  device_memory_resource& resource() { return limit; }
  limiting_resource_adaptor limit;
};

// Managed memory through the per-flag pools (globally attached when no flags are
// set): what the shim's managed chain is made of.
struct managed_pools_factory {
  static constexpr std::size_t max_request = unbounded;
  static constexpr bool has_upstream = false;
  static constexpr bool fences_on_free = true;
  static constexpr bool oversubscribes = true;
  explicit managed_pools_factory(device_memory_resource* = nullptr) {}
  device_memory_resource& resource() { return pools; }
  per_flag_pools_memory_resource pools{host_accessible_kind::managed};
};

// ---- fixture ------------------------------------------------------------------

template <class Factory>
class Conformance : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::driver_available()) GTEST_SKIP() << "no CUDA driver (simulated or real)";
    ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
    sim.reset_violations();
    factory = std::make_unique<Factory>();
  }
  void TearDown() override {
    factory.reset();
    if (sim.present()) { EXPECT_EQ(sim.violations(), 0) << "the simulated driver saw a rule violation"; }
  }

  device_memory_resource& mr() { return factory->resource(); }
  static std::size_t cap(std::size_t bytes) { return std::min(bytes, Factory::max_request); }

  static CUstream new_stream() {
    CUstream s{};
    EXPECT_EQ(detail::ensure_context(), CUDA_SUCCESS);  // a new thread has no context yet, as under cudart
    EXPECT_EQ(detail::driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    return s;
  }
  static void sync(CUstream s) { ASSERT_EQ(detail::driver().cuStreamSynchronize(s), CUDA_SUCCESS); }

  // Live blocks by start address, to prove no two overlap.
  struct interval_set {
    std::mutex mutex;
    std::map<std::uintptr_t, std::size_t> live;
    /// false if [p, p+n) overlaps a live block.
    bool insert(void* p, std::size_t n) {
      auto const a = reinterpret_cast<std::uintptr_t>(p);
      std::lock_guard lock{mutex};
      auto next = live.lower_bound(a);
      if (next != live.end() && next->first < a + n) return false;
      if (next != live.begin() && std::prev(next)->first + std::prev(next)->second > a) return false;
      live.emplace(a, n);
      return true;
    }
    void erase(void* p) {
      std::lock_guard lock{mutex};
      live.erase(reinterpret_cast<std::uintptr_t>(p));
    }
  };

  test::sim_control& sim = test::sim_control::get();
  std::unique_ptr<Factory> factory;
};

using all_resources = ::testing::Types<cuda_factory, vmm_factory, async_factory, managed_factory, pool_factory,
                                       pool_over_vmm_factory, fixed_size_factory, binning_factory, statistics_factory,
                                       limiting_factory, tracking_factory, logging_factory, pinned_host_factory,
                                       pinned_pool_factory, limiting_pinned_pool_factory, managed_pools_factory>;

struct factory_names {
  template <class T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, cuda_factory>)
      return "cuda";
    else if constexpr (std::is_same_v<T, vmm_factory>)
      return "vmm";
    else if constexpr (std::is_same_v<T, pool_over_vmm_factory>)
      return "pool_over_vmm";
    else if constexpr (std::is_same_v<T, async_factory>)
      return "async";
    else if constexpr (std::is_same_v<T, managed_factory>)
      return "managed";
    else if constexpr (std::is_same_v<T, pool_factory>)
      return "pool_over_cuda";
    else if constexpr (std::is_same_v<T, fixed_size_factory>)
      return "fixed_size_over_cuda";
    else if constexpr (std::is_same_v<T, binning_factory>)
      return "binning_over_pool";
    else if constexpr (std::is_same_v<T, statistics_factory>)
      return "statistics_over_pool";
    else if constexpr (std::is_same_v<T, limiting_factory>)
      return "limiting_over_pool";
    else if constexpr (std::is_same_v<T, tracking_factory>)
      return "tracking_over_pool";
    else if constexpr (std::is_same_v<T, pinned_host_factory>)
      return "pinned_host";
    else if constexpr (std::is_same_v<T, pinned_pool_factory>)
      return "pinned_pool_over_pinned_host";
    else if constexpr (std::is_same_v<T, limiting_pinned_pool_factory>)
      return "limiting_over_pinned_pool";
    else if constexpr (std::is_same_v<T, managed_pools_factory>)
      return "managed_pools";
    else
      return "logging_over_statistics_over_pool";
  }
};

TYPED_TEST_SUITE(Conformance, all_resources, factory_names);

// ---- cases --------------------------------------------------------------------

TYPED_TEST(Conformance, SizesFromOneByteUpAreAlignedAndHoldData) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{255}, std::size_t{256}, std::size_t{257}, std::size_t{4096},
                            std::size_t{65536}, std::size_t{1} << 20, (std::size_t{17} << 20) + 3}) {
    bytes = this->cap(bytes);
    void* p = this->mr().allocate(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_TRUE(is_aligned(reinterpret_cast<std::uintptr_t>(p), allocation_alignment)) << bytes;
    EXPECT_TRUE(test::fill_and_check(p, bytes, static_cast<unsigned char>(bytes % 251 + 1))) << bytes;
    this->mr().deallocate(p, bytes);
  }
}

// The shim makes the device's context current for a free only when the chain says
// its deallocate may call the driver: the leaves do; the caching resources (and
// the adaptors over them) promise not to, and keep the promise on every kind of
// free: stream-ordered, on a stream the resource never saw, and synchronous.
TYPED_TEST(Conformance, DeallocateCallsTheDriverOnlyWhereItSaysSo) {
  auto& r = this->mr();
  bool may_call = !TypeParam::has_upstream || std::is_same_v<TypeParam, logging_factory>;
  // The pinned pool fences from its frees (it waits for copies the CPU cannot see).
  if constexpr (requires { TypeParam::fences_on_free; }) may_call = true;
  EXPECT_EQ(r.deallocate_calls_driver(), may_call);
  if (r.deallocate_calls_driver() || !this->sim.present()) return;
  CUstream const s = this->new_stream();
  CUstream const other = this->new_stream();
  std::size_t const n = this->cap(1024);
  void* a = r.allocate(n, stream_ref{s});
  void* b = r.allocate(n, stream_ref{s});
  void* c = r.allocate(n, stream_ref{s});
  long const before = this->sim.call_count("*");
  r.deallocate(a, n, stream_ref{s});
  r.deallocate(b, n, stream_ref{other});
  {
    scoped_synchronous_call sync;
    r.deallocate(c, n, stream_ref{s});
  }
  EXPECT_EQ(this->sim.call_count("*"), before);
  this->sync(s);
  for (CUstream x : {s, other}) {
    r.stream_destroyed(stream_ref{x});
    EXPECT_EQ(detail::driver().cuStreamDestroy(x), CUDA_SUCCESS);
  }
}

TYPED_TEST(Conformance, ZeroBytesIsNull) {
  EXPECT_EQ(this->mr().allocate(0), nullptr);
  this->mr().deallocate(nullptr, 0);
}

TYPED_TEST(Conformance, MoreThanTheDeviceHoldsThrowsAndLeavesTheResourceUsable) {
  auto const total = test::device_total_memory();
  ASSERT_GT(total, 0u);
  std::size_t huge = total + (std::size_t{1} << 30);
  if constexpr (requires { TypeParam::oversubscribes; }) huge = std::size_t{1} << 60;
  try {
    (void)this->mr().allocate(huge);
    FAIL() << "expected an allocation failure";
  } catch (gpumem::bad_alloc const& e) {
    // A bounded resource (fixed_size) refuses oversize requests as invalid; all
    // others run out of memory.
    EXPECT_EQ(e.code(), TypeParam::max_request == unbounded ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE);
  }
  void* p = this->mr().allocate(1024);
  EXPECT_NE(p, nullptr);
  this->mr().deallocate(p, 1024);
}

TYPED_TEST(Conformance, LiveAllocationsNeverOverlapAndKeepTheirPatterns) {
  std::mt19937_64 rng{20261121};
  std::uniform_int_distribution<std::size_t> size_of{1, this->cap(std::size_t{256} << 10)};
  typename TestFixture::interval_set set;
  std::vector<std::pair<void*, std::size_t>> live;
  for (int i = 0; i < 120; ++i) {
    auto const n = size_of(rng);
    void* p = this->mr().allocate(n);
    ASSERT_TRUE(set.insert(p, n)) << "block " << i << " overlaps a live one";
    ASSERT_EQ(detail::driver().cuMemsetD8(reinterpret_cast<CUdeviceptr>(p), static_cast<unsigned char>(i + 1), n),
              CUDA_SUCCESS);
    live.emplace_back(p, n);
  }
  ASSERT_EQ(detail::driver().cuCtxSynchronize(), CUDA_SUCCESS);
  for (std::size_t i = 0; i < live.size(); ++i) {
    std::vector<unsigned char> host(live[i].second);
    ASSERT_EQ(detail::driver().cuMemcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(live[i].first), host.size()),
              CUDA_SUCCESS);
    EXPECT_TRUE(std::all_of(host.begin(), host.end(), [&](unsigned char b) { return b == i + 1; }))
        << "block " << i << " was overwritten";
  }
  for (auto [p, n] : live) this->mr().deallocate(p, n);
}

TYPED_TEST(Conformance, RandomMixedAllocateAndFree) {
  std::mt19937_64 rng{42};
  std::uniform_int_distribution<std::size_t> size_of{1, this->cap(std::size_t{1} << 20)};
  typename TestFixture::interval_set set;
  std::vector<std::pair<void*, std::size_t>> live;
  for (int op = 0; op < 3000; ++op) {
    if (live.empty() || rng() % 100 < 55) {
      auto const n = size_of(rng);
      void* p = this->mr().allocate(n);
      ASSERT_TRUE(set.insert(p, n)) << "op " << op;
      live.emplace_back(p, n);
    } else {
      auto const k = rng() % live.size();
      std::swap(live[k], live.back());
      set.erase(live.back().first);
      this->mr().deallocate(live.back().first, live.back().second);
      live.pop_back();
    }
  }
  for (auto [p, n] : live) this->mr().deallocate(p, n);
}

TYPED_TEST(Conformance, EightThreadsAtOnce) {
  constexpr int threads = 8;
  typename TestFixture::interval_set set;
  std::vector<std::thread> pool;
  std::atomic<int> failures{0};
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      CUstream s = TestFixture::new_stream();
      stream_ref const sr{s};
      std::mt19937_64 rng{static_cast<std::uint64_t>(1000 + t)};
      std::uniform_int_distribution<std::size_t> size_of{1, this->cap(std::size_t{64} << 10)};
      std::vector<std::pair<void*, std::size_t>> live;
      for (int op = 0; op < 400; ++op) {
        if (live.size() < 8 && (live.empty() || rng() % 2 == 0)) {
          auto const n = size_of(rng);
          void* p = this->mr().allocate(n, sr);
          if (!set.insert(p, n)) failures.fetch_add(1);
          live.emplace_back(p, n);
        } else {
          set.erase(live.back().first);
          this->mr().deallocate(live.back().first, live.back().second, sr);
          live.pop_back();
        }
      }
      for (auto [p, n] : live) {
        set.erase(p);
        this->mr().deallocate(p, n, sr);
      }
      if (detail::driver().cuStreamSynchronize(s) != CUDA_SUCCESS) failures.fetch_add(1);
      this->mr().stream_destroyed(sr);  // as the shim does before every cuStreamDestroy
      if (detail::driver().cuStreamDestroy(s) != CUDA_SUCCESS) failures.fetch_add(1);
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(set.live.empty());
}

TYPED_TEST(Conformance, AllocateOnStreamAFreeOnStreamB) {
  CUstream a = TestFixture::new_stream();
  CUstream b = TestFixture::new_stream();
  auto const n = this->cap(std::size_t{1} << 20);
  void* p = this->mr().allocate(n, stream_ref{a});
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(detail::driver().cuMemsetD8(reinterpret_cast<CUdeviceptr>(p), 7, n), CUDA_SUCCESS);
  TestFixture::sync(a);
  ASSERT_EQ(detail::driver().cuCtxSynchronize(), CUDA_SUCCESS);
  this->mr().deallocate(p, n, stream_ref{b});
  // Reuse from both streams afterwards: the resource must order it correctly.
  void* q = this->mr().allocate(n, stream_ref{a});
  void* r = this->mr().allocate(n, stream_ref{b});
  EXPECT_NE(q, r);
  TestFixture::sync(a);
  TestFixture::sync(b);
  EXPECT_TRUE(test::fill_and_check(q, n, 1));
  EXPECT_TRUE(test::fill_and_check(r, n, 2));
  this->mr().deallocate(q, n, stream_ref{a});
  this->mr().deallocate(r, n, stream_ref{b});
  TestFixture::sync(a);
  TestFixture::sync(b);
  this->mr().stream_destroyed(stream_ref{a});
  this->mr().stream_destroyed(stream_ref{b});
  ASSERT_EQ(detail::driver().cuStreamDestroy(a), CUDA_SUCCESS);
  ASSERT_EQ(detail::driver().cuStreamDestroy(b), CUDA_SUCCESS);
}

TYPED_TEST(Conformance, UpstreamFailureIsPropagatedWithItsCode) {
  if constexpr (!TypeParam::has_upstream) {
    GTEST_SKIP() << "a leaf resource calls the driver directly; its failures are in its own tests";
  } else {
    for (CUresult code : {CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_INVALID_VALUE}) {
      test::host_test_resource failing;
      TypeParam chain{&failing};
      failing.fail_with(code);
      CUresult seen = CUDA_SUCCESS;
      // The first requests may be served from memory cached at construction.
      for (int i = 0; i < 4096 && seen == CUDA_SUCCESS; ++i) {
        try {
          (void)chain.resource().allocate(this->cap(std::size_t{1} << 20));
        } catch (gpumem::bad_alloc const& e) { seen = e.code(); } catch (cuda_error const& e) {
          seen = e.code();
        }
      }
      EXPECT_EQ(seen, code) << result_name(code);
      failing.fail_with(CUDA_SUCCESS);
    }
  }
}

TYPED_TEST(Conformance, InfoIsConsistent) {
  auto check = [](resource_info const& i) {
    EXPECT_GE(i.reserved_bytes, i.used_bytes);
    EXPECT_LE(i.free_bytes, i.reserved_bytes);
    EXPECT_LE(i.largest_free_block, i.free_bytes);
    EXPECT_GE(i.fragmentation(), 0.0);
    EXPECT_LE(i.fragmentation(), 1.0);
  };
  auto const before = this->mr().info();
  check(before);
  auto const n = this->cap(std::size_t{3} << 20);
  void* p = this->mr().allocate(n);
  auto const during = this->mr().info();
  check(during);
  if (during.used_bytes != 0) {  // 0: the resource does not know
    EXPECT_GE(during.used_bytes, before.used_bytes + n);
  }
  this->mr().deallocate(p, n);
  ASSERT_EQ(detail::driver().cuCtxSynchronize(), CUDA_SUCCESS);
  auto const after = this->mr().info();
  check(after);
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  (void)this->mr().release();
  auto const released = this->mr().info();
  check(released);
  EXPECT_LE(released.reserved_bytes, after.reserved_bytes);
}

}  // namespace
}  // namespace gpumem
