#pragma once
// Contender plugins (RMM, PyTorch): shared libraries exporting gpumem_compare_plugin_v1
// (contender.hpp), loaded with RTLD_LOCAL so their dependencies (CCCL 3.5, libtorch)
// stay out of this program's symbol space. A plugin is never unloaded.

#include "contender.hpp"

#include <string>
#include <vector>

namespace gpumem_compare {

struct plugin_load {
  std::vector<contender_kind> kinds;
  std::string error;  ///< empty on success: why nothing was loaded
};

[[nodiscard]] plugin_load load_plugin(std::string const& path);

}  // namespace gpumem_compare
