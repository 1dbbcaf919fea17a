// spdlog setup: one logger per area (core, train, data, store, ui, cli), console plus a rotating file.
#pragma once
#include <memory>
#include <string>

#include <spdlog/sinks/sink.h>
#include <spdlog/spdlog.h>

namespace routelab {

struct LoggingOptions {
  std::string log_dir;             ///< empty: the XDG state dir (see paths.h); "-" disables the file sink
  bool console = true;             ///< colour console sink on stderr
  std::string level = "info";      ///< trace, debug, info, warn, error
};

/// Idempotent: the first call sets the sinks; later calls only change the level.
void init_logging(const LoggingOptions& options = {});
/// The sinks with the defaults where nothing set them yet; the level stays as it is (a library entry point's call, so
/// that the caller's level, e.g. the CLI's --log-level, holds).
void ensure_logging();

/// The logger of an area, created on first use with the shared sinks.
std::shared_ptr<spdlog::logger> logger(const std::string& area);

/// Adds a sink (e.g. the GUI's log dock bridge) to every existing and future logger.
void add_log_sink(const spdlog::sink_ptr& sink);
void remove_log_sink(const spdlog::sink_ptr& sink);

}  // namespace routelab
