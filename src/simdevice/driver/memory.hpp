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
  bool vmm = false;         ///< mapped by cuMemMap: base/size are the mapping
  bool host = false;        ///< page-locked host memory (cuMemHostAlloc, cuMemHostRegister)
  unsigned host_flags = 0;  ///< host: the CU_MEMHOSTALLOC_* (or CU_MEMHOSTREGISTER_*) flags
  bool registered = false;  ///< host: a cuMemHostRegister range, not an allocation
  /// The mappable range: the cuMemAddressReserve reservation for VMM memory,
  /// else the allocation itself (CU_POINTER_ATTRIBUTE_RANGE_START_ADDR/SIZE).
  std::uintptr_t range_base = 0;
  std::size_t range_size = 0;
  mem_pool* pool = nullptr;
  context* ctx = nullptr;
  std::uint64_t buffer_id = 0;
};

/// Finds the live allocation, IPC mapping or VMM mapping holding `ptr`.
bool lookup_pointer(std::uintptr_t ptr, pointer_info* out);
/// How a copy or memset touches a device range.
enum class access_kind { read, write };
/// CUDA_SUCCESS if [ptr, ptr + bytes) lies inside one allocation or IPC mapping,
/// or in VMM mappings that are contiguous and accessible for `how`.
CUresult check_device_range(std::uintptr_t ptr, std::size_t bytes, access_kind how);
/// Whether `ptr` is device memory: in a device heap or a VMM reservation.
bool is_device_address(std::uintptr_t ptr) noexcept;
/// Reports a failed free as a violation; returns CUDA_ERROR_INVALID_VALUE.
CUresult report_bad_free(free_status status, std::uintptr_t ptr, char const* entry);
/// Releases a graph's memory at cuGraphDestroy.
void dispose_graph_memory(int device, std::vector<std::uintptr_t> const& allocations,
                          std::vector<std::uintptr_t> const& frees);

/// IPC mappings opened in this process (ipc_api.cpp).
bool ipc_lookup(std::uintptr_t ptr, pointer_info* out);

std::uint64_t next_buffer_id() noexcept;

}  // namespace gpumemsim
