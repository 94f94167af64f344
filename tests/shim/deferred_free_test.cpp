// deferred_free_resource_adaptor: blocks freed with cudaFree semantics wait for one
// device synchronization; stream-ordered frees pass straight through. Runs on the
// simulated device (the flush really calls cuCtxSynchronize).

#include "support/sim_control.hpp"

#include <gpumem/call_context.hpp>
#include <gpumem/deferred_free_resource_adaptor.hpp>
#include <gpumem/detail/driver_api.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <mutex>

namespace gpumem::test {
namespace {

/// Host memory with a total budget; remembers the stream of each deallocation.
class budget_resource final : public device_memory_resource {
 public:
  explicit budget_resource(std::size_t budget) : budget_{budget} {}
  ~budget_resource() override {
    for (auto& [p, n] : live_) std::free(p);
  }
  std::size_t used = 0;
  int frees = 0;
  int stream_destroyed_calls = 0;
  std::uintptr_t last_free_stream = 0xdead;

 private:
  void* do_allocate(std::size_t bytes, stream_ref) override {
    if (used + bytes > budget_) throw out_of_memory{"budget_resource: over budget"};
    void* p = std::aligned_alloc(allocation_alignment, align_up(bytes, allocation_alignment));
    live_[p] = bytes;
    used += bytes;
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, stream_ref s) noexcept override {
    ++frees;
    last_free_stream = stream_handle(s);
    used -= bytes;
    live_.erase(p);
    std::free(p);
  }
  [[nodiscard]] resource_info do_info() const override { return {used, used, 0, 0}; }
  void do_stream_destroyed(stream_ref) noexcept override { ++stream_destroyed_calls; }

  std::size_t budget_;
  std::map<void*, std::size_t> live_;
};

class DeferredFree : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(detail::ensure_context(), CUDA_SUCCESS);
    deferred_free_resource_adaptor::reset_captures();
  }
  /// A free as cudaFree makes it.
  static void sync_free(device_memory_resource& r, void* p, std::size_t n, stream_ref s = {}) {
    scoped_call_context ctx{"cudaFree", 0, true};
    r.deallocate(p, n, s);
  }
  long syncs() const { return sim_control::get().call_count("cuCtxSynchronize"); }
};

TEST_F(DeferredFree, SynchronousFreesWaitForOneSyncPastTheThreshold) {
  budget_resource up{1 << 20};
  deferred_free_resource_adaptor mr{&up, 1000};
  void* a = mr.allocate(512);
  void* b = mr.allocate(512);
  long const before = syncs();
  sync_free(mr, a, 512);
  EXPECT_EQ(up.frees, 0);
  EXPECT_EQ(mr.pending_bytes(), 512U);
  sync_free(mr, b, 512);  // 1024 > 1000: one flush
  EXPECT_EQ(up.frees, 2);
  EXPECT_EQ(mr.pending_bytes(), 0U);
  EXPECT_EQ(mr.flush_count(), 1U);
  if (sim_control::get().present()) {
    EXPECT_EQ(syncs() - before, 1);
  }
}

TEST_F(DeferredFree, StreamOrderedFreesPassStraightThrough) {
  budget_resource up{1 << 20};
  deferred_free_resource_adaptor mr{&up, 1000};
  void* a = mr.allocate(512);
  mr.deallocate(a, 512, stream_ref{reinterpret_cast<cudaStream_t>(0x42)});
  EXPECT_EQ(up.frees, 1);
  EXPECT_EQ(up.last_free_stream, 0x42U);
  EXPECT_EQ(mr.pending_bytes(), 0U);
}

TEST_F(DeferredFree, OutOfMemoryFlushesAndRetriesOnce) {
  budget_resource up{1024};
  deferred_free_resource_adaptor mr{&up, std::size_t{1} << 30};
  void* a = mr.allocate(1024);
  sync_free(mr, a, 1024);
  EXPECT_EQ(mr.pending_bytes(), 1024U);
  void* b = mr.allocate(1024);  // upstream full until the pending block goes back
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(mr.flush_count(), 1U);
  EXPECT_THROW((void)mr.allocate(1024), out_of_memory);  // nothing pending: the failure stands
  mr.deallocate(b, 1024);
}

TEST_F(DeferredFree, NeverSynchronizesDuringACapture) {
  budget_resource up{1 << 20};
  deferred_free_resource_adaptor mr{&up, 100};
  void* a = mr.allocate(512);
  deferred_free_resource_adaptor::capture_begun();
  long const before = syncs();
  sync_free(mr, a, 512);  // past the threshold, but a capture is active
  EXPECT_FALSE(mr.flush());
  EXPECT_EQ(mr.pending_bytes(), 512U);
  EXPECT_EQ(up.frees, 0);
  EXPECT_EQ(syncs(), before);
  deferred_free_resource_adaptor::capture_ended();
  EXPECT_TRUE(mr.flush());
  EXPECT_EQ(up.frees, 1);
}

TEST_F(DeferredFree, PendingBytesCountAsFreeInInfo) {
  budget_resource up{1 << 20};
  deferred_free_resource_adaptor mr{&up, 1 << 20};
  void* a = mr.allocate(4096);
  sync_free(mr, a, 4096);
  auto const info = mr.info();
  EXPECT_EQ(info.used_bytes, 0U);
  EXPECT_EQ(info.free_bytes, 4096U);
  EXPECT_EQ(mr.release(), 0U);  // release flushes first
  EXPECT_EQ(up.frees, 1);
}

TEST_F(DeferredFree, PendingBlocksNeverNameADestroyedStream) {
  budget_resource up{1 << 20};
  deferred_free_resource_adaptor mr{&up, 1 << 20};
  stream_ref const s{reinterpret_cast<cudaStream_t>(0x1234)};
  void* a = mr.allocate(256, s);
  sync_free(mr, a, 256, s);
  mr.stream_destroyed(s);
  EXPECT_EQ(up.stream_destroyed_calls, 1);
  EXPECT_TRUE(mr.flush());
  EXPECT_EQ(up.last_free_stream, 0U);  // the legacy stream: after a sync, exact
}

TEST_F(DeferredFree, CaptureCountNeverGoesNegative) {
  deferred_free_resource_adaptor::capture_ended();
  EXPECT_FALSE(deferred_free_resource_adaptor::capture_active());
  deferred_free_resource_adaptor::capture_begun();
  EXPECT_EQ(deferred_free_resource_adaptor::capture_count(), 1);
  deferred_free_resource_adaptor::capture_ended();
  EXPECT_EQ(deferred_free_resource_adaptor::capture_count(), 0);
}

TEST_F(DeferredFree, RejectsANullUpstream) {
  EXPECT_THROW(deferred_free_resource_adaptor(nullptr, 1), logic_error);
}

}  // namespace
}  // namespace gpumem::test
