// Internal to core/store (not part of the store's API): the SQLite statement wrapper and the helpers the store's
// source files share (run_store.cpp, run_lease.cpp, run_queue_store.cpp).
#pragma once
#include <sqlite3.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <limits>
#include <optional>
#include <string>

#include "core/util/errors.h"
#include "core/util/logging.h"

namespace routelab::store_detail {

/// NaN is stored as this text in REAL columns (SQLite turns a bound NaN into NULL).
constexpr const char* kNanText = "nan";

inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

inline std::string local_iso_time(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

[[noreturn]] inline void fail(sqlite3* db, const std::string& path, const std::string& what) {
  throw StoreError(path + ": " + what + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

/// A prepared statement that finalizes itself. Binding is 1-based like sqlite3_bind_*; columns are 0-based.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) fail(db_, path_, "cannot prepare query");
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, std::int64_t v) { return check(sqlite3_bind_int64(stmt_, i, v)); }
  Statement& bind(int i, int v) { return check(sqlite3_bind_int64(stmt_, i, v)); }
  Statement& bind(int i, bool v) { return check(sqlite3_bind_int64(stmt_, i, v ? 1 : 0)); }
  Statement& bind(int i, const std::string& v) {
    return check(sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Statement& bind(int i, const char* v) { return check(sqlite3_bind_text(stmt_, i, v, -1, SQLITE_STATIC)); }
  /// NaN as the text 'nan'; everything else, +-Inf included, as REAL.
  Statement& bind(int i, double v) {
    if (std::isnan(v)) return bind(i, kNanText);
    return check(sqlite3_bind_double(stmt_, i, v));
  }
  Statement& bind_null(int i) { return check(sqlite3_bind_null(stmt_, i)); }
  template <class T>
  Statement& bind(int i, const std::optional<T>& v) {
    return v ? bind(i, *v) : bind_null(i);
  }

  /// Steps once: true while a row is available, false when done.
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(db_, path_, "query failed");
  }
  /// Steps a statement that returns no rows, then resets it for the next binding.
  void run() {
    while (step()) {
    }
    sqlite3_reset(stmt_);
  }

  bool is_null(int c) const { return sqlite3_column_type(stmt_, c) == SQLITE_NULL; }
  std::int64_t int64(int c) const { return sqlite3_column_int64(stmt_, c); }
  std::string text(int c) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, c));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, c))) : std::string();
  }
  /// Decodes the 'nan' text (and a NULL) back to a quiet NaN.
  double real(int c) const {
    const int type = sqlite3_column_type(stmt_, c);
    if (type == SQLITE_TEXT || type == SQLITE_NULL) return std::numeric_limits<double>::quiet_NaN();
    return sqlite3_column_double(stmt_, c);
  }
  std::optional<double> optional_real(int c) const { return is_null(c) ? std::nullopt : std::optional(real(c)); }
  std::optional<std::int64_t> optional_int64(int c) const {
    return is_null(c) ? std::nullopt : std::optional(int64(c));
  }

 private:
  Statement& check(int rc) {
    if (rc != SQLITE_OK) fail(db_, path_, "cannot bind a query parameter");
    return *this;
  }

  sqlite3* db_;
  const std::string& path_;
  sqlite3_stmt* stmt_ = nullptr;
};

inline void exec(sqlite3* db, const std::string& path, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    throw StoreError(path + ": " + msg + " (in: " + std::string(sql).substr(0, 60) + ")");
  }
}

inline std::int64_t query_int(sqlite3* db, const std::string& path, const char* sql) {
  Statement s(db, path, sql);
  return s.step() ? s.int64(0) : 0;
}

inline std::shared_ptr<spdlog::logger> store_log() { return logger("store"); }

/// Marks `token` as held by a writer of this process (run_lease.cpp keeps the set).
void hold_lease_in_process(const std::string& token);

}  // namespace routelab::store_detail
