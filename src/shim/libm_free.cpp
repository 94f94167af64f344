// The shim needs no library but the C library (tests/shim/link_hygiene_test.cpp):
// libstdc++'s hash tables size their buckets with ceil(), which an optimizing build
// computes inline but an unoptimized one calls, and that call would make libm a
// dependency of the shim. This definition answers it inside the shim (the version
// script keeps it local), so every build type links the same way.
#include <cmath>

extern "C" double ceil(double x) noexcept {
  constexpr double two52 = 4503599627370496.0;  // from 2^52 on, every double is an integer
  if (!(__builtin_fabs(x) < two52)) return x;   // integral, infinite or NaN: itself
  double const toward_zero = static_cast<double>(static_cast<long long>(x));
  double const up = toward_zero < x ? toward_zero + 1.0 : toward_zero;
  return __builtin_copysign(up, x);  // ceil(-0.5) is -0.0
}
