// Virtual memory management: cuMemGetAllocationGranularity, cuMemAddressReserve/
// Free, cuMemCreate/Release, cuMemMap/Unmap, cuMemSetAccess/GetAccess,
// cuMemGetAllocationPropertiesFromHandle, cuMemRetainAllocationHandle,
// cuMemExportToShareableHandle/cuMemImportFromShareableHandle (POSIX fds only).
//
// These take no context (they name their device; PyTorch calls cuMemCreate on
// threads that never made one current), only cuInit. With GPUMEM_SIM_NO_VMM=1
// every one returns CUDA_ERROR_NOT_SUPPORTED and the device attribute says 0.

#include "stream.hpp"
#include "vmm.hpp"

#include <climits>
#include <cstdint>

using namespace gpumemsim;

namespace {

constexpr std::size_t granularity = vmm_state::granularity;

CUresult vmm_available() noexcept {
  if (CUresult r = init_status(); r != CUDA_SUCCESS) return r;
  return vmm_state::supported() ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

#define SIM_REQUIRE_VMM()                                                         \
  do {                                                                            \
    if (CUresult sim_r_ = vmm_available(); sim_r_ != CUDA_SUCCESS) return sim_r_; \
  } while (0)

bool multiple(std::size_t n) noexcept { return n != 0 && n % granularity == 0; }

// Pinned device memory on an existing device is all the sim models; host and
// NUMA locations are not simulated (the HOST VMM attributes say 0).
CUresult check_prop(CUmemAllocationProp const* prop) noexcept {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  return device_at(prop->location.id) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult check_location(CUmemLocation const& location) noexcept {
  if (location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  return device_at(location.id) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

std::uintptr_t address(CUdeviceptr p) noexcept { return static_cast<std::uintptr_t>(p); }

}  // namespace

CUresult cuMemGetAllocationGranularity(size_t* granularity_out, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  SIM_ENTRY("cuMemGetAllocationGranularity");
  SIM_REQUIRE_VMM();
  if (granularity_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_prop(prop); r != CUDA_SUCCESS) return r;
  *granularity_out = granularity;  // what NVIDIA GPUs commonly report for both (not measured here)
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  SIM_ENTRY("cuMemAddressReserve");
  SIM_REQUIRE_VMM();
  if (ptr == nullptr || !multiple(size) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;  // documented: a power of two or 0
  std::uintptr_t out = 0;
  if (CUresult r = vmm_state::get().reserve(size, alignment, address(addr), &out); r != CUDA_SUCCESS) return r;
  *ptr = static_cast<CUdeviceptr>(out);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  SIM_ENTRY("cuMemAddressFree");
  SIM_REQUIRE_VMM();
  if (ptr == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  return vmm_state::get().free_reservation(address(ptr), size);
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  SIM_ENTRY("cuMemCreate");
  SIM_REQUIRE_VMM();
  if (handle == nullptr || !multiple(size) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_prop(prop); r != CUDA_SUCCESS) return r;
  if (prop->win32HandleMetaData != nullptr) return CUDA_ERROR_INVALID_VALUE;  // documented: zero off Windows
  // POSIX fds are the only shareable handles simulated (unless switched off).
  if (prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    if (vmm_state::posix_fd_handles() != vmm_state::fd_handles::supported) return CUDA_ERROR_NOT_SUPPORTED;
  } else if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return vmm_state::get().create(prop->location.id, size, *prop, handle);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  SIM_ENTRY("cuMemRelease");
  SIM_REQUIRE_VMM();
  return vmm_state::get().release(handle);
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  SIM_ENTRY("cuMemMap");
  SIM_REQUIRE_VMM();
  if (ptr == 0 || ptr % granularity != 0 || !multiple(size) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (offset != 0) return CUDA_ERROR_INVALID_VALUE;  // documented: "currently must be zero"
  return vmm_state::get().map(address(ptr), size, handle);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  SIM_ENTRY("cuMemUnmap");
  SIM_REQUIRE_VMM();
  if (ptr == 0 || ptr % granularity != 0 || !multiple(size)) return CUDA_ERROR_INVALID_VALUE;
  // Synchronous (documented): queued work on the range finishes first.
  run_everything();
  return vmm_state::get().unmap(address(ptr), size);
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  SIM_ENTRY("cuMemSetAccess");
  SIM_REQUIRE_VMM();
  if (ptr == 0 || ptr % granularity != 0 || !multiple(size) || desc == nullptr || count == 0)
    return CUDA_ERROR_INVALID_VALUE;
  for (std::size_t i = 0; i < count; ++i) {
    if (CUresult r = check_location(desc[i].location); r != CUDA_SUCCESS) return r;
    CUmemAccess_flags const f = desc[i].flags;
    if (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
  }
  // Synchronous (documented): queued work sees the old protection.
  run_everything();
  return vmm_state::get().set_access(address(ptr), size, desc, count);
}

CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  SIM_ENTRY("cuMemGetAccess");
  SIM_REQUIRE_VMM();
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_location(*location); r != CUDA_SUCCESS) return r;
  return vmm_state::get().get_access(address(ptr), location->id, flags);
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  SIM_ENTRY("cuMemGetAllocationPropertiesFromHandle");
  SIM_REQUIRE_VMM();
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return vmm_state::get().properties(handle, prop);
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  SIM_ENTRY("cuMemRetainAllocationHandle");
  SIM_REQUIRE_VMM();
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return vmm_state::get().retain(reinterpret_cast<std::uintptr_t>(addr), handle);
}

CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType, unsigned long long flags) {
  SIM_ENTRY("cuMemExportToShareableHandle");
  SIM_REQUIRE_VMM();
  // Guessed: another handle type (the allocation cannot have requested one).
  if (shareableHandle == nullptr || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_INVALID_VALUE;
  return vmm_state::get().export_fd(handle, static_cast<int*>(shareableHandle));
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                        CUmemAllocationHandleType shHandleType) {
  SIM_ENTRY("cuMemImportFromShareableHandle");
  SIM_REQUIRE_VMM();
  if (handle == nullptr || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  // The fd travels in the pointer's value; it stays the caller's.
  auto const fd = static_cast<std::intptr_t>(reinterpret_cast<std::uintptr_t>(osHandle));
  if (fd < 0 || fd > INT_MAX) return CUDA_ERROR_INVALID_VALUE;
  return vmm_state::get().import_fd(static_cast<int>(fd), handle);
}
