// Classification of chain entries and names of the settings enums (settings.hpp).

#include <gpumem/config/settings.hpp>

#include <fmt/format.h>

#include <charconv>
#include <string>
#include <system_error>
#include <variant>

namespace gpumem::config {
namespace {

// std::holds_alternative rather than std::visit: std::visit may throw (on a
// valueless variant), which these noexcept functions must not.
template <class... T>
bool holds_one_of(resource_options const& options) noexcept {
  return (std::holds_alternative<T>(options) || ...);
}

}  // namespace

resource_role role_of(resource_options const& options) noexcept {
  if (holds_one_of<cuda_spec, vmm_spec, async_spec, managed_spec>(options)) return resource_role::device;
  if (holds_one_of<pool_spec, binning_spec, fixed_size_spec>(options)) return resource_role::caching;
  return resource_role::adaptor;
}

bool caches_memory(resource_options const& options) noexcept {
  return role_of(options) == resource_role::caching || std::holds_alternative<async_spec>(options);
}

std::string release_rule::to_string() const {
  if (automatic) { return window_s == default_window_s ? std::string{"auto"} : fmt::format("auto:{}", window_s); }
  return bytes == never ? std::string{"unlimited"} : format_bytes(bytes);
}

release_rule parse_release_rule(std::string_view const text, std::string_view const what) {
  if (text == "auto") { return release_rule{}; }
  if (text.starts_with("auto:")) {
    std::string_view n = text.substr(5);
    if (n.ends_with('s')) { n.remove_suffix(1); }
    std::uint32_t seconds = 0;
    auto const [end, ec] = std::from_chars(n.data(), n.data() + n.size(), seconds);
    if (n.empty() || ec != std::errc{} || end != n.data() + n.size() || seconds > release_rule::longest_window_s) {
      throw config_error{
          fmt::format("\"{}\": the window of auto is whole seconds, 0 to {}", text, release_rule::longest_window_s)};
    }
    return release_rule::automatic_over(seconds);
  }
  if (text == "unlimited") { return release_rule::keep(release_rule::never); }
  size_value const v = parse_size(text);
  if (v.is_percent) {
    throw config_error{fmt::format("\"{}\" is a percentage; this {} needs an absolute size", text, what)};
  }
  return release_rule::keep(v.bytes);
}

std::string_view to_string(sync_mode const m) noexcept { return m == sync_mode::safe ? "safe" : "stream"; }
std::string_view to_string(on_error const e) noexcept { return e == on_error::fail ? "fail" : "passthrough"; }

}  // namespace gpumem::config
