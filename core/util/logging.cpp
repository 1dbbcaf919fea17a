// One shared set of spdlog sinks; loggers per area are created lazily and registered with spdlog.
#include "core/util/logging.h"

#include <filesystem>
#include <mutex>

#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/util/paths.h"

namespace routelab {
namespace {

std::mutex g_mutex;
// Every logger writes to this one distributing sink; adding or removing a sink (e.g. the GUI's log dock) goes
// through its own lock, so it is safe while other threads log.
const auto g_dist = std::make_shared<spdlog::sinks::dist_sink_mt>();
bool g_initialised = false;
spdlog::level::level_enum g_level = spdlog::level::info;

void init_locked(const LoggingOptions& options) {
  g_level = spdlog::level::from_str(options.level);
  if (g_initialised) return;
  g_initialised = true;
  if (options.console) {
    auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    console->set_pattern("[%H:%M:%S.%e] [%n] %^%l%$ %v");
    g_dist->add_sink(console);
  }
  if (options.log_dir != "-") {
    std::string dir = options.log_dir.empty() ? state_dir() : options.log_dir;
    try {
      std::filesystem::create_directories(dir);
      auto file = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
          (std::filesystem::path(dir) / "routelab.log").string(), 5 * 1024 * 1024, 3);
      file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] [pid %P] %v");
      g_dist->add_sink(file);
    } catch (const std::exception&) {
      // No writable log dir: keep the console only (logging must never stop a run).
    }
  }
}

}  // namespace

void init_logging(const LoggingOptions& options) {
  std::lock_guard lock(g_mutex);
  init_locked(options);
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->set_level(g_level); });
}

void ensure_logging() {
  std::lock_guard lock(g_mutex);
  if (!g_initialised) init_locked(LoggingOptions{});
}

std::shared_ptr<spdlog::logger> logger(const std::string& area) {
  std::lock_guard lock(g_mutex);
  if (auto existing = spdlog::get(area)) return existing;
  if (!g_initialised) init_locked(LoggingOptions{});
  auto created = std::make_shared<spdlog::logger>(area, g_dist);
  created->set_level(g_level);
  created->flush_on(spdlog::level::warn);
  spdlog::register_logger(created);
  return created;
}

void add_log_sink(const spdlog::sink_ptr& sink) { g_dist->add_sink(sink); }

void remove_log_sink(const spdlog::sink_ptr& sink) { g_dist->remove_sink(sink); }

}  // namespace routelab
