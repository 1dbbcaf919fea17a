// The command line of RouteLab's small Qt programs (routelab-render, routelab-bench-dashboard), parsed by CLI11.
#pragma once
#include <optional>

#include <CLI/CLI.hpp>

namespace routelab {

/// Parses argv into `app`: nothing to go on with, else the exit code: 0 after --help or --version, 2 for a bad line
/// (CLI11 has printed why).
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

}  // namespace routelab
