#include "run_options.hpp"

#include <gpumem/config/settings.hpp>
#include <gpumem/config/size_parse.hpp>

#include <unistd.h>

#include <array>
#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gpumem::run {
namespace {

struct option_spec {
  std::string_view name;  // without the leading "--"
  std::string_view variable;
  enum kind { text, size, choice, flag, count, release } type;
  std::string_view choices;  // "a|b|c" for choice; "lo|hi" for count
};

constexpr std::array<option_spec, 20> options{{
    {"config", "GPUMEM_CONFIG", option_spec::text, {}},
    {"resource", "GPUMEM_RESOURCE", option_spec::choice, "pool|cuda-pool|binning|async|cuda|managed"},
    {"pool-size", "GPUMEM_POOL_SIZE", option_spec::size, {}},
    {"pool-max", "GPUMEM_POOL_MAX", option_spec::size, {}},
    {"limit", "GPUMEM_LIMIT", option_spec::size, {}},
    {"log", "GPUMEM_LOG_FILE", option_spec::text, {}},
    {"log-queue", "GPUMEM_LOG_QUEUE", option_spec::flag, {}},
    {"log-level", "GPUMEM_LOG_LEVEL", option_spec::choice, "trace|debug|info|warn|error|off"},
    {"sync-mode", "GPUMEM_SYNC_MODE", option_spec::choice, "safe|stream"},
    {"report-file", "GPUMEM_REPORT_FILE", option_spec::text, {}},
    {"disable", "GPUMEM_DISABLE", option_spec::flag, {}},
    {"report", "GPUMEM_REPORT", option_spec::flag, {}},
    {"stacks", "GPUMEM_STACKS", option_spec::count, "0|128"},
    {"stack-sample", "GPUMEM_STACK_SAMPLE", option_spec::count, "1|1000000000"},
    {"stack-min-size", "GPUMEM_STACK_MIN_SIZE", option_spec::size, {}},
    {"release-threshold", "GPUMEM_RELEASE_THRESHOLD", option_spec::release, {}},
    {"host-pool", "GPUMEM_HOST_POOL", option_spec::flag, {}},
    {"host-limit", "GPUMEM_HOST_LIMIT", option_spec::size, {}},
    {"managed-pool", "GPUMEM_MANAGED_POOL", option_spec::flag, {}},
    {"managed-limit", "GPUMEM_MANAGED_LIMIT", option_spec::size, {}},
}};

bool in_choices(std::string_view value, std::string_view choices) {
  while (!choices.empty()) {
    auto const bar = choices.find('|');
    if (choices.substr(0, bar) == value) return true;
    if (bar == std::string_view::npos) break;
    choices.remove_prefix(bar + 1);
  }
  return false;
}

void check_value(option_spec const& o, std::string const& value) {
  std::string const where = "--" + std::string{o.name};
  if (value.empty()) throw std::invalid_argument{where + " needs a value"};
  if (o.type == option_spec::size) {
    bool percent = false;
    try {
      percent = config::parse_size(value).is_percent;  // percentages are resolved per device by the shim
    } catch (config::config_error const& e) { throw std::invalid_argument{where + ": " + e.what()}; }
    if (percent && o.name == "host-limit") {  // host memory has no device to take a share of
      throw std::invalid_argument{where + ": \"" + value + "\" is a percentage; give an absolute size such as 2GiB"};
    }
  } else if (o.type == option_spec::release) {
    try {
      (void)config::parse_release_rule(value, "option");
    } catch (config::config_error const& e) { throw std::invalid_argument{where + ": " + e.what()}; }
  } else if (o.type == option_spec::count) {
    auto const bar = o.choices.find('|');
    long long const lo = std::stoll(std::string{o.choices.substr(0, bar)});
    long long const hi = std::stoll(std::string{o.choices.substr(bar + 1)});
    long long n = 0;
    auto const [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc{} || end != value.data() + value.size() || n < lo || n > hi) {
      throw std::invalid_argument{where + ": \"" + value + "\" is not a whole number from " + std::to_string(lo) +
                                  " to " + std::to_string(hi)};
    }
  } else if (o.type == option_spec::choice && !in_choices(value, o.choices)) {
    throw std::invalid_argument{where + ": \"" + value + "\" is not one of " + std::string{o.choices}};
  }
}

}  // namespace

run_options parse_arguments(std::vector<std::string> const& args) {
  run_options r;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string const& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      r.help = true;
      return r;
    }
    if (a == "--version") {
      r.version = true;
      return r;
    }
    if (a.size() < 2 || a[0] != '-') break;  // the command starts here
    std::string_view body{a};
    body.remove_prefix(a.starts_with("--") ? 2 : 1);
    std::string_view name = body;
    std::string value;
    bool inline_value = false;
    if (auto const eq = body.find('='); eq != std::string_view::npos) {
      name = body.substr(0, eq);
      value = std::string{body.substr(eq + 1)};
      inline_value = true;
    }
    option_spec const* spec = nullptr;
    for (auto const& o : options) {
      if (o.name == name) spec = &o;
    }
    if (spec == nullptr) throw std::invalid_argument{"unknown option " + a + " (see gpumem-run --help)"};
    if (spec->type == option_spec::flag) {
      if (inline_value) throw std::invalid_argument{"--" + std::string{name} + " takes no value"};
      r.env.emplace_back(std::string{spec->variable}, "1");
      continue;
    }
    if (!inline_value) {
      // "--pool-size -- prog" or "--log --report": the value was forgotten; a value
      // that starts with "--" must be given inline (--log=--odd-name.csv).
      if (i + 1 >= args.size() || args[i + 1].starts_with("--")) {
        throw std::invalid_argument{"--" + std::string{name} + " needs a value"};
      }
      value = args[++i];
    }
    check_value(*spec, value);
    r.env.emplace_back(std::string{spec->variable}, value);
  }
  r.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (r.command.empty()) throw std::invalid_argument{"no command given (gpumem-run [options] -- program args...)"};
  return r;
}

std::string prepend_preload(std::string const& shim, std::string const& current) {
  std::string out = shim;
  std::size_t pos = 0;
  // ld.so separates LD_PRELOAD entries with spaces or colons.
  while (pos <= current.size()) {
    auto const end = current.find_first_of(": ", pos);
    auto const item = current.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (!item.empty() && item != shim) out += ":" + item;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return out;
}

std::string find_shim(std::string const& exe_dir, std::string const& shim_env) {
  auto const exists = [](std::string const& p) { return ::access(p.c_str(), R_OK) == 0; };
  if (!shim_env.empty()) return exists(shim_env) ? shim_env : std::string{};
  for (auto const& candidate : {exe_dir + "/../lib/libgpumem_shim.so", exe_dir + "/libgpumem_shim.so"}) {
    if (!exists(candidate)) continue;
    // An absolute, clean path: children may change directory before they exec.
    if (char* real = ::realpath(candidate.c_str(), nullptr)) {
      std::string out{real};
      std::free(real);
      return out;
    }
    return candidate;
  }
  return {};
}

std::string usage() {
  return R"(gpumem-run: run an unmodified CUDA program with its device allocations served by gpumem.

Usage: gpumem-run [options] [--] program [args...]

gpumem-run sets the GPUMEM_* environment, puts libgpumem_shim.so first in LD_PRELOAD
and exec()s the program: its exit code is gpumem-run's, and the processes it starts
(workers, ranks) inherit the shim and its settings.

Options (each sets the variable shown; the variables work without gpumem-run too):
  --config FILE        TOML configuration                          GPUMEM_CONFIG
  --resource R         pool (default: over mapped memory) |
                       cuda-pool (over cudaMalloc slabs) | binning |
                       async | cuda (no caching) | managed         GPUMEM_RESOURCE
  --pool-size SIZE     initial pool size                           GPUMEM_POOL_SIZE
  --pool-max SIZE      maximum pool size                           GPUMEM_POOL_MAX
  --limit SIZE         cap on device memory the program may hold   GPUMEM_LIMIT
  --log FILE           CSV log of every allocation and free        GPUMEM_LOG_FILE
  --log-queue          accepted for earlier scripts: rows are always
                       queued (after a crash the last rows wait in
                       FILE.journal until gpumem-report or
                       gpumem-replay reads FILE)                   GPUMEM_LOG_QUEUE
  --log-level L        trace | debug | info | warn | error | off   GPUMEM_LOG_LEVEL
  --sync-mode M        safe (default): memory freed by cudaFree is
                       reused only after all earlier work on every
                       stream (a GPU-side barrier), as CUDA
                       promises; stream: trust stream order (RMM)  GPUMEM_SYNC_MODE
  --report             print a summary at exit (peaks, leaks)      GPUMEM_REPORT
  --report-file FILE   write that summary to FILE, not stderr      GPUMEM_REPORT_FILE
  --stacks N           record the calling stack (N frames, 0 = off,
                       at most 128) of allocations: gpumem-report
                       names the code behind peaks, leaks and
                       failures (16 for native callers, 64 to reach
                       Python frames under python -X perf)         GPUMEM_STACKS
  --stack-sample K     only every K-th allocation of a thread gets
                       a stack (cheaper); failures always do       GPUMEM_STACK_SAMPLE
  --stack-min-size SIZE  ...and every allocation of SIZE or more
                       (default 16MiB)                             GPUMEM_STACK_MIN_SIZE
  --release-threshold T  what synchronizations (cudaDeviceSynchronize,
                       cudaStreamSynchronize, cudaEventSynchronize)
                       leave cached of the device memory gpumem holds
                       and the program does not; the rest goes back.
                       auto (default): what the program needed in the
                       last 10 s (the most it held between
                       synchronizations then, less what it holds now,
                       and a quarter more for fragmentation), so a
                       loop keeps what its largest recent step needs;
                       auto:N: over N seconds;
                       SIZE (no %): that many bytes; unlimited:
                       nothing goes back there. A program's
                       cudaMemPoolSetAttribute(RELEASE_THRESHOLD) on
                       the default pool sets it too                GPUMEM_RELEASE_THRESHOLD
  --host-pool          cache pinned host memory (cudaHostAlloc,
                       cudaMallocHost, cuMemHostAlloc): one pool per
                       flag set; a block is reused once the copies
                       queued before its free ran                  GPUMEM_HOST_POOL
  --host-limit SIZE    cap on pinned host memory (no %)            GPUMEM_HOST_LIMIT
  --managed-pool       cache managed memory (cudaMallocManaged,
                       cuMemAllocManaged): one pool per attach flag;
                       a block is reused once the work queued
                       before its free ran                         GPUMEM_MANAGED_POOL
  --managed-limit SIZE cap on managed memory (no %)                GPUMEM_MANAGED_LIMIT
  --disable            load the shim but pass everything to CUDA   GPUMEM_DISABLE
  -h, --help           this text
  --version            gpumem version

SIZE: 4096, 512MiB, 8GiB, 1.5GB, or 50% (of the device's free memory).
FILE templates: %p pid, %r MPI/torchrun rank, %h host name, %d device, %% a '%'.
The shim is found next to gpumem-run (<dir>/../lib/libgpumem_shim.so) or at $GPUMEM_SHIM.

Examples:
  gpumem-run --pool-size 8GiB --report -- python train.py
  gpumem-run --limit 20GiB --log /tmp/alloc-%p.csv -- ./my_cuda_app
  gpumem-run --log alloc.csv --stacks 16 -- ./my_cuda_app && gpumem-report alloc.csv
      (which code allocated the peak, the leaks, the failures; an out-of-memory
       failure also leaves alloc.csv.oom-1.json)
  PyTorch: gpumem-run -- env PYTORCH_NO_CUDA_MEMORY_CACHING=1 python train.py
      (with its own cache off, every PyTorch allocation reaches gpumem)
  torchrun: gpumem-run --log 'alloc-rank%r.csv' -- torchrun --nproc-per-node 8 train.py
  MPI: mpirun -np 4 gpumem-run --report-file 'report-%r.txt' -- ./solver
      (or gpumem-run -- mpirun ...: ranks inherit LD_PRELOAD where mpirun passes the
       environment on, e.g. Open MPI with -x LD_PRELOAD -x GPUMEM_POOL_SIZE)
  Pass-through check: gpumem-run --disable -- ./my_cuda_app
)";
}

}  // namespace gpumem::run
