// Resolution of RouteLab's per-user directories following the XDG base-directory spec.
#include "core/util/paths.h"

#include <cstdlib>
#include <filesystem>

#include "core/util/version.h"

namespace fs = std::filesystem;

namespace routelab {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

fs::path home() {
  std::string h = env_or_empty("HOME");
  return h.empty() ? fs::temp_directory_path() : fs::path(h);
}

}  // namespace

std::string data_dir() {
  if (auto o = env_or_empty("ROUTELAB_HOME"); !o.empty()) return o;
  if (auto x = env_or_empty("XDG_DATA_HOME"); !x.empty()) return (fs::path(x) / "routelab").string();
  return (home() / ".local" / "share" / "routelab").string();
}

std::string state_dir() {
  if (auto o = env_or_empty("ROUTELAB_HOME"); !o.empty()) return (fs::path(o) / "log").string();
  if (auto x = env_or_empty("XDG_STATE_HOME"); !x.empty()) return (fs::path(x) / "routelab").string();
  return (home() / ".local" / "state" / "routelab").string();
}

std::string default_db_path() { return (fs::path(data_dir()) / "runs.sqlite").string(); }

std::string checkpoint_dir(const std::string& db_path, long long run_id) {
  // Checkpoints sit beside the database they belong to, so a --db elsewhere keeps its files together, in a folder
  // named after the store: two stores in one folder number their runs independently and must not share run-<id>.
  const fs::path db(db_path);
  fs::path base = db.parent_path();
  if (base.empty()) base = ".";
  return (base / "checkpoints" / db.stem() / ("run-" + std::to_string(run_id))).string();
}

std::string experiments_dir() {
  if (auto o = env_or_empty("ROUTELAB_EXPERIMENTS"); !o.empty()) return o;
  for (const char* candidate : {ROUTELAB_INSTALL_EXPERIMENTS_DIR, ROUTELAB_SOURCE_EXPERIMENTS_DIR}) {
    if (fs::is_directory(candidate)) return candidate;
  }
  return ROUTELAB_SOURCE_EXPERIMENTS_DIR;
}

}  // namespace routelab
