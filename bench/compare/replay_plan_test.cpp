// plan_replay: the order, streams, slots and free kinds the memory-efficiency replay
// issues for a log (no device involved).
#include "replay_plan.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

namespace gpumem_compare {
namespace {

constexpr char const* gpumem_header = "Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result\n";

/// A log file that lives for one test.
class log_file {
 public:
  explicit log_file(std::string const& text) {
    path_ = ::testing::TempDir() + "replay_plan_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++) +
            ".csv";
    std::ofstream{path_} << text;
  }
  ~log_file() { std::remove(path_.c_str()); }
  log_file(log_file const&) = delete;
  log_file& operator=(log_file const&) = delete;
  [[nodiscard]] std::string const& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

/// One gpumem log row.
std::string row(int thread, long time_ns, char const* action, char const* ptr, long size, char const* stream,
                char const* entry) {
  return std::to_string(thread) + ",00:00:00.000000," + action + "," + ptr + "," + std::to_string(size) + "," + stream +
         ",0," + entry + "," + std::to_string(time_ns) + ",1,CUDA_SUCCESS\n";
}

TEST(ReplayPlan, MergesThreadsByTimeKeepingEachThreadsOrder) {
  // Thread 1's clock steps back (10 then 5): its calls keep their file order anyway.
  log_file const f{std::string{gpumem_header} + row(1, 10, "allocate", "0x1000", 100, "0", "cudaMalloc") +
                   row(1, 5, "allocate", "0x2000", 200, "0", "cudaMalloc") +
                   row(2, 7, "allocate", "0x3000", 300, "0", "cudaMalloc") +
                   row(2, 20, "free", "0x3000", 300, "0", "cudaFree")};
  auto const plan = plan_replay(f.path(), "t");
  ASSERT_EQ(plan.ops.size(), 4u);
  // Heads: thread 1 at 10, thread 2 at 7 -> thread 2 first; then thread 1's 10 and its 5
  // (file order) before thread 2's 20.
  EXPECT_EQ(plan.ops[0].bytes, 300u);
  EXPECT_EQ(plan.ops[1].bytes, 100u);
  EXPECT_EQ(plan.ops[2].bytes, 200u);
  EXPECT_EQ(plan.ops[3].what, replay_op::kind::free);
  EXPECT_EQ(plan.ops[3].slot, plan.ops[0].slot);
  EXPECT_EQ(plan.threads, 2u);
  EXPECT_EQ(plan.peak_live, 600u);
  EXPECT_EQ(plan.dialect, "gpumem");
}

TEST(ReplayPlan, MapsStreams) {
  log_file const f{std::string{gpumem_header} + row(1, 1, "allocate", "0x1000", 1, "0", "cudaMallocAsync") +
                   row(1, 2, "allocate", "0x2000", 1, "0x1", "cudaMallocAsync") +
                   row(1, 3, "allocate", "0x3000", 1, "0x2", "cudaMallocAsync") +
                   row(2, 4, "allocate", "0x4000", 1, "0x2", "cudaMallocAsync") +
                   row(1, 5, "allocate", "0x5000", 1, "0x55aa00", "cudaMallocAsync") +
                   row(2, 6, "allocate", "0x6000", 1, "0x55aa00", "cudaMallocAsync")};
  auto const plan = plan_replay(f.path(), "s");
  ASSERT_EQ(plan.ops.size(), 6u);
  EXPECT_EQ(plan.ops[0].stream, 0u);  // null stream: the legacy stream
  EXPECT_EQ(plan.ops[1].stream, 0u);  // 0x1: the legacy stream
  EXPECT_NE(plan.ops[2].stream, 0u);  // each thread's per-thread default stream is its own
  EXPECT_NE(plan.ops[3].stream, 0u);
  EXPECT_NE(plan.ops[2].stream, plan.ops[3].stream);
  EXPECT_NE(plan.ops[4].stream, 0u);  // a created stream is one stream, whichever thread names it
  EXPECT_EQ(plan.ops[4].stream, plan.ops[5].stream);
  EXPECT_EQ(plan.streams, 4u);
}

TEST(ReplayPlan, SlotsFreesAndDamage) {
  log_file const f{std::string{gpumem_header} + row(1, 1, "allocate", "0x1000", 64, "0", "cudaMalloc") +
                   row(1, 2, "allocate", "0x1000", 32, "0", "cudaMalloc") +  // its free was lost
                   row(1, 3, "free", "0x9000", 8, "0", "cudaFree") +         // never allocated
                   row(1, 4, "allocate failure", "(nil)", 1 << 30, "0", "cudaMalloc") +
                   row(1, 5, "free", "0x1000", 32, "0", "cudaFreeAsync") +
                   row(1, 6, "allocate", "0x2000", 16, "0", "cuMemAlloc_v2")};
  auto const plan = plan_replay(f.path(), "d");
  ASSERT_EQ(plan.ops.size(), 6u);
  EXPECT_EQ(plan.ops[0].what, replay_op::kind::allocate);
  EXPECT_EQ(plan.ops[1].what, replay_op::kind::free);  // the lost free, issued first
  EXPECT_EQ(plan.ops[1].slot, plan.ops[0].slot);
  EXPECT_EQ(plan.ops[1].bytes, 64u);
  EXPECT_EQ(plan.ops[2].what, replay_op::kind::allocate);
  EXPECT_EQ(plan.ops[2].bytes, 32u);
  EXPECT_EQ(plan.ops[3].what, replay_op::kind::try_allocate);
  EXPECT_EQ(plan.ops[3].bytes, std::uint64_t{1} << 30);
  EXPECT_EQ(plan.ops[4].what, replay_op::kind::free);
  EXPECT_EQ(plan.ops[4].slot, plan.ops[2].slot);
  EXPECT_FALSE(plan.ops[4].synchronous);  // cudaFreeAsync
  EXPECT_TRUE(plan.ops[0].synchronous);   // cudaMalloc
  EXPECT_TRUE(plan.ops[5].synchronous);   // cuMemAlloc_v2
  EXPECT_EQ(plan.skipped_frees, 1u);
  EXPECT_EQ(plan.allocations, 3u);
  EXPECT_EQ(plan.peak_live, 64u);
  EXPECT_LE(plan.slots, 2u);  // slots are reused once freed
}

// Pinned host and managed memory have chains of their own: the plan replays device
// memory only. A managed allocation's cudaFree is known by its pointer.
TEST(ReplayPlan, PinnedHostAndManagedRowsAreNotPlanned) {
  log_file const f{
      std::string{gpumem_header} + row(1, 1, "allocate", "0x1000", 64, "0", "cudaMalloc") +
      row(1, 2, "allocate", "0x7000", 4096, "0", "cudaMallocManaged") +
      row(1, 3, "allocate", "0x9000", 512, "0", "cudaHostAlloc") + row(1, 4, "free", "0x7000", 4096, "0", "cudaFree") +
      row(1, 5, "free", "0x9000", 512, "0", "cudaFreeHost") + row(1, 6, "free", "0x1000", 64, "0", "cudaFree")};
  auto const plan = plan_replay(f.path(), "m");
  ASSERT_EQ(plan.ops.size(), 2u);
  EXPECT_EQ(plan.ops[0].what, replay_op::kind::allocate);
  EXPECT_EQ(plan.ops[0].bytes, 64u);
  EXPECT_EQ(plan.ops[1].what, replay_op::kind::free);
  EXPECT_EQ(plan.allocations, 1u);
  EXPECT_EQ(plan.peak_live, 64u);
  EXPECT_EQ(plan.skipped_frees, 0u);
}

TEST(ReplayPlan, RmmLogsAreStreamOrdered) {
  log_file const f{
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "7,10:00:00.000001,allocate,0x7f0000000000,4096,0x0\n"
      "7,10:00:00.000002,free,0x7f0000000000,4096,0x0\n"};
  auto const plan = plan_replay(f.path(), "rmm");
  ASSERT_EQ(plan.ops.size(), 2u);
  EXPECT_EQ(plan.dialect, "rmm");
  EXPECT_FALSE(plan.ops[0].synchronous);
  EXPECT_FALSE(plan.ops[1].synchronous);
}

TEST(ReplayPlan, UnreadableLogNamesTheFile) {
  try {
    static_cast<void>(plan_replay("/nonexistent/dir/log.csv", "x"));
    FAIL() << "no exception";
  } catch (std::runtime_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("/nonexistent/dir/log.csv"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpumem_compare
