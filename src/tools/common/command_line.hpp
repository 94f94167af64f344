#pragma once
// The command lines of gpumem-report and gpumem-replay, parsed with CLI11: --help
// is generated from the options; every error names the option and exits 2.
// Thread safety: call from main, before other threads exist.

#include <CLI/CLI.hpp>

namespace gpumem::tools {

/// Exit status of a bad command line (and of a log that cannot be read).
inline constexpr int exit_usage = 2;

/// Parses argv into `app`. --help prints the generated help on standard output and
/// exits 0; an error prints "<name>: <what is wrong>" and a pointer to --help on
/// standard error and exits exit_usage. Returns only when the command line is good.
void parse_command_line(CLI::App& app, int argc, char** argv);

}  // namespace gpumem::tools
