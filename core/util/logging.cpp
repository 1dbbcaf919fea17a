// One shared set of spdlog sinks; loggers per area are created lazily and registered with spdlog.
#include "core/util/logging.h"

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <vector>

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/util/paths.h"

namespace routelab {
namespace {

std::mutex g_mutex;
std::vector<spdlog::sink_ptr> g_sinks;
bool g_initialised = false;
spdlog::level::level_enum g_level = spdlog::level::info;

void init_locked(const LoggingOptions& options) {
  g_level = spdlog::level::from_str(options.level);
  if (g_initialised) return;
  g_initialised = true;
  if (options.console) {
    auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    console->set_pattern("[%H:%M:%S.%e] [%n] %^%l%$ %v");
    g_sinks.push_back(console);
  }
  if (options.log_dir != "-") {
    std::string dir = options.log_dir.empty() ? state_dir() : options.log_dir;
    try {
      std::filesystem::create_directories(dir);
      auto file = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
          (std::filesystem::path(dir) / "routelab.log").string(), 5 * 1024 * 1024, 3);
      file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] [pid %P] %v");
      g_sinks.push_back(file);
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

std::shared_ptr<spdlog::logger> logger(const std::string& area) {
  std::lock_guard lock(g_mutex);
  if (auto existing = spdlog::get(area)) return existing;
  if (!g_initialised) init_locked(LoggingOptions{});
  auto created = std::make_shared<spdlog::logger>(area, g_sinks.begin(), g_sinks.end());
  created->set_level(g_level);
  created->flush_on(spdlog::level::warn);
  spdlog::register_logger(created);
  return created;
}

void add_log_sink(const spdlog::sink_ptr& sink) {
  std::lock_guard lock(g_mutex);
  g_sinks.push_back(sink);
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& l) { l->sinks().push_back(sink); });
}

void remove_log_sink(const spdlog::sink_ptr& sink) {
  std::lock_guard lock(g_mutex);
  std::erase(g_sinks, sink);
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& l) { std::erase(l->sinks(), sink); });
}

}  // namespace routelab
