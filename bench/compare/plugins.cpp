#include "plugins.hpp"

#include <dlfcn.h>

namespace gpumem_compare {

plugin_load load_plugin(std::string const& path) {
  plugin_load out;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    char const* e = dlerror();
    out.error = "dlopen: " + std::string{e != nullptr ? e : "unknown error"};
    return out;
  }
  auto* entry = reinterpret_cast<gpumem_compare_plugin_fn>(dlsym(lib, GPUMEM_COMPARE_PLUGIN_SYMBOL));
  if (entry == nullptr) {
    out.error = "no " GPUMEM_COMPARE_PLUGIN_SYMBOL " in it (not a gpumem_compare plugin)";
    return out;
  }
  contender_kind const* kinds = nullptr;
  int count = 0;
  char const* why = nullptr;
  if (entry(plugin_abi_version, &kinds, &count, &why) != 0 || kinds == nullptr || count <= 0) {
    out.error = why != nullptr ? why : "the plugin refused to start";
    return out;
  }
  out.kinds.assign(kinds, kinds + count);
  return out;
}

}  // namespace gpumem_compare
