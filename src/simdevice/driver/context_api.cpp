// Initialisation, devices, primary contexts, contexts made by cuCtxCreate, peer access.
// Green contexts: green_context_api.cpp.

#include "pool.hpp"
#include "state.hpp"
#include "stream.hpp"
#include "vmm.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

using namespace gpumemsim;

namespace {

int attribute_value(CUdevice_attribute a, int ordinal) {
  // A table, one attribute a line: equal values on neighbouring lines are no clones.
  // NOLINTBEGIN(bugprone-branch-clone)
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18 + ordinal;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 50331648;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    // cuMemCreate/cuMemMap and friends (vmm_api.cpp), unless GPUMEM_SIM_NO_VMM=1.
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return vmm_state::supported() ? 1 : 0;
    // cuMemCreate's POSIX fd request (gpumemsim_set_posix_fd_handles can switch it off).
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
      return vmm_state::supported() && vmm_state::posix_fd_handles() != vmm_state::fd_handles::unsupported ? 1 : 0;
    default: return 0;
  }
  // NOLINTEND(bugprone-branch-clone)
}

bool valid_device(CUdevice d) { return device_at(static_cast<int>(d)) != nullptr; }

// An unknown context handle; a destroyed one is also a violation (real CUDA: undefined).
CUresult bad_context(CUcontext h, char const* entry) {
  if (destroyed_context(h)) violation("use of destroyed context %p (%s)", static_cast<void*>(h), entry);
  return CUDA_ERROR_INVALID_CONTEXT;
}

}  // namespace

CUresult cuInit(unsigned int flags) {
  SIM_ENTRY("cuInit");
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  mark_initialized();
  return state().devices.empty() ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* version) {
  SIM_ENTRY("cuDriverGetVersion");
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* dev, int ordinal) {
  SIM_ENTRY("cuDeviceGet");
  SIM_REQUIRE_INIT();
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  SIM_ENTRY("cuDeviceGetCount");
  SIM_REQUIRE_INIT();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(state().devices.size());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  SIM_ENTRY("cuDeviceGetName");
  SIM_REQUIRE_INIT();
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<std::size_t>(len), "gpumem simulated device %d", dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  SIM_ENTRY("cuDeviceGetAttribute");
  SIM_REQUIRE_INIT();
  if (value == nullptr || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *value = attribute_value(attrib, dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  SIM_ENTRY("cuDeviceTotalMem_v2");
  SIM_REQUIRE_INIT();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = device_at(dev)->heap->total();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  SIM_ENTRY("cuDeviceGetUuid_v2");
  SIM_REQUIRE_INIT();
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::memset(uuid->bytes, 0, sizeof uuid->bytes);
  std::memcpy(uuid->bytes, "gpumemsim", 9);
  uuid->bytes[15] = static_cast<char>(dev);
  return CUDA_SUCCESS;
}

namespace {

// What a primary context reset destroys: allocations, streams, events, pools
// other than the default (whose counters restart). Its green contexts' queued
// work finishes first; the green contexts themselves stay (guessed).
void reset_primary(device& d) {
  synchronize_context(&d.ctx);
  reset_context_streams(&d.ctx);
  d.heap->release_all(&d.ctx);
  d.current_pool.store(d.default_pool);
  reset_pools_of(d.ordinal);
}

}  // namespace

namespace gpumemsim {

context* retain_primary(int ordinal) {
  context& c = device_at(ordinal)->ctx;
  std::lock_guard lock(c.mutex);
  ++c.refcount;
  return &c;
}

CUresult release_primary(int ordinal) {
  device& d = *device_at(ordinal);
  bool last = false;
  {
    std::lock_guard lock(d.ctx.mutex);
    if (d.ctx.refcount == 0) return CUDA_ERROR_INVALID_CONTEXT;
    last = --d.ctx.refcount == 0;
  }
  // The last release destroys the context's resources, as the driver does.
  if (last) reset_primary(d);
  return CUDA_SUCCESS;
}

}  // namespace gpumemsim

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  SIM_ENTRY("cuDevicePrimaryCtxRetain");
  SIM_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pctx = to_handle(retain_primary(dev));
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  SIM_ENTRY("cuDevicePrimaryCtxRelease_v2");
  SIM_REQUIRE_INIT();
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return release_primary(dev);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  SIM_ENTRY("cuDevicePrimaryCtxReset_v2");
  SIM_REQUIRE_INIT();
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  reset_primary(*device_at(dev));
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  SIM_ENTRY("cuDevicePrimaryCtxGetState");
  SIM_REQUIRE_INIT();
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = device_at(dev)->ctx.active() ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  SIM_ENTRY("cuDevicePrimaryCtxSetFlags_v2");
  SIM_REQUIRE_INIT();
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return flags <= 0x1f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  SIM_ENTRY("cuCtxGetCurrent");
  SIM_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = to_handle(current_context());
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  SIM_ENTRY("cuCtxSetCurrent");
  SIM_REQUIRE_INIT();
  auto& stack = context_stack();
  if (ctx == nullptr) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  context* c = context_from_handle(ctx);
  if (c == nullptr) return bad_context(ctx, "cuCtxSetCurrent");
  if (stack.empty())
    stack.push_back(c);
  else
    stack.back() = c;
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  SIM_ENTRY("cuCtxPushCurrent_v2");
  SIM_REQUIRE_INIT();
  context* c = context_from_handle(ctx);
  if (c == nullptr) return bad_context(ctx, "cuCtxPushCurrent_v2");
  context_stack().push_back(c);
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  SIM_ENTRY("cuCtxPopCurrent_v2");
  SIM_REQUIRE_INIT();
  auto& stack = context_stack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = to_handle(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}

// ---- contexts made by cuCtxCreate -------------------------------------------

CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  SIM_ENTRY("cuCtxCreate_v4");
  SIM_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (params != nullptr) {
    // Documented: exactly one of the two may be set. Execution affinity needs MPS and
    // CIG a graphics client, neither of which the sim has (guessed code).
    if ((params->execAffinityParams == nullptr) == (params->cigParams == nullptr)) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  constexpr unsigned known = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_COREDUMP_ENABLE |
                             CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS;
  unsigned const sched = flags & CU_CTX_SCHED_MASK;
  if ((flags & ~known) != 0 || (sched & (sched - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  context* c = create_context(dev);
  context_stack().push_back(c);  // documented: current to the calling thread, the old one below it
  *pctx = to_handle(c);
  return CUDA_SUCCESS;
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  SIM_ENTRY("cuCtxDestroy_v2");
  SIM_REQUIRE_INIT();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;  // guessed
  context* c = context_from_handle(ctx);
  if (c == nullptr) return bad_context(ctx, "cuCtxDestroy_v2");
  // Guessed: primary contexts are released, green ones destroyed with cuGreenCtxDestroy.
  if (c->primary || c->green != nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // Its work finishes, its streams and events go, its memory is freed.
  run_context(c);
  reset_context_streams(c);
  std::vector<allocation> released;
  device_at(c->device)->heap->release_all(c, &released);
  for (allocation const& a : released) {
    if (a.pool != nullptr) a.pool->on_free(a.size);
  }
  {
    std::lock_guard lock(c->mutex);
    c->refcount = 0;
    c->destroyed = true;
  }
  // Documented: popped from the calling thread's stack; other threads that still
  // have it current get CUDA_ERROR_CONTEXT_IS_DESTROYED.
  std::erase(context_stack(), c);
  return CUDA_SUCCESS;
}

// ---- peer access ------------------------------------------------------------

CUresult cuDeviceCanAccessPeer(int* can_access, CUdevice dev, CUdevice peer) {
  SIM_ENTRY("cuDeviceCanAccessPeer");
  SIM_REQUIRE_INIT();
  if (can_access == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev) || !valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
  *can_access = dev != peer ? 1 : 0;  // every pair of simulated devices is linked; a device is not its own peer
  return CUDA_SUCCESS;
}

namespace {

std::uint64_t device_bit(int device) { return std::uint64_t{1} << static_cast<unsigned>(device); }

}  // namespace

CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  SIM_ENTRY("cuCtxEnablePeerAccess");
  context* c = nullptr;
  if (CUresult r = require_context(&c); r != CUDA_SUCCESS) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  context* p = context_from_handle(peer);
  if (p == nullptr) return bad_context(peer, "cuCtxEnablePeerAccess");
  if (p->device == c->device) return CUDA_ERROR_INVALID_DEVICE;  // documented: cannot access itself as a peer
  std::lock_guard lock(c->mutex);
  if ((c->peers & device_bit(p->device)) != 0) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  c->peers |= device_bit(p->device);
  return CUDA_SUCCESS;
}

CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  SIM_ENTRY("cuCtxDisablePeerAccess");
  context* c = nullptr;
  if (CUresult r = require_context(&c); r != CUDA_SUCCESS) return r;
  context* p = context_from_handle(peer);
  if (p == nullptr) return bad_context(peer, "cuCtxDisablePeerAccess");
  std::lock_guard lock(c->mutex);
  if ((c->peers & device_bit(p->device)) == 0) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  c->peers &= ~device_bit(p->device);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* dev) {
  SIM_ENTRY("cuCtxGetDevice");
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  context* c = nullptr;
  if (CUresult r = require_context(&c); r != CUDA_SUCCESS) return r;
  *dev = c->device;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() {
  SIM_ENTRY("cuCtxSynchronize");
  context* c = nullptr;
  if (CUresult r = require_context(&c); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_context_sync(c); r != CUDA_SUCCESS) return r;
  synchronize_context(c);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  SIM_ENTRY("cuCtxGetApiVersion");
  SIM_REQUIRE_INIT();
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx != nullptr && context_from_handle(ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 13000;
  return CUDA_SUCCESS;
}

namespace {

CUresult error_name(CUresult error, const char** str) {
  switch (error) {
#define SIM_ERROR_NAME(e) \
  case e: *str = #e; return CUDA_SUCCESS;
    SIM_ERROR_NAME(CUDA_SUCCESS)
    SIM_ERROR_NAME(CUDA_ERROR_INVALID_VALUE)
    SIM_ERROR_NAME(CUDA_ERROR_OUT_OF_MEMORY)
    SIM_ERROR_NAME(CUDA_ERROR_NOT_INITIALIZED)
    SIM_ERROR_NAME(CUDA_ERROR_DEINITIALIZED)
    SIM_ERROR_NAME(CUDA_ERROR_NO_DEVICE)
    SIM_ERROR_NAME(CUDA_ERROR_INVALID_DEVICE)
    SIM_ERROR_NAME(CUDA_ERROR_INVALID_CONTEXT)
    SIM_ERROR_NAME(CUDA_ERROR_CONTEXT_IS_DESTROYED)
    SIM_ERROR_NAME(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
    SIM_ERROR_NAME(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)
    SIM_ERROR_NAME(CUDA_ERROR_INVALID_HANDLE)
    SIM_ERROR_NAME(CUDA_ERROR_NOT_FOUND)
    SIM_ERROR_NAME(CUDA_ERROR_NOT_READY)
    SIM_ERROR_NAME(CUDA_ERROR_ILLEGAL_STATE)
    SIM_ERROR_NAME(CUDA_ERROR_NOT_SUPPORTED)
    SIM_ERROR_NAME(CUDA_ERROR_NOT_PERMITTED)
    SIM_ERROR_NAME(CUDA_ERROR_ALREADY_MAPPED)
    SIM_ERROR_NAME(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    SIM_ERROR_NAME(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    SIM_ERROR_NAME(CUDA_ERROR_STREAM_CAPTURE_MERGE)
    SIM_ERROR_NAME(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)
    SIM_ERROR_NAME(CUDA_ERROR_STREAM_CAPTURE_UNJOINED)
    SIM_ERROR_NAME(CUDA_ERROR_STREAM_CAPTURE_ISOLATION)
    SIM_ERROR_NAME(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
    SIM_ERROR_NAME(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
    SIM_ERROR_NAME(CUDA_ERROR_INVALID_RESOURCE_TYPE)
    SIM_ERROR_NAME(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION)
    SIM_ERROR_NAME(CUDA_ERROR_UNKNOWN)
#undef SIM_ERROR_NAME
    default: *str = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

CUresult cuGetErrorName(CUresult error, const char** str) {
  SIM_ENTRY("cuGetErrorName");
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return error_name(error, str);
}

CUresult cuGetErrorString(CUresult error, const char** str) {
  SIM_ENTRY("cuGetErrorString");
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *str = "no error"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *str = "invalid argument"; return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY: *str = "out of memory"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED: *str = "initialization error"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_CONTEXT: *str = "invalid device context"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_HANDLE: *str = "invalid resource handle"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_READY: *str = "device not ready"; return CUDA_SUCCESS;
    default: break;
  }
  // Everything else: the name is a readable enough description.
  return error_name(error, str);
}
