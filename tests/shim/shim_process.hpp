#pragma once
// Runs a test program as a child process with a chosen environment and collects
// its exit code and output (stdout and stderr together) for the shim's gtest
// drivers. Paths come from GPUMEM_BUILD_DIR, which CTest sets.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace gpumem::test {

struct process_result {
  int exit_code = -1;  ///< exit status, or 128 + signal
  std::string output;
};

/// GPUMEM_BUILD_DIR, else the build tree this test binary lives in (<build>/bin).
inline std::string build_dir() {
  if (char const* b = std::getenv("GPUMEM_BUILD_DIR"); b != nullptr && *b != '\0') return b;
  char buf[4096] = {};
  ssize_t const n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string exe{buf, n > 0 ? static_cast<std::size_t>(n) : 0};
  for (int up = 0; up < 2 && exe.rfind('/') != std::string::npos; ++up) exe.erase(exe.rfind('/'));
  return exe.empty() ? std::string{"."} : exe;
}
inline std::string shim_path() { return build_dir() + "/lib/libgpumem_shim.so"; }
inline std::string program(std::string const& name) { return build_dir() + "/tests/shim/programs/" + name; }

/// Runs `argv` with the current environment plus `env` (an empty value unsets).
inline process_result run_process(std::vector<std::string> const& argv, std::map<std::string, std::string> const& env) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string const kv{*e};
    auto const eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (auto const& [k, v] : env) {
    if (v.empty()) {
      vars.erase(k);
    } else {
      vars[k] = v;
    }
  }
  std::vector<std::string> env_strings;
  for (auto const& [k, v] : vars) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);

  int fds[2];
  process_result r;
  if (pipe(fds) != 0) return r;
  pid_t const pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execve(argp[0], argp.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n = 0;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) r.output.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

/// The STATS line of a test program as key -> value.
inline std::map<std::string, long long> parse_stats(std::string const& output) {
  std::map<std::string, long long> m;
  auto const at = output.find("STATS ");
  if (at == std::string::npos) return m;
  std::istringstream line{output.substr(at + 6, output.find('\n', at) - at - 6)};
  std::string kv;
  while (line >> kv) {
    auto const eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = std::stoll(kv.substr(eq + 1));
  }
  return m;
}

}  // namespace gpumem::test
