// Helpers shared by the run-store suites: a sample run, raw file bytes, and a raw SQLite connection.
#pragma once

#include <QDateTime>
#include <QDir>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <signal.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

namespace routelab::test {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

inline NewRun sample_run(const std::string& name = "run") {
  NewRun r;
  r.name = name;
  r.arch = "mod";
  r.preset = "tiny-shakespeare";
  r.config_json = R"({"model":{"n_layer":4},"train":{"lr":0.0003}})";
  r.config_hash = "9f2c";
  r.seed = 1337;
  r.device = "cuda:0";
  r.routelab_version = "0.1.0";
  r.torch_version = "2.1.2";
  r.qt_version = "6.4.2";
  r.total_steps = 5000;
  r.rank = 0;
  r.world_size = 2;
  return r;
}

/// Identical doubles: NaN equals NaN; the sign of an infinity counts.
inline bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// A connection of the test's own, beside the store's: to build foreign files and to look under the API. It waits
/// for a lock as the store does (a worker thread may be writing, or the store's last connection checkpointing on
/// close), rather than failing at once with "database is locked".
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) throw std::runtime_error(sqlite3_errmsg(db_));
    sqlite3_busy_timeout(db_, 10000);
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string msg = err ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error(sql + ": " + msg);
    }
  }
  /// The first column of the first row as text ("" when NULL or no row).
  std::string text(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK)
      throw std::runtime_error(sql + ": " + sqlite3_errmsg(db_));
    std::string out;
    const int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW && sqlite3_column_text(stmt, 0))
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    sqlite3_finalize(stmt);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) throw std::runtime_error(sql + ": " + sqlite3_errstr(rc));
    return out;
  }
  long long integer(const std::string& sql) {
    const std::string t = text(sql);
    return t.empty() ? 0 : std::stoll(t);
  }
  sqlite3* handle() { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

/// A full disk without root: while alive, this process cannot write any file past offset `bytes` (RLIMIT_FSIZE;
/// such writes fail with EFBIG, SIGXFSZ ignored; 0: nothing can be written). SQLite reports it as a full disk, the
/// checkpoint writer as a failed write.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(std::uint64_t bytes) {
    ::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    rlimit limit = saved_;
    limit.rlim_cur = static_cast<rlim_t>(bytes);
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) throw std::runtime_error("setrlimit(RLIMIT_FSIZE) failed");
  }
  ~FileSizeLimit() { lift(); }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  void lift() { ::setrlimit(RLIMIT_FSIZE, &saved_); }

 private:
  rlimit saved_{};
};

/// The largest of a store's files (the database and its WAL): a FileSizeLimit a little above it leaves the store
/// room to write while a larger file (a checkpoint) cannot be written.
inline std::uint64_t store_bytes(const std::string& db_path) {
  std::uint64_t most = 0;
  for (const std::string suffix : {"", "-wal"}) {
    std::ifstream in(db_path + suffix, std::ios::binary | std::ios::ate);
    if (in) most = std::max<std::uint64_t>(most, static_cast<std::uint64_t>(in.tellg()));
  }
  return most;
}

/// While alive, the files of folder `home` seen read-only in folder `view`: a read-only bind mount where this process
/// may make one (root: access() grants root everything, so permissions alone would not do), else `home` moved to
/// `view` and `file` in it and the folder left without write permission (moved back on the way out).
class ReadOnlyView {
 public:
  ReadOnlyView(std::filesystem::path home, std::filesystem::path view, std::string file)
      : home_(std::move(home)), view_(std::move(view)), file_(std::move(file)) {
    if (::geteuid() == 0) {
      std::filesystem::create_directories(view_);
      mounted_ = ::mount(home_.c_str(), view_.c_str(), nullptr, MS_BIND, nullptr) == 0 &&
                 ::mount(nullptr, view_.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) == 0;
      if (!mounted_) ::umount(view_.c_str());
      return;
    }
    std::filesystem::remove_all(view_);
    std::filesystem::rename(home_, view_);
    moved_ = true;
    ::chmod((view_ / file_).c_str(), 0444);
    ::chmod(view_.c_str(), 0555);
  }
  ~ReadOnlyView() {
    if (mounted_) ::umount(view_.c_str());
    if (!moved_) return;
    ::chmod(view_.c_str(), 0755);
    ::chmod((view_ / file_).c_str(), 0644);
    std::error_code ec;
    std::filesystem::rename(view_, home_, ec);
  }
  ReadOnlyView(const ReadOnlyView&) = delete;
  ReadOnlyView& operator=(const ReadOnlyView&) = delete;
  /// False where nothing can be read-only here (root, and no mount allowed): the test skips.
  bool made() const { return mounted_ || moved_; }

 private:
  std::filesystem::path home_, view_;
  std::string file_;
  bool mounted_ = false, moved_ = false;
};

}  // namespace routelab::test
