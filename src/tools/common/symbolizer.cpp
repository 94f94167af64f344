#include "symbolizer.hpp"
#include "log_messages.hpp"

#include <elfutils/libdwfl.h>
#include <fmt/format.h>

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace gpumem::tools {

std::string symbol::text() const {
  std::string where = module.empty() ? fmt::format("{:#x}", address)
                                     : fmt::format("{}+{:#x}", base_name(module), offset);
  if (what == kind::python) {
    return file.empty() ? fmt::format("{} (python)", function) : fmt::format("{} (python, {})", function, file);
  }
  if (function.empty()) return where;
  if (file.empty()) return fmt::format("{} ({})", function, where);
  return fmt::format("{} at {}:{} ({})", function, base_name(file), line, where);
}

namespace {

std::string demangle(char const* name) {
  if (name == nullptr) return {};
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d{abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free};
  return status == 0 && d ? std::string{d.get()} : std::string{name};
}

std::string hex_bytes(unsigned char const* p, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += fmt::format("{:02x}", p[i]);
  return s;
}

struct perf_entry {
  std::uint64_t start{}, size{};
  std::string name;
};

// One module file opened with libdwfl, at its own link-time addresses.
struct dwfl_file {
  Dwfl* dwfl = nullptr;
  Dwfl_Module* module = nullptr;
  std::uint64_t bias = 0;  // where libdwfl placed the file: link-time address + bias
  bool build_id_mismatch = false;
  ~dwfl_file() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }
};

char* debuginfo_path = nullptr;
Dwfl_Callbacks const callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &debuginfo_path,
};

}  // namespace

struct symbolizer::impl {
  std::string perf_dir;
  std::unordered_map<std::string, std::unique_ptr<dwfl_file>> files;
  std::unordered_map<std::uint32_t, std::vector<perf_entry>> perf_maps;
  bool used_perf = false;

  dwfl_file* open(stack_module const& m) {
    auto [it, fresh] = files.try_emplace(m.path);
    if (!fresh) return it->second.get();
    auto f = std::make_unique<dwfl_file>();
    f->dwfl = dwfl_begin(&callbacks);
    if (f->dwfl != nullptr) {
      dwfl_report_begin(f->dwfl);
      f->module = dwfl_report_offline(f->dwfl, m.path.c_str(), m.path.c_str(), -1);
      dwfl_report_end(f->dwfl, nullptr, nullptr);
    }
    if (f->module != nullptr) {
      Dwarf_Addr bias = 0;
      if (dwfl_module_getelf(f->module, &bias) == nullptr) f->module = nullptr;
      f->bias = bias;
      if (f->module != nullptr && !m.build_id.empty()) {
        unsigned char const* bits = nullptr;
        GElf_Addr vaddr = 0;
        int const n = dwfl_module_build_id(f->module, &bits, &vaddr);
        f->build_id_mismatch = n > 0 && hex_bytes(bits, n) != m.build_id;
      }
    }
    it->second = std::move(f);
    return it->second.get();
  }

  std::vector<perf_entry> const& perf_map(std::uint32_t pid) {
    auto [it, fresh] = perf_maps.try_emplace(pid);
    if (!fresh) return it->second;
    std::ifstream in{fmt::format("{}/perf-{}.map", perf_dir, pid)};
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls{line};
      perf_entry e;
      if (!(ls >> std::hex >> e.start >> e.size)) continue;
      std::getline(ls >> std::ws, e.name);
      if (!e.name.empty()) it->second.push_back(std::move(e));
    }
    std::stable_sort(it->second.begin(), it->second.end(),
                     [](perf_entry const& a, perf_entry const& b) { return a.start < b.start; });
    return it->second;
  }
};

symbolizer::symbolizer(std::string perf_map_dir) : impl_{std::make_unique<impl>()} {
  impl_->perf_dir = std::move(perf_map_dir);
}
symbolizer::~symbolizer() = default;

bool symbolizer::used_perf_map() const noexcept { return impl_->used_perf; }

symbol symbolizer::resolve(std::uint64_t address, stack_module const* module, std::uint32_t pid) {
  symbol s;
  s.address = address;
  std::uint64_t const at = address - 1;  // inside the call instruction
  if (module == nullptr) {
    auto const& map = impl_->perf_map(pid);
    auto it = std::upper_bound(map.begin(), map.end(), at,
                               [](std::uint64_t a, perf_entry const& e) { return a < e.start; });
    // The latest entry starting at or before the address that still covers it.
    while (it != map.begin()) {
      --it;
      if (at < it->start + it->size) {
        impl_->used_perf = true;
        std::string const& n = it->name;
        if (n.starts_with("py::")) {
          s.what = symbol::kind::python;
          std::string_view rest{n};
          rest.remove_prefix(4);
          auto const colon = rest.find(':');
          s.function = std::string{rest.substr(0, colon)};
          if (colon != std::string_view::npos) s.file = std::string{rest.substr(colon + 1)};
        } else {
          s.what = symbol::kind::native;
          s.function = n;
        }
        return s;
      }
      if (it->start + it->size <= at && at - it->start > (std::uint64_t{1} << 32)) break;
    }
    return s;
  }
  s.module = module->path;
  s.offset = address - module->bias;
  s.what = symbol::kind::native;
  dwfl_file* f = impl_->open(*module);
  if (f == nullptr || f->module == nullptr || f->build_id_mismatch) return s;
  // The offset is the file's link-time address; libdwfl may have placed the file elsewhere.
  Dwarf_Addr const a = f->bias + (s.offset - 1);
  GElf_Off off = 0;
  GElf_Sym sym{};
  if (char const* name = dwfl_module_addrinfo(f->module, a, &off, &sym, nullptr, nullptr, nullptr)) {
    s.function = demangle(name);
  }
  if (Dwfl_Line* l = dwfl_module_getsrc(f->module, a)) {
    int line = 0;
    if (char const* file = dwfl_lineinfo(l, nullptr, &line, nullptr, nullptr, nullptr)) {
      std::filesystem::path p{file};
      // A relative name is relative to the compilation's directory.
      if (char const* dir = dwfl_line_comp_dir(l); p.is_relative() && dir != nullptr)
        p = std::filesystem::path{dir} / p;
      s.file = p.lexically_normal().string();
      s.line = line;
    }
  }
  return s;
}

}  // namespace gpumem::tools
