// Writes a synthetic allocation log (see synthetic_log.hpp) for benchmarks:
//   tools_synthetic_log ROWS [FILE]     (FILE omitted or "-": standard output)
// and prints what it wrote (rows, peak live...) on stderr.
#include "tools/synthetic_log.hpp"

#include <cstdio>
#include <cstdlib>
#include <string_view>

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fputs("usage: tools_synthetic_log ROWS [FILE]\n", stderr);
    return 2;
  }
  gpumem::test::synthetic_log_shape shape;
  char* end = nullptr;
  shape.rows = std::strtoull(argv[1], &end, 10);
  if (end == argv[1] || *end != '\0') {
    std::fprintf(stderr, "tools_synthetic_log: ROWS must be a number, got '%s'\n", argv[1]);
    return 2;
  }
  std::FILE* out = stdout;
  if (argc == 3 && std::string_view{argv[2]} != "-") {
    out = std::fopen(argv[2], "wb");
    if (out == nullptr) {
      std::perror(argv[2]);
      return 1;
    }
  }
  gpumem::test::synthetic_log_facts facts;
  bool ok = gpumem::test::synthetic_log_writer::write(out, shape, &facts);
  ok = std::fclose(out) == 0 && ok;
  if (!ok) {
    std::perror("tools_synthetic_log: write");
    return 1;
  }
  std::fprintf(stderr,
               "rows %llu allocations %llu frees %llu failures %llu peak_live %llu live_at_end %llu "
               "leaked %llu peak_reserved %llu\n",
               static_cast<unsigned long long>(facts.rows), static_cast<unsigned long long>(facts.allocations),
               static_cast<unsigned long long>(facts.frees), static_cast<unsigned long long>(facts.failures),
               static_cast<unsigned long long>(facts.peak_live), static_cast<unsigned long long>(facts.live_at_end),
               static_cast<unsigned long long>(facts.leaked), static_cast<unsigned long long>(facts.peak_reserved));
  return 0;
}
