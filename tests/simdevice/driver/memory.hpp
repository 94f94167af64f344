#pragma once
// Helpers shared by the allocation, copy and IPC entry points.

#include "device_heap.hpp"
#include "state.hpp"

#include <cstdint>

namespace gpumemsim {

/// What a pointer query knows about an address.
struct pointer_info {
  int device = -1;
  std::uintptr_t base = 0;
  std::size_t size = 0;
  bool managed = false;
  bool ipc_mapped = false;
  mem_pool* pool = nullptr;
  context* ctx = nullptr;
  std::uint64_t buffer_id = 0;
};

/// Finds the live allocation or IPC mapping holding `ptr`.
bool lookup_pointer(std::uintptr_t ptr, pointer_info* out);
/// CUDA_SUCCESS if [ptr, ptr + bytes) lies inside one allocation or IPC mapping.
CUresult check_device_range(std::uintptr_t ptr, std::size_t bytes);
/// Reports a failed free as a violation; returns CUDA_ERROR_INVALID_VALUE.
CUresult report_bad_free(free_status status, std::uintptr_t ptr, char const* entry);
/// Releases a graph's memory at cuGraphDestroy.
void dispose_graph_memory(int device, std::vector<std::uintptr_t> const& allocations,
                          std::vector<std::uintptr_t> const& frees);

/// IPC mappings opened in this process (ipc_api.cpp).
bool ipc_lookup(std::uintptr_t ptr, pointer_info* out);

std::uint64_t next_buffer_id() noexcept;

}  // namespace gpumemsim
