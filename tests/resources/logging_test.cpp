// logging_resource_adaptor: rows parsed back field by field.

#include <gpumem/call_context.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/os_thread.hpp>
#include <gpumem/logging_resource_adaptor.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>

#include <support/csv_log_reader.hpp>
#include <support/host_test_resource.hpp>
#include <support/temp_file.hpp>

#include <gtest/gtest.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <sstream>
#include <string>

namespace gpumem {
namespace {

stream_ref stream(std::uintptr_t h) { return stream_ref{reinterpret_cast<CUstream>(h)}; }

std::string hex(void const* p) {
  std::ostringstream s;
  s << "0x" << std::hex << reinterpret_cast<std::uintptr_t>(p);
  return s.str();
}

enum col { thread, time, action, pointer, size, strm, device, entry, time_ns, duration, result };

TEST(LoggingAdaptor, OneRowPerEventParsedBackFieldByField) {
  test::temp_file tmp;
  test::host_test_resource up;
  statistics_resource_adaptor stats{&up};
  auto const tid = std::to_string(::syscall(SYS_gettid));
  auto const before = detail::realtime_ns();
  void* p = nullptr;
  {
    logging_resource_adaptor log{&stats, tmp.path()};
    EXPECT_EQ(log.get_upstream(), &stats);
    EXPECT_EQ(log.writer().path(), tmp.path());
    {
      scoped_call_context ctx{"cuMemAllocAsync", 2};
      p = log.allocate(4096, stream(0x5));
    }
    up.fail_with(CUDA_ERROR_OUT_OF_MEMORY);
    {
      scoped_call_context ctx{"cudaMalloc", 1};
      EXPECT_THROW((void)log.allocate(1 << 20, stream(0)), out_of_memory);
    }
    up.fail_with(CUDA_ERROR_INVALID_VALUE);
    {
      scoped_call_context ctx{"cudaMalloc", 1};
      EXPECT_THROW((void)log.allocate(77, stream(0x1)), cuda_error);
    }
    {
      scoped_call_context ctx{"cudaFreeAsync", 2, false};
      log.deallocate(p, 4096, stream(0x2));
    }
    EXPECT_EQ(stats.failed_allocations(), 2);  // failures reached the upstream and were rethrown
  }
  auto const after = detail::realtime_ns();

  auto const c = test::read_csv_log(tmp.path());
  EXPECT_EQ(c.header + "\n", csv_log_header);
  EXPECT_EQ(c.nul_bytes, 0u);
  EXPECT_EQ(c.bad_lines, 0u);
  ASSERT_EQ(c.rows.size(), 4u);
  auto const& r0 = c.rows[0];
  EXPECT_EQ(r0[thread], tid);
  EXPECT_EQ(r0[action], "allocate");
  EXPECT_EQ(r0[pointer], hex(p));
  EXPECT_EQ(r0[size], "4096");
  EXPECT_EQ(r0[strm], "0x5");
  EXPECT_EQ(r0[device], "2");
  EXPECT_EQ(r0[entry], "cuMemAllocAsync");
  EXPECT_EQ(r0[result], "CUDA_SUCCESS");

  auto const& r1 = c.rows[1];
  EXPECT_EQ(r1[action], "allocate failure");
  EXPECT_EQ(r1[pointer], "(nil)");
  EXPECT_EQ(r1[size], "1048576");
  EXPECT_EQ(r1[strm], "0");
  EXPECT_EQ(r1[device], "1");
  EXPECT_EQ(r1[entry], "cudaMalloc");
  EXPECT_EQ(r1[result], "CUDA_ERROR_OUT_OF_MEMORY");

  EXPECT_EQ(c.rows[2][action], "allocate failure");
  EXPECT_EQ(c.rows[2][strm], "0x1");
  EXPECT_EQ(c.rows[2][result], "CUDA_ERROR_INVALID_VALUE");

  auto const& r3 = c.rows[3];
  EXPECT_EQ(r3[action], "free");
  EXPECT_EQ(r3[pointer], hex(p));
  EXPECT_EQ(r3[size], "4096");
  EXPECT_EQ(r3[strm], "0x2");
  EXPECT_EQ(r3[entry], "cudaFreeAsync");
  EXPECT_EQ(r3[result], "CUDA_SUCCESS");

  std::int64_t last = before;
  for (auto const& r : c.rows) {
    auto const t = std::stoll(r[time_ns]);
    EXPECT_GE(t, last);  // one thread: rows in time order, inside the test's window
    EXPECT_LE(t, after);
    EXPECT_LE(std::stoll(r[duration]), after - before);
    last = t;
    ASSERT_EQ(r[time].size(), 15u);  // HH:MM:SS.ffffff
    EXPECT_EQ(r[time][2], ':');
    EXPECT_EQ(r[time][5], ':');
    EXPECT_EQ(r[time][8], '.');
    // The Time column is TimeNs in local time: same microseconds.
    auto const us = (t % 1'000'000'000) / 1000;
    EXPECT_EQ(std::stoll(r[time].substr(9)), us);
  }
}

TEST(LoggingAdaptor, LibraryCallsNameAllocateAndFree) {
  test::temp_file tmp;
  test::host_test_resource up;
  auto sink = std::make_shared<csv_log_writer>(tmp.path());
  logging_resource_adaptor log{&up, sink};
  EXPECT_EQ(log.sink(), sink);
  void* p = log.allocate(300);
  log.deallocate(p, 300);
  EXPECT_EQ(log.allocate(0), nullptr);  // logged as it passed through: a null allocate
  sink->close();
  auto const c = test::read_csv_log(tmp.path());
  ASSERT_EQ(c.rows.size(), 3u);
  // Device: none set in call_context, so the current device (-1 without a driver).
  auto const dev = std::to_string(detail::current_device());
  EXPECT_EQ(c.rows[0][entry], "allocate");
  EXPECT_EQ(c.rows[0][device], dev);
  EXPECT_EQ(c.rows[0][strm], "0");
  EXPECT_EQ(c.rows[1][entry], "free");
  EXPECT_EQ(c.rows[1][action], "free");
  EXPECT_EQ(c.rows[2][pointer], "(nil)");
  EXPECT_EQ(c.rows[2][size], "0");
}

TEST(LoggingAdaptor, BadArgumentsAreLogicErrors) {
  test::host_test_resource up;
  EXPECT_THROW(logging_resource_adaptor(&up, std::shared_ptr<csv_log_writer>{}), logic_error);
  EXPECT_THROW(logging_resource_adaptor(&up, std::string{"/nonexistent-gpumem-dir/log.csv"}), logic_error);
  test::temp_file tmp;
  EXPECT_THROW(logging_resource_adaptor(nullptr, tmp.path()), logic_error);
}

}  // namespace
}  // namespace gpumem
