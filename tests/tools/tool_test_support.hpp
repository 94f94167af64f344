#pragma once
// Helpers for the tools' tests: build logs with known contents, write files, run
// the command-line tools and capture what they print.

#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gpumem::test {

/// Builds a gpumem-dialect log line by line. Times are TimeNs; the Time column is
/// derived from them (as seconds after 14:00:00).
class gpumem_log {
 public:
  gpumem_log& alloc(std::uint64_t ptr, std::uint64_t size, std::int64_t t_ns, std::uint64_t thread = 1,
                    std::string_view stream = "0x1") {
    return row(thread, t_ns, "allocate", hex(ptr), size, stream, "cudaMalloc", "CUDA_SUCCESS");
  }
  gpumem_log& free(std::uint64_t ptr, std::uint64_t size, std::int64_t t_ns, std::uint64_t thread = 1,
                   std::string_view stream = "0x1") {
    return row(thread, t_ns, "free", hex(ptr), size, stream, "cudaFree", "CUDA_SUCCESS");
  }
  gpumem_log& fail(std::uint64_t size, std::int64_t t_ns, std::uint64_t thread = 1,
                   std::string_view result = "CUDA_ERROR_OUT_OF_MEMORY") {
    return row(thread, t_ns, "allocate failure", "(nil)", size, "0x1", "cudaMalloc", result);
  }
  /// Pinned host memory, as the shim logs cudaHostAlloc / cudaFreeHost.
  gpumem_log& host_alloc(std::uint64_t ptr, std::uint64_t size, std::int64_t t_ns) {
    return row(1, t_ns, "allocate", hex(ptr), size, "0x0", "cudaHostAlloc", "CUDA_SUCCESS");
  }
  gpumem_log& host_free(std::uint64_t ptr, std::uint64_t size, std::int64_t t_ns) {
    return row(1, t_ns, "free", hex(ptr), size, "0x0", "cudaFreeHost", "CUDA_SUCCESS");
  }
  /// Managed memory, as the shim logs cudaMallocManaged (or cuMemAllocManaged). Its
  /// free is free(): cudaFree, as for device memory.
  gpumem_log& managed_alloc(std::uint64_t ptr, std::uint64_t size, std::int64_t t_ns,
                            std::string_view entry = "cudaMallocManaged") {
    return row(1, t_ns, "allocate", hex(ptr), size, "0x0", entry, "CUDA_SUCCESS");
  }
  gpumem_log& managed_fail(std::uint64_t size, std::int64_t t_ns) {
    return row(1, t_ns, "allocate failure", "(nil)", size, "0x0", "cudaMallocManaged", "CUDA_ERROR_OUT_OF_MEMORY");
  }
  /// The DurationNs of the rows that follow ("" for an untimed call; 100 until set).
  gpumem_log& took(std::string_view duration_ns) {
    duration_ = duration_ns;
    return *this;
  }
  [[nodiscard]] std::string const& text() const noexcept { return text_; }

  static constexpr std::string_view header =
      "Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result\n";

 private:
  static std::string hex(std::uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
  }
  gpumem_log& row(std::uint64_t thread, std::int64_t t_ns, std::string_view action, std::string const& ptr,
                  std::uint64_t size, std::string_view stream, std::string_view entry, std::string_view result) {
    std::int64_t const us = t_ns / 1000;
    char time[32];
    std::snprintf(time, sizeof time, "14:%02lld:%02lld.%06lld", static_cast<long long>(us / 60'000'000 % 60),
                  static_cast<long long>(us / 1'000'000 % 60), static_cast<long long>(us % 1'000'000));
    std::ostringstream os;
    os << thread << ',' << time << ',' << action << ',' << ptr << ',' << size << ',' << stream << ",0," << entry << ','
       << t_ns << ',' << duration_ << ',' << result << '\n';
    text_ += os.str();
    return *this;
  }
  std::string text_{header};
  std::string duration_{"100"};
};

inline void write_file(std::string const& path, std::string_view data) {
  std::ofstream f{path, std::ios::binary};
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f) throw std::runtime_error{"cannot write " + path};
}

inline std::string read_file(std::string const& path) {
  std::ifstream f{path, std::ios::binary};
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

struct command_result {
  int status = -1;  ///< exit status, or -1 if it did not exit normally
  std::string out, err;
};

/// Runs a shell command line; stderr is captured through a file next to `scratch`.
inline command_result run_command(std::string const& command, std::string const& scratch) {
  command_result r;
  std::string const err_path = scratch + ".stderr";
  std::FILE* p = ::popen((command + " 2>" + err_path).c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  int const st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.err = read_file(err_path);
  return r;
}

/// Naive but exact look-up for flat JSON numbers: the text after `"key":` up to
/// the next ',' or '}' — enough for the report's fixed layout.
inline std::string json_field(std::string const& json, std::string const& key, std::size_t from = 0) {
  std::string const k = "\"" + key + "\":";
  std::size_t const at = json.find(k, from);
  if (at == std::string::npos) return "<missing " + key + ">";
  std::size_t const start = at + k.size();
  std::size_t const end = json.find_first_of(",}]", start);
  return json.substr(start, end - start);
}

}  // namespace gpumem::test
