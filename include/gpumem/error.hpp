#pragma once
// Errors raised by gpumem resources.
//
// Every failure carries the CUDA driver result that real CUDA would have given
// for the same request, so the shim can hand it back unchanged (and map it to a
// cudaError_t for runtime entry points). Exceptions never cross the shim's C
// boundary: its entry points catch them and return the code.

#include <cuda.h>

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>

namespace gpumem {

/// Name of a driver result ("CUDA_ERROR_OUT_OF_MEMORY"); works without a driver.
[[nodiscard]] const char* result_name(CUresult r) noexcept;

/// Base of allocation failures. `code()` is the CUresult real CUDA would return.
class bad_alloc : public std::bad_alloc {
 public:
  bad_alloc(CUresult code, std::string msg) : code_{code}, msg_{std::move(msg)} {}
  [[nodiscard]] const char* what() const noexcept override { return msg_.c_str(); }
  [[nodiscard]] CUresult code() const noexcept { return code_; }

 private:
  CUresult code_;
  std::string msg_;
};

/// The resource (or a limit, or the device) cannot satisfy the request.
/// Always CUDA_ERROR_OUT_OF_MEMORY.
class out_of_memory : public bad_alloc {
 public:
  explicit out_of_memory(std::string msg) : bad_alloc{CUDA_ERROR_OUT_OF_MEMORY, std::move(msg)} {}
};

/// A CUDA call made by a resource failed with something other than out-of-memory.
class cuda_error : public std::runtime_error {
 public:
  cuda_error(CUresult code, const std::string& msg) : std::runtime_error{msg}, code_{code} {}
  [[nodiscard]] CUresult code() const noexcept { return code_; }

 private:
  CUresult code_;
};

/// Wrong use of the library or a bad configuration value (CUDA_ERROR_INVALID_VALUE).
class logic_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
  [[nodiscard]] static constexpr CUresult code() noexcept { return CUDA_ERROR_INVALID_VALUE; }
};

/// Throws cuda_error (or out_of_memory for CUDA_ERROR_OUT_OF_MEMORY) unless r is CUDA_SUCCESS.
/// `call` names the failing call for the message.
void throw_on_error(CUresult r, const char* call);

}  // namespace gpumem

/// Check a driver call made through gpumem::detail::driver(); throws on failure.
#define GPUMEM_CU_TRY(expr) ::gpumem::throw_on_error((expr), #expr)
