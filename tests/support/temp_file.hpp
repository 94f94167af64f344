#pragma once
// A unique file path in a fresh private directory, removed (with the file) at scope end.

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace gpumem::test {

class temp_file {
 public:
  explicit temp_file(std::string const& name = "log.csv") {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gpumem-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error{"mkdtemp failed"};
    dir_ = tmpl;
    path_ = (std::filesystem::path{dir_} / name).string();
  }
  ~temp_file() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  temp_file(temp_file const&) = delete;
  temp_file& operator=(temp_file const&) = delete;

  [[nodiscard]] std::string const& path() const noexcept { return path_; }
  [[nodiscard]] std::string const& dir() const noexcept { return dir_; }

 private:
  std::string dir_;
  std::string path_;
};

}  // namespace gpumem::test
