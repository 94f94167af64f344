// cudaMallocHost, cudaHostAlloc, cudaFreeHost, cudaHostGetDevicePointer,
// cudaHostGetFlags, cudaHostRegister, cudaHostUnregister: each one driver call
// (cuMemHostAlloc ...), as NVIDIA's runtime makes them.

#include "runtime.hpp"

#include <cstdint>

using namespace gpumemsim::rt;

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  if (pHost == nullptr) return record(cudaErrorInvalidValue);
  SIMRT_INIT();
  return record(driver().cuMemHostAlloc(pHost, size, flags));
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  if (ptr == nullptr) return record(cudaErrorInvalidValue);
  SIMRT_INIT();
  return record(driver().cuMemHostAlloc(ptr, size, 0));
}

cudaError_t cudaFreeHost(void* ptr) {
  SIMRT_INIT();
  if (ptr == nullptr) return cudaSuccess;
  return record(driver().cuMemFreeHost(ptr));
}

cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  if (pDevice == nullptr) return record(cudaErrorInvalidValue);
  SIMRT_INIT();
  CUdeviceptr d = 0;
  if (CUresult r = driver().cuMemHostGetDevicePointer(&d, pHost, flags); r != CUDA_SUCCESS) return record(r);
  *pDevice = reinterpret_cast<void*>(static_cast<std::uintptr_t>(d));
  return cudaSuccess;
}

cudaError_t cudaHostGetFlags(unsigned int* pFlags, void* pHost) {
  SIMRT_INIT();
  return record(driver().cuMemHostGetFlags(pFlags, pHost));
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  SIMRT_INIT();
  return record(driver().cuMemHostRegister(ptr, size, flags));
}

cudaError_t cudaHostUnregister(void* ptr) {
  SIMRT_INIT();
  return record(driver().cuMemHostUnregister(ptr));
}
