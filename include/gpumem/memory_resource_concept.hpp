#pragma once
// The one place that knows libcu++'s memory-resource spelling.
//
// CCCL 3.0.x (CUDA 13.0) keeps cuda::mr behind
// LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE and spells the stream-ordered
// calls allocate_async(bytes, align, stream) / deallocate_async(p, bytes, align,
// stream). CCCL 3.1 renamed them to allocate(stream, bytes, align) /
// deallocate(stream, p, bytes, align). Resources derive from
// device_memory_resource, which provides both spellings through the macros here;
// code elsewhere names only gpumem:: types.

#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif
#include <cuda/memory_resource>
#include <cuda/std/version>

#if defined(CCCL_MAJOR_VERSION) && (CCCL_MAJOR_VERSION > 3 || (CCCL_MAJOR_VERSION == 3 && CCCL_MINOR_VERSION >= 1))
#define GPUMEM_CCCL_STREAM_FIRST 1  // CCCL >= 3.1: allocate(stream, bytes, align)
#else
#define GPUMEM_CCCL_STREAM_FIRST 0  // CCCL 3.0: allocate_async(bytes, align, stream)
#endif

namespace gpumem {
/// Property tag: memory a kernel on the device can access.
using device_accessible = cuda::mr::device_accessible;
/// A type-erased, non-owning reference to any stream-ordered device resource.
using device_async_resource_ref = cuda::mr::async_resource_ref<cuda::mr::device_accessible>;
}  // namespace gpumem
