// libgpumem_shim.so must be loadable into any process: no NEEDED on CUDA or C++
// runtime libraries, and exactly the hooks of hook_table.hpp, dlsym and the query
// API exported (readelf / nm on the built library): no signal function of the C
// library is interposed.

#include "shim_process.hpp"
// The shim's hook list (X-macro), shared with the shim's build.
#include "../../src/shim/hooks/hook_table.hpp"

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

// The hook list the shim is built from (its version script is generated from it).
std::set<std::string> hook_names() {
  std::set<std::string> names;
#define GPUMEM_TEST_HOOK_NAME(n) names.insert(#n);
  GPUMEM_ALL_HOOKS(GPUMEM_TEST_HOOK_NAME)
#undef GPUMEM_TEST_HOOK_NAME
  return names;
}

// Exported besides the hooks (documented in exports.map.in and gpumem_shim.h).
std::set<std::string> const extra_exports{"dlsym",
                                          "gpumem_shim_get_stats",
                                          "gpumem_shim_describe_chain",
                                          "gpumem_shim_trim",
                                          "gpumem_shim_get_host_stats",
                                          "gpumem_shim_get_managed_stats"};

TEST(ShimLinkHygiene, HookListHasEveryTableEntryOnce) {
  EXPECT_EQ(hook_names().size(), static_cast<std::size_t>(shim::hook_id::count))
      << "GPUMEM_ALL_HOOKS must name every hook of the table once";
}

TEST(ShimLinkHygiene, ExportsEveryHookAndOnlyTheDocumentedExtras) {
  auto const out = tool_output("nm -D --defined-only --format=posix");
  std::istringstream lines{out};
  std::set<std::string> exported;
  for (std::string line; std::getline(lines, line);) {
    auto const name = line.substr(0, line.find(' '));
    if (!name.empty()) exported.insert(name);
  }
  auto const hooks = hook_names();
  for (auto const& hook : hooks) EXPECT_EQ(exported.count(hook), 1U) << "hook not exported: " << hook;
  for (auto const& extra : extra_exports) EXPECT_EQ(exported.count(extra), 1U) << "not exported: " << extra;
  for (auto const& name : exported) {
    EXPECT_TRUE(hooks.count(name) == 1 || extra_exports.count(name) == 1) << "unexpected export " << name;
  }
  EXPECT_EQ(exported.size(), hooks.size() + extra_exports.size()) << out;
}

}  // namespace
}  // namespace gpumem::test
