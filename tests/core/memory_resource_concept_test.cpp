// Every gpumem resource models libcu++'s stream-ordered memory-resource concept
// (include/gpumem/memory_resource_concept.hpp keeps the CCCL-version spelling),
// and a type-erased cuda::mr reference to one allocates through it.
#include <gpumem/async_memory_resource.hpp>
#include <gpumem/binning_memory_resource.hpp>
#include <gpumem/cuda_memory_resource.hpp>
#include <gpumem/fixed_size_memory_resource.hpp>
#include <gpumem/limiting_resource_adaptor.hpp>
#include <gpumem/logging_resource_adaptor.hpp>
#include <gpumem/managed_memory_resource.hpp>
#include <gpumem/pool_memory_resource.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>
#include <gpumem/tracking_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include "support/host_test_resource.hpp"

namespace gpumem {
namespace {

template <class R>
constexpr bool models_device_async_resource =
    cuda::mr::async_resource<R>&& cuda::mr::async_resource_with<R, cuda::mr::device_accessible>;

static_assert(models_device_async_resource<device_memory_resource>);
static_assert(models_device_async_resource<cuda_memory_resource>);
static_assert(models_device_async_resource<async_memory_resource>);
static_assert(models_device_async_resource<managed_memory_resource>);
static_assert(models_device_async_resource<pool_memory_resource>);
static_assert(models_device_async_resource<fixed_size_memory_resource>);
static_assert(models_device_async_resource<binning_memory_resource>);
static_assert(models_device_async_resource<statistics_resource_adaptor>);
static_assert(models_device_async_resource<limiting_resource_adaptor>);
static_assert(models_device_async_resource<tracking_resource_adaptor>);
static_assert(models_device_async_resource<logging_resource_adaptor>);

TEST(MemoryResourceConcept, TypeErasedReferenceAllocatesThroughTheResource) {
  test::host_test_resource upstream;
  statistics_resource_adaptor stats{&upstream};
  device_async_resource_ref ref{stats};
  stream_ref const s{};
  void* p = ref.allocate_async(1000, 256, s);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0U);
  EXPECT_EQ(stats.bytes().current, 1000);
  EXPECT_EQ(stats.allocations().current, 1);
  ref.deallocate_async(p, 1000, 256, s);
  EXPECT_EQ(stats.bytes().current, 0);
  EXPECT_THROW((void)ref.allocate_async(16, 512, s), logic_error);  // alignment above 256 is refused
}

}  // namespace
}  // namespace gpumem
