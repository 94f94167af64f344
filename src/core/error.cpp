#include <gpumem/detail/driver_api.hpp>
#include <gpumem/error.hpp>

#include <string>

namespace gpumem {

const char* result_name(CUresult r) noexcept {
  // The common codes by name without a driver; the driver names the rest.
  switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_DEINITIALIZED: return "CUDA_ERROR_DEINITIALIZED";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    default: break;
  }
  auto const& d = detail::driver();
  const char* name = nullptr;
  if (d.cuGetErrorName != nullptr && d.cuGetErrorName(r, &name) == CUDA_SUCCESS && name != nullptr) { return name; }
  return "CUDA_ERROR_UNKNOWN";
}

void throw_on_error(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  std::string msg = std::string{"gpumem: "} + call + " failed: " + result_name(r);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) throw out_of_memory{std::move(msg)};
  throw cuda_error{r, msg};
}

}  // namespace gpumem
