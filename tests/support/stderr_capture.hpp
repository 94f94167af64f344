#pragma once
// Captures what this process writes to file descriptor 2 (gpumem's diagnostics
// write there directly, with write(2)) for the scope of the object: fd 2 points to
// a temporary file until text() or the destructor restores it.

#include <support/temp_file.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace gpumem::test {

class stderr_capture {
 public:
  stderr_capture() : saved_{::dup(STDERR_FILENO)} {
    int const fd = ::open(file_.path().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved_ < 0 || fd < 0 || ::dup2(fd, STDERR_FILENO) < 0) throw std::runtime_error{"cannot capture stderr"};
    ::close(fd);
  }
  ~stderr_capture() { restore(); }
  stderr_capture(stderr_capture const&) = delete;
  stderr_capture& operator=(stderr_capture const&) = delete;

  /// Everything written so far; stops the capture.
  std::string text() {
    restore();
    std::ifstream in{file_.path()};
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }

 private:
  void restore() noexcept {
    if (saved_ < 0) return;
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }
  temp_file file_{"stderr.txt"};
  int saved_;
};

}  // namespace gpumem::test
