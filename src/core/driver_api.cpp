#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/real_dlsym.hpp>
#include <gpumem/detail/slow_work.hpp>

#include <dlfcn.h>

#include <mutex>

namespace gpumem::detail {
namespace {

#define GPUMEM_STR2(x) #x
#define GPUMEM_STR(x) GPUMEM_STR2(x)

// The functions as libcuda exports them (only these members are used); driver()
// hands out counted_call wrappers.
constinit driver_api g_raw{};

// Each driver call gpumem makes counts as slow work (slow_work.hpp) before it goes
// to libcuda: one thread-local increment on a path that costs hundreds of ns.
template <auto Member, class Fn>
struct counted_call;
template <auto Member, class R, class... A>
struct counted_call<Member, R (*)(A...)> {
  static R call(A... a) {
    note_slow_work();
    return (g_raw.*Member)(a...);
  }
};

driver_api load() noexcept {
  driver_api api{};
  // RTLD_NOLOAD first: use the copy the program already has, whatever its path.
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    api.init_result = CUDA_ERROR_NO_DEVICE;  // what cudart reports with no driver
    return api;
  }
  api.handle = h;
  auto const sym = real_dlsym();
  if (sym == nullptr) {
    api.init_result = CUDA_ERROR_NOT_INITIALIZED;
    return api;
  }
  // An entry the driver lacks stays null in both tables (callers check).
#define GPUMEM_DRIVER_LOAD(name)                                               \
  g_raw.name = reinterpret_cast<decltype(api.name)>(sym(h, GPUMEM_STR(name))); \
  api.name = g_raw.name != nullptr ? &counted_call<&driver_api::name, decltype(api.name)>::call : nullptr;
  GPUMEM_DRIVER_FUNCTIONS(GPUMEM_DRIVER_LOAD)
#undef GPUMEM_DRIVER_LOAD
  api.init_result = api.cuInit != nullptr ? api.cuInit(0) : CUDA_ERROR_NOT_INITIALIZED;
  return api;
}

}  // namespace

constinit std::atomic<driver_api const*> g_loaded_driver{nullptr};

driver_api const& load_driver_once() noexcept {
  static driver_api const api = load();  // thread-safe once; first use, never a constructor
  g_loaded_driver.store(&api, std::memory_order_release);
  return api;
}

CUresult ensure_context() noexcept {
  auto const& d = driver();
  if (d.init_result != CUDA_SUCCESS) return d.init_result;
  CUcontext ctx = nullptr;
  if (CUresult r = d.cuCtxGetCurrent(&ctx); r != CUDA_SUCCESS) return r;
  if (ctx != nullptr) return CUDA_SUCCESS;
  CUdevice dev{};
  if (CUresult r = d.cuDeviceGet(&dev, 0); r != CUDA_SUCCESS) return r;
  if (CUresult r = d.cuDevicePrimaryCtxRetain(&ctx, dev); r != CUDA_SUCCESS) return r;
  return d.cuCtxSetCurrent(ctx);
}

int current_device() noexcept {
  if (ensure_context() != CUDA_SUCCESS) return -1;
  CUdevice dev{};
  return driver().cuCtxGetDevice(&dev) == CUDA_SUCCESS ? static_cast<int>(dev) : -1;
}

scoped_context::scoped_context(CUcontext target) noexcept {
  auto const& d = driver();
  if (d.init_result != CUDA_SUCCESS || d.cuCtxGetCurrent(&saved_) != CUDA_SUCCESS) {
    ok_ = false;
    return;
  }
  if (target != nullptr && saved_ != target) {
    ok_ = d.cuCtxSetCurrent(target) == CUDA_SUCCESS;
    switched_ = ok_;
  }
}

scoped_context::~scoped_context() {
  if (switched_) static_cast<void>(driver().cuCtxSetCurrent(saved_));
}

}  // namespace gpumem::detail
