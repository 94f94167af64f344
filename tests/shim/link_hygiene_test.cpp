// libgpumem_shim.so must be loadable into any process: no NEEDED on CUDA or C++
// runtime libraries, and only the interposed entry points, dlsym and the query API
// exported (readelf / nm on the built library).

#include "shim_process.hpp"

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

namespace gpumem::test {
namespace {

std::string tool_output(std::string const& cmd) {
  return run_process({"/bin/sh", "-c", cmd + " " + shim_path()}, {{"LD_PRELOAD", ""}}).output;
}

TEST(ShimLinkHygiene, NeedsOnlyTheCLibrary) {
  auto const out = tool_output("readelf -d");
  std::istringstream lines{out};
  std::set<std::string> needed;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("(NEEDED)") == std::string::npos) continue;
    auto const open = line.find('[');
    needed.insert(line.substr(open + 1, line.find(']') - open - 1));
  }
  EXPECT_EQ(needed, (std::set<std::string>{"libc.so.6", "ld-linux-x86-64.so.2"})) << out;
}

TEST(ShimLinkHygiene, ExportsOnlyHooksDlsymAndQueries) {
  auto const out = tool_output("nm -D --defined-only --format=posix");
  std::istringstream lines{out};
  std::set<std::string> exported;
  for (std::string line; std::getline(lines, line);) {
    auto const name = line.substr(0, line.find(' '));
    if (!name.empty()) exported.insert(name);
  }
  for (auto const* must : {"dlsym", "gpumem_shim_get_stats", "cudaMalloc", "cudaFree", "cudaMallocAsync",
                           "cudaFreeAsync", "cudaMallocManaged", "cudaMallocPitch", "cudaMallocFromPoolAsync",
                           "cudaMemGetInfo", "cudaPointerGetAttributes", "cudaGetDriverEntryPoint",
                           "cudaGetDriverEntryPointByVersion", "cuGetProcAddress", "cuGetProcAddress_v2",
                           "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
                           "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuMemAllocManaged", "cuMemAllocPitch_v2",
                           "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz", "cuMemGetInfo_v2",
                           "cuMemGetAddressRange_v2", "cuPointerGetAttribute", "cuPointerGetAttributes",
                           "cuStreamDestroy_v2", "cuStreamBeginCapture_v2", "cuStreamEndCapture"}) {
    EXPECT_EQ(exported.count(must), 1U) << must;
  }
  for (auto const& name : exported) {
    bool const ours = name == "dlsym" || name.starts_with("cu") || name.starts_with("gpumem_shim_");
    EXPECT_TRUE(ours) << "unexpected export " << name;
  }
}

}  // namespace
}  // namespace gpumem::test
