// The environment snapshot and path templates (include/gpumem/config/environment.hpp).

#include <gpumem/config/environment.hpp>

#include <fmt/format.h>

#include <unistd.h>
#include <array>

extern "C" char** environ;  // NOLINT: POSIX

namespace gpumem::config {
namespace {

// Launchers' rank variables, most specific first: Open MPI, MPICH/Intel MPI, PMIx,
// Slurm, torchrun.
constexpr std::array<std::string_view, 5> rank_variables{"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                                         "SLURM_PROCID", "RANK"};

bool wanted(std::string_view name) {
  if (name.starts_with("GPUMEM_")) { return true; }
  for (auto const r : rank_variables) {
    if (name == r) { return true; }
  }
  return false;
}

std::string rank_of(environment const& env) {
  for (auto const r : rank_variables) {
    if (auto const* v = env.find(r)) { return *v; }
  }
  return "0";
}

std::string host_name() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0) { return "unknown-host"; }
  return std::string{buf.data()};
}

}  // namespace

environment environment::from_process() {
  environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view const entry{*e};
    auto const eq = entry.find('=');
    if (eq == std::string_view::npos) { continue; }
    auto const name = entry.substr(0, eq);
    if (wanted(name)) { env.vars.emplace(std::string{name}, std::string{entry.substr(eq + 1)}); }
  }
  return env;
}

std::string const* environment::find(std::string_view const name) const {
  auto const it = vars.find(name);
  if (it == vars.end() || it->second.empty()) { return nullptr; }
  return &it->second;
}

std::string expand_template(std::string_view const pattern, int const device) {
  return expand_template(pattern, device, environment::from_process());
}

std::string expand_template(std::string_view const pattern, int const device, environment const& env) {
  std::string out;
  out.reserve(pattern.size() + 16);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char const c = pattern[i];
    if (c != '%' || i + 1 == pattern.size()) {
      out.push_back(c);
      continue;
    }
    switch (pattern[i + 1]) {
      case 'p': out += std::to_string(getpid()); break;
      case 'r': out += rank_of(env); break;
      case 'h': out += host_name(); break;
      case 'd': out += std::to_string(device); break;
      case '%': out.push_back('%'); break;
      default: out.append(pattern.substr(i, 2)); break;
    }
    ++i;
  }
  return out;
}

std::string check_template(std::string_view const pattern) {
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') { continue; }
    if (i + 1 == pattern.size()) { return "ends with a lone %"; }
    if (std::string_view{"prhd%"}.find(pattern[i + 1]) == std::string_view::npos) {
      return fmt::format("unknown placeholder %{}", pattern[i + 1]);
    }
    ++i;
  }
  return {};
}

}  // namespace gpumem::config
