// detail::stream_capture_state, gpumem's one question about stream capture, and
// the resources' answer for a stream whose state the driver cannot tell
// (may_be_capturing), on the simulated device.

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/real_dlsym.hpp>
#include <gpumem/detail/stream_ordering.hpp>

#include <support/sim_control.hpp>

#include <gtest/gtest.h>

#include <cstdint>

namespace gpumem::detail {
namespace {

class CaptureState : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::sim_control::get().present() || !driver_available()) { GTEST_SKIP() << "needs the simulated device"; }
    ASSERT_EQ(ensure_context(), CUDA_SUCCESS);
    ASSERT_EQ(driver().cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (s_ != nullptr) { EXPECT_EQ(driver().cuStreamDestroy(s_), CUDA_SUCCESS); }
  }
  template <class F>
  static F lookup(char const* name) {
    return reinterpret_cast<F>(real_dlsym()(driver().handle, name));
  }
  CUstream s_{};
};

TEST_F(CaptureState, NoneCapturingAndUnknownAreTold) {
  auto const begin = lookup<CUresult (*)(CUstream, CUstreamCaptureMode)>("cuStreamBeginCapture_v2");
  auto const end = lookup<CUresult (*)(CUstream, CUgraph*)>("cuStreamEndCapture");
  auto const destroy_graph = lookup<CUresult (*)(CUgraph)>("cuGraphDestroy");
  ASSERT_NE(begin, nullptr);
  ASSERT_NE(end, nullptr);

  EXPECT_EQ(stream_capture_state(s_), capture_state::none);
  EXPECT_EQ(stream_capture_state(reinterpret_cast<CUstream>(legacy_stream_handle)), capture_state::none);
  EXPECT_FALSE(may_be_capturing(s_));

  ASSERT_EQ(begin(s_, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(stream_capture_state(s_), capture_state::capturing);
  EXPECT_TRUE(may_be_capturing(s_));
  CUgraph g = nullptr;
  ASSERT_EQ(end(s_, &g), CUDA_SUCCESS);
  if (g != nullptr && destroy_graph != nullptr) { EXPECT_EQ(destroy_graph(g), CUDA_SUCCESS); }
  EXPECT_EQ(stream_capture_state(s_), capture_state::none);

  // A handle the driver does not know: it cannot say, and a resource leaves it alone.
  auto const made_up = reinterpret_cast<CUstream>(std::uintptr_t{0x7f00dead0000});
  EXPECT_EQ(stream_capture_state(made_up), capture_state::unknown);
  EXPECT_TRUE(may_be_capturing(made_up));
}

TEST_F(CaptureState, NoCurrentContextMeansNothingThisThreadNamesCaptures) {
  CUcontext saved = nullptr;
  ASSERT_EQ(driver().cuCtxGetCurrent(&saved), CUDA_SUCCESS);
  ASSERT_EQ(driver().cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(stream_capture_state(reinterpret_cast<CUstream>(legacy_stream_handle)), capture_state::none);
  ASSERT_EQ(driver().cuCtxSetCurrent(saved), CUDA_SUCCESS);
}

}  // namespace
}  // namespace gpumem::detail
