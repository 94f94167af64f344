#include "device.hpp"

#include <cuda.h>
#include <dlfcn.h>

#include <chrono>
#include <stdexcept>
#include <thread>

namespace gpumem_compare {
namespace {

// gpumem_compare_spin(u64* out, u64 cycles): spin until `cycles` clock64 ticks passed,
// then thread 0 stores the clock. PTX ISA 7.0 for sm_70: every driver since CUDA 11
// JIT-compiles it for the GPU it runs on.
constexpr char spin_ptx[] = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry gpumem_compare_spin(.param .u64 out_param, .param .u64 cycles_param)
{
  .reg .pred %p<3>;
  .reg .b32 %r<2>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out_param];
  ld.param.u64 %rd2, [cycles_param];
  mov.u64 %rd3, %clock64;
  mov.u64 %rd4, %rd3;
$SPIN:
  sub.s64 %rd5, %rd4, %rd3;
  setp.ge.u64 %p1, %rd5, %rd2;
  @%p1 bra $DONE;
  mov.u64 %rd4, %clock64;
  bra.uni $SPIN;
$DONE:
  mov.u32 %r1, %tid.x;
  setp.ne.s32 %p2, %r1, 0;
  @%p2 bra $END;
  cvta.to.global.u64 %rd6, %rd1;
  st.global.u64 [%rd6], %rd4;
$END:
  ret;
}
)";

using module_load_fn = CUresult (*)(CUmodule*, void const*);
using get_function_fn = CUresult (*)(CUfunction*, CUmodule, char const*);
using launch_kernel_fn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      CUstream, void**, void**);

void spin_on_host(void* arg) {
  auto const seconds = *static_cast<double*>(arg);
  auto const end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {}
  delete static_cast<double*>(arg);
}

}  // namespace

void cuda_check(cudaError_t e, char const* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string{what} + ": " + cudaGetErrorName(e));
}

device_info open_device() {
  cuda_check(cudaSetDevice(0), "cudaSetDevice(0)");
  cuda_check(cudaFree(nullptr), "cudaFree(nullptr) (context creation)");
  device_info d;
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  d.name = prop.name;
  d.total_bytes = prop.totalGlobalMem;
  cuda_check(cudaDriverGetVersion(&d.driver_version), "cudaDriverGetVersion");
  cuda_check(cudaRuntimeGetVersion(&d.runtime_version), "cudaRuntimeGetVersion");
  // The clock rate left cudaDeviceProp in CUDA 13; ask the driver (the simulated
  // runtime has no cudaDeviceGetAttribute).
  if (auto* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) {
    using attr_fn = CUresult (*)(int*, CUdevice_attribute, CUdevice);
    if (auto* get = reinterpret_cast<attr_fn>(dlsym(lib, "cuDeviceGetAttribute"))) {
      if (get(&d.clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 0) != CUDA_SUCCESS) d.clock_khz = 0;
    }
    d.simulated = dlsym(lib, "gpumemsim_present") != nullptr;
    dlclose(lib);
  }
  return d;
}

device_memory query_device_memory() {
  device_memory m;
  std::size_t free = 0, total = 0;
  cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  m.free = free;
  m.total = total;
  return m;
}

stream_set::stream_set(std::size_t n, unsigned flags) {
  streams_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    cudaStream_t s = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&s, flags), "cudaStreamCreateWithFlags");
    streams_.push_back(s);
  }
}

stream_set::~stream_set() {
  for (auto s : streams_) static_cast<void>(cudaStreamDestroy(s));
}

void stream_set::synchronize_all() const {
  for (auto s : streams_) cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

spin_launcher::spin_launcher(device_info const& dev) {
  clock_hz_ = dev.clock_khz > 0 ? dev.clock_khz * 1e3 : 1.5e9;
  how_ = "host function spinning on the stream (no module support: simulated device)";
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return;
  auto* load = reinterpret_cast<module_load_fn>(dlsym(lib, "cuModuleLoadData"));
  auto* get = reinterpret_cast<get_function_fn>(dlsym(lib, "cuModuleGetFunction"));
  launch_fn_ = dlsym(lib, "cuLaunchKernel");
  if (load == nullptr || get == nullptr || launch_fn_ == nullptr) return;
  CUmodule mod = nullptr;
  if (CUresult r = load(&mod, spin_ptx); r != CUDA_SUCCESS) {
    how_ = "host function spinning on the stream (the spin kernel's PTX did not load: CUresult " + std::to_string(r) +
           ")";
    return;
  }
  CUfunction f = nullptr;
  if (get(&f, mod, "gpumem_compare_spin") != CUDA_SUCCESS) return;
  function_ = f;
  how_ = "1-thread kernel spinning on clock64 (PTX, JIT-compiled), writes 8 bytes into its buffer";
  // The library stays loaded for the process (the runtime holds it anyway).
}

void spin_launcher::launch(stream_t stream, void* out, double seconds) const {
  if (function_ != nullptr) {
    auto cycles = static_cast<unsigned long long>(seconds * clock_hz_);
    void* args[] = {&out, &cycles};
    auto const launch = reinterpret_cast<launch_kernel_fn>(launch_fn_);
    CUresult const r = launch(static_cast<CUfunction>(function_), 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr);
    if (r != CUDA_SUCCESS) throw std::runtime_error("cuLaunchKernel(spin): CUresult " + std::to_string(r));
    return;
  }
  cuda_check(cudaLaunchHostFunc(stream, spin_on_host, new double{seconds}), "cudaLaunchHostFunc(spin)");
}

}  // namespace gpumem_compare
