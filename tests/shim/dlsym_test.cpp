// The shim's dlsym answers every lookup as glibc's would (who is asking decides what
// RTLD_NEXT and RTLD_DEFAULT find) and hands out its hooks for CUDA entry points
// whichever way they are looked up; a sanitizer runtime, which resolves its
// interceptors through dlsym before any library is initialised, starts under it.

#include "shim_process.hpp"

#include <gtest/gtest.h>

#include <string>

namespace gpumem::test {
namespace {

TEST(ShimDlsym, AnswersAsGlibcWouldForEveryCaller) {
  std::string const dir = build_dir() + "/tests/shim/programs";
  for (std::string const& preload : {shim_path(), std::string{}}) {  // with the shim, and the reference without
    auto const r = run_process({program("shim_dlsym_app"), dir}, {{"LD_PRELOAD", preload}});
    EXPECT_EQ(r.exit_code, 0) << (preload.empty() ? "without the shim:\n" : "under the shim:\n") << r.output;
    EXPECT_NE(r.output.find("PASS dlsym"), std::string::npos) << r.output;
  }
}

TEST(ShimDlsym, SameAnswersWhenTheShimIsDisabled) {
  auto const r = run_process({program("shim_dlsym_app"), build_dir() + "/tests/shim/programs"},
                             {{"LD_PRELOAD", shim_path()}, {"GPUMEM_DISABLE", "1"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(ShimDlsym, AnAddressSanitizerProgramStartsUnderTheShim) {
  std::string const asan = GPUMEM_TEST_LIBASAN;
  if (asan.empty()) GTEST_SKIP() << "no GCC AddressSanitizer runtime here";
  auto const r = run_process({program("shim_asan_app")},
                             {{"LD_PRELOAD", asan + " " + shim_path()}, {"ASAN_OPTIONS", "detect_leaks=0"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS asan"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gpumem::test
