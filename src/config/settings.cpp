// Classification of chain entries and names of the settings enums (settings.hpp).

#include <gpumem/config/settings.hpp>

#include <type_traits>

namespace gpumem::config {

resource_role role_of(resource_options const& options) noexcept {
  return std::visit(
      [](auto const& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, cuda_spec> || std::is_same_v<T, async_spec> ||
                      std::is_same_v<T, managed_spec>) {
          return resource_role::device;
        } else if constexpr (std::is_same_v<T, pool_spec> || std::is_same_v<T, binning_spec> ||
                             std::is_same_v<T, fixed_size_spec>) {
          return resource_role::caching;
        } else {
          return resource_role::adaptor;
        }
      },
      options);
}

bool caches_memory(resource_options const& options) noexcept {
  return role_of(options) == resource_role::caching || std::holds_alternative<async_spec>(options);
}

std::string_view to_string(sync_mode const m) noexcept { return m == sync_mode::safe ? "safe" : "stream"; }
std::string_view to_string(on_error const e) noexcept { return e == on_error::fail ? "fail" : "passthrough"; }

}  // namespace gpumem::config
