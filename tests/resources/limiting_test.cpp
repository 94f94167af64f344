// limiting_resource_adaptor: the cap is exact, counted on 256-rounded sizes,
// rolled back on upstream failure, and never exceeded under concurrency.

#include <gpumem/limiting_resource_adaptor.hpp>

#include <support/host_test_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

TEST(LimitingAdaptor, ChargesRequestsRoundedTo256) {
  EXPECT_EQ(limiting_resource_adaptor::charge(1), 256u);
  EXPECT_EQ(limiting_resource_adaptor::charge(256), 256u);
  EXPECT_EQ(limiting_resource_adaptor::charge(257), 512u);
  test::host_test_resource up;
  limiting_resource_adaptor lim{&up, 4096};
  void* p = lim.allocate(1000);
  EXPECT_EQ(lim.used_bytes(), 1024u);
  EXPECT_EQ(lim.available_bytes(), 3072u);
  lim.deallocate(p, 1000);
  EXPECT_EQ(lim.used_bytes(), 0u);
}

TEST(LimitingAdaptor, BoundaryIsExactlyAtTheCap) {
  test::host_test_resource up;
  limiting_resource_adaptor lim{&up, 1024};
  EXPECT_EQ(lim.limit(), 1024u);
  std::vector<void*> held;
  for (int i = 0; i < 4; ++i) held.push_back(lim.allocate(256));
  EXPECT_EQ(lim.used_bytes(), 1024u);
  try {
    (void)lim.allocate(1);
    FAIL() << "expected out_of_memory";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_EQ(e.code(), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_NE(what.find("limit of 1024 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("1024 in use"), std::string::npos) << what;
    EXPECT_NE(what.find("1 requested"), std::string::npos) << what;
  }
  EXPECT_EQ(up.allocate_calls(), 4);  // the refused request never reached the upstream
  lim.deallocate(held.back(), 256);
  held.pop_back();
  held.push_back(lim.allocate(256));  // exactly fills the cap again
  EXPECT_EQ(lim.used_bytes(), 1024u);
  for (void* p : held) lim.deallocate(p, 256);
  EXPECT_EQ(lim.used_bytes(), 0u);
  void* whole = lim.allocate(1024);  // one request of exactly the limit fits
  EXPECT_THROW((void)lim.allocate(1), out_of_memory);
  lim.deallocate(whole, 1024);
  EXPECT_THROW((void)lim.allocate(1025), out_of_memory);
}

TEST(LimitingAdaptor, HugeRequestsDoNotWrapAround) {
  test::host_test_resource up;
  limiting_resource_adaptor lim{&up, SIZE_MAX - 100};
  EXPECT_THROW((void)lim.allocate(SIZE_MAX), out_of_memory);
  EXPECT_THROW((void)lim.allocate(SIZE_MAX - 50), out_of_memory);
  EXPECT_EQ(lim.used_bytes(), 0u);
  EXPECT_EQ(up.allocate_calls(), 0);
}

TEST(LimitingAdaptor, UpstreamFailureRollsBackTheReservation) {
  test::host_test_resource up;
  limiting_resource_adaptor lim{&up, 4096};
  up.fail_with(CUDA_ERROR_INVALID_VALUE);
  try {
    (void)lim.allocate(4096);
    FAIL() << "expected cuda_error";
  } catch (cuda_error const& e) { EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_VALUE); }
  EXPECT_EQ(lim.used_bytes(), 0u);
  up.fail_with(CUDA_SUCCESS);
  void* p = lim.allocate(4096);
  lim.deallocate(p, 4096);
}

TEST(LimitingAdaptor, ZeroBytesIsFreeOfCharge) {
  test::host_test_resource up;
  limiting_resource_adaptor lim{&up, 0};
  EXPECT_EQ(lim.allocate(0), nullptr);
  EXPECT_EQ(lim.used_bytes(), 0u);
  EXPECT_THROW((void)lim.allocate(1), out_of_memory);
  EXPECT_THROW(limiting_resource_adaptor(nullptr, 10), logic_error);
}

TEST(LimitingAdaptor, ConcurrentThreadsNeverExceedTheCap) {
  test::host_test_resource up;
  constexpr std::size_t slots = 100;
  limiting_resource_adaptor lim{&up, slots * 256};
  constexpr int threads = 8;
  std::atomic<std::size_t> granted{0};
  std::vector<std::vector<void*>> held(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {  // 400 attempts for 100 slots
        try {
          held[static_cast<std::size_t>(t)].push_back(lim.allocate(200));
          granted.fetch_add(1);
        } catch (out_of_memory const&) {}
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(granted.load(), slots);
  EXPECT_EQ(lim.used_bytes(), slots * 256);
  EXPECT_EQ(up.live_count(), slots);
  for (auto& v : held)
    for (void* p : v) lim.deallocate(p, 200);
  EXPECT_EQ(lim.used_bytes(), 0u);
}

}  // namespace
}  // namespace gpumem
