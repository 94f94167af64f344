#include "command_line.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace gpumem::tools {

void parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (CLI::CallForHelp const&) {
    std::string const help = app.help();
    std::fputs(help.c_str(), stdout);
    std::exit(std::fflush(stdout) == 0 && !std::ferror(stdout) ? 0 : 1);
  } catch (CLI::ParseError const& e) {
    fmt::print(stderr, "{}: {}\nrun '{} --help' for the options\n", app.get_name(), e.what(), app.get_name());
    std::exit(exit_usage);
  }
}

}  // namespace gpumem::tools
