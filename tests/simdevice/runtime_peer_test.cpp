// Peer access and peer copies through the libcudart.so.13 stand-in.

#include "support/sim_control.hpp"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

namespace gpumem::test {
namespace {

class RuntimePeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
    if (!sim.present()) GTEST_SKIP() << "needs the simulated device";
    int n = 0;
    ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
    ASSERT_GE(n, 2);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    sim.reset_violations();
  }
  void TearDown() override {
    if (!sim.present()) return;
    EXPECT_EQ(sim.live_allocations(0), 0U);
    EXPECT_EQ(sim.live_allocations(1), 0U);
    EXPECT_EQ(sim.violations(), 0);
  }
  sim_control& sim = sim_control::get();
};

TEST_F(RuntimePeerTest, CanAccessAndEnableFollowTheDocumentedCodes) {
  int can = -1;
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
  EXPECT_EQ(can, 1);
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 1, 1), cudaSuccess);
  EXPECT_EQ(can, 0);
  EXPECT_EQ(cudaDeviceCanAccessPeer(nullptr, 0, 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);  // the current device
  EXPECT_EQ(cudaDeviceEnablePeerAccess(5, 0), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 3), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
  ASSERT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  EXPECT_EQ(cudaGetLastError(), cudaErrorPeerAccessAlreadyEnabled);
  // Per direction: device 1 has not enabled access to device 0.
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaSuccess);
  cudaGetLastError();
}

TEST_F(RuntimePeerTest, PeerCopiesBetweenDevicesSyncAndOnAStream) {
  constexpr std::size_t n = 1 << 16;
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, n), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, n), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  std::vector<unsigned char> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(i * 7 + 1);
  ASSERT_EQ(cudaMemcpy(a, host.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpyPeerAsync(b, 1, a, 0, n, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<unsigned char> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), b, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  ASSERT_EQ(cudaMemset(b, 0x11, n / 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpyPeer(a, 0, b, 1, n / 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), a, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back[0], 0x11);
  EXPECT_EQ(back[n / 2 - 1], 0x11);
  EXPECT_EQ(back[n / 2], host[n / 2]);
  // Wrong device for a pointer, unknown device.
  EXPECT_EQ(cudaMemcpyPeer(a, 1, b, 1, 16), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyPeer(a, 0, b, 4, 16), cudaErrorInvalidDevice);
  cudaGetLastError();
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

}  // namespace
}  // namespace gpumem::test
