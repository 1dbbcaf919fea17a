// RunStore: the SQLite C API behind the run store. Opening refuses foreign or newer files before anything is
// written, then switches to WAL and migrates by PRAGMA user_version. NaN is stored as the text 'nan' in REAL
// columns (SQLite turns a bound NaN into NULL); +-Inf are ordinary REAL values.
#include "core/store/run_store.h"

#include <sqlite3.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "core/util/errors.h"
#include "core/util/logging.h"

namespace fs = std::filesystem;

namespace routelab {
namespace {

constexpr std::int32_t kApplicationId = 0x524C4142;  // "RLAB"
constexpr const char* kNanText = "nan";

/// One schema step: the SQL that takes a v(to_version - 1) store to v(to_version). Append a step for v2; never
/// edit a released one.
struct Migration {
  int to_version;
  const char* sql;
};

constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE runs (
  id                INTEGER PRIMARY KEY AUTOINCREMENT,  -- ids are never reused: checkpoint dirs are named after them
  name              TEXT    NOT NULL,
  arch              TEXT    NOT NULL,
  preset            TEXT    NOT NULL DEFAULT '',
  config_json       TEXT    NOT NULL DEFAULT '{}',
  config_hash       TEXT    NOT NULL DEFAULT '',
  seed              INTEGER NOT NULL DEFAULT 0,
  device            TEXT    NOT NULL DEFAULT 'cpu',
  routelab_version  TEXT    NOT NULL DEFAULT '',
  torch_version     TEXT    NOT NULL DEFAULT '',
  qt_version        TEXT    NOT NULL DEFAULT '',
  status            TEXT    NOT NULL DEFAULT 'running'
                    CHECK (status IN ('running', 'finished', 'failed', 'stopped', 'crashed')),
  message           TEXT    NOT NULL DEFAULT '',
  created_at        REAL    NOT NULL,                   -- unix seconds
  ended_at          REAL,
  heartbeat_at      REAL,
  parent_run_id     INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  resumed_from_step INTEGER,
  total_steps       INTEGER NOT NULL DEFAULT 0,
  rank              INTEGER NOT NULL DEFAULT 0,
  world_size        INTEGER NOT NULL DEFAULT 1,
  tags              TEXT    NOT NULL DEFAULT '',
  notes             TEXT    NOT NULL DEFAULT '',
  archived          INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_status ON runs(status);

-- REAL value columns hold the text 'nan' for NaN.
CREATE TABLE metrics (
  run_id    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  key       TEXT    NOT NULL,
  step      INTEGER NOT NULL,
  wall_time REAL    NOT NULL,
  value     REAL    NOT NULL
);
CREATE INDEX metrics_run_key_step ON metrics(run_id, key, step);

CREATE TABLE routing (
  run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step            INTEGER NOT NULL,
  layer           INTEGER NOT NULL,
  routed_fraction REAL    NOT NULL,
  gate_mean       REAL    NOT NULL,
  aux_loss        REAL    NOT NULL,
  tokens_attn     INTEGER NOT NULL,
  tokens_mlp      INTEGER NOT NULL
);
CREATE INDEX routing_run_step ON routing(run_id, step, layer);

CREATE TABLE evals (
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step       INTEGER NOT NULL,
  split      TEXT    NOT NULL,
  loss       REAL    NOT NULL,
  ppl        REAL    NOT NULL,
  bpc        REAL    NOT NULL,
  extra_json TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX evals_run_step ON evals(run_id, step);

CREATE TABLE checkpoints (
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step       INTEGER NOT NULL,
  path       TEXT    NOT NULL,
  bytes      INTEGER NOT NULL,
  created_at REAL    NOT NULL
);
CREATE INDEX checkpoints_run_step ON checkpoints(run_id, step);

CREATE TABLE probes (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step   INTEGER NOT NULL,
  json   TEXT    NOT NULL
);
CREATE INDEX probes_run_step ON probes(run_id, step);
)sql";

// v2: the persisted run queue of the GUI. Runs are untouched; a v1 store keeps every row.
constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE queue (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  position     INTEGER NOT NULL,
  request_json TEXT    NOT NULL DEFAULT '{}',
  state        TEXT    NOT NULL DEFAULT 'pending'
               CHECK (state IN ('pending', 'running', 'done', 'failed', 'cancelled')),
  run_id       INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  created_at   REAL    NOT NULL,
  message      TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX queue_position ON queue(position, id);
)sql";

constexpr Migration kMigrations[] = {
    {1, kSchemaV1},
    {2, kSchemaV2},
};
static_assert(std::size(kMigrations) == RunStore::kSchemaVersion, "one migration step per schema version");

constexpr const char* kRunColumns =
    "r.id, r.name, r.arch, r.preset, r.config_json, r.config_hash, r.seed, r.device, r.routelab_version, "
    "r.torch_version, r.qt_version, r.status, r.message, r.created_at, r.ended_at, r.heartbeat_at, "
    "r.parent_run_id, r.resumed_from_step, r.total_steps, r.world_size, r.tags, r.notes, r.archived, "
    "(SELECT m.step FROM metrics m WHERE m.run_id = r.id AND m.key = 'train/loss' "
    "  ORDER BY m.step DESC, m.rowid DESC LIMIT 1), "
    "(SELECT m.value FROM metrics m WHERE m.run_id = r.id AND m.key = 'train/loss' "
    "  ORDER BY m.step DESC, m.rowid DESC LIMIT 1), "
    "(SELECT m.value FROM metrics m WHERE m.run_id = r.id AND m.key = 'val/loss' "
    "  ORDER BY m.step DESC, m.rowid DESC LIMIT 1), "
    "(SELECT MIN(m.value) FROM metrics m WHERE m.run_id = r.id AND m.key = 'val/loss' "
    "  AND typeof(m.value) = 'real'), "
    "(SELECT MAX(c.step) FROM checkpoints c WHERE c.run_id = r.id)";

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string local_iso_time(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

[[noreturn]] void fail(sqlite3* db, const std::string& path, const std::string& what) {
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

void exec(sqlite3* db, const std::string& path, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    throw StoreError(path + ": " + msg + " (in: " + std::string(sql).substr(0, 60) + ")");
  }
}

std::int64_t query_int(sqlite3* db, const std::string& path, const char* sql) {
  Statement s(db, path, sql);
  return s.step() ? s.int64(0) : 0;
}

/// Reads what identifies the file, without writing to it, and throws unless it is a RouteLab store of a schema
/// this build knows or a blank database. Must run before anything that writes (journal_mode=WAL rewrites the
/// header), so a refused file is left byte-for-byte untouched.
void check_identity(sqlite3* db, const std::string& path) {
  std::int64_t app_id = 0;
  try {
    // The first read of page 1: a file that is not SQLite at all fails here with SQLITE_NOTADB.
    app_id = query_int(db, path, "PRAGMA application_id");
  } catch (const StoreError&) {
    if (sqlite3_errcode(db) == SQLITE_NOTADB)
      throw StoreError(path + ": not a RouteLab run store (it is not an SQLite database)");
    throw;
  }
  const std::int64_t version = query_int(db, path, "PRAGMA user_version");
  const std::int64_t tables =
      query_int(db, path, "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'");
  if (app_id == kApplicationId) {
    if (version > RunStore::kSchemaVersion)
      throw StoreError(path + ": schema version " + std::to_string(version) +
                       " is newer than this RouteLab supports (" + std::to_string(RunStore::kSchemaVersion) +
                       "); upgrade RouteLab");
    return;
  }
  if (app_id != 0 || tables > 0 || version != 0)
    throw StoreError(path + ": not a RouteLab run store (it is an SQLite database of another application)");
}

RunRecord read_run(const Statement& s) {
  RunRecord r;
  r.id = s.int64(0);
  r.name = s.text(1);
  r.arch = s.text(2);
  r.preset = s.text(3);
  r.config_json = s.text(4);
  r.config_hash = s.text(5);
  r.seed = s.int64(6);
  r.device = s.text(7);
  r.routelab_version = s.text(8);
  r.torch_version = s.text(9);
  r.qt_version = s.text(10);
  r.status = parse_run_status(s.text(11));
  r.message = s.text(12);
  r.created_at = s.real(13);
  r.ended_at = s.is_null(14) ? 0.0 : s.real(14);
  r.heartbeat_at = s.is_null(15) ? 0.0 : s.real(15);
  r.parent_run_id = s.optional_int64(16);
  r.resumed_from_step = s.optional_int64(17);
  r.total_steps = s.int64(18);
  r.world_size = static_cast<int>(s.int64(19));
  r.tags = s.text(20);
  r.notes = s.text(21);
  r.archived = s.int64(22) != 0;
  r.last_step = s.is_null(23) ? 0 : s.int64(23);
  r.last_train_loss = s.optional_real(24);
  r.last_val_loss = s.optional_real(25);
  r.best_val_loss = s.optional_real(26);
  r.checkpoint_step = s.optional_int64(27);
  return r;
}

constexpr const char* kQueueColumns = "id, position, request_json, state, run_id, created_at, message";

QueueItem read_queue_item(const Statement& s) {
  QueueItem q;
  q.id = s.int64(0);
  q.position = s.int64(1);
  q.request_json = s.text(2);
  q.state = parse_queue_state(s.text(3));
  q.run_id = s.optional_int64(4);
  q.created_at = s.real(5);
  q.message = s.text(6);
  return q;
}

std::shared_ptr<spdlog::logger> store_log() { return logger("store"); }

}  // namespace

std::string to_string(RunStatus status) {
  switch (status) {
    case RunStatus::Running: return "running";
    case RunStatus::Finished: return "finished";
    case RunStatus::Failed: return "failed";
    case RunStatus::Stopped: return "stopped";
    case RunStatus::Crashed: return "crashed";
  }
  return "unknown";
}

RunStatus parse_run_status(const std::string& text) {
  for (RunStatus s : {RunStatus::Running, RunStatus::Finished, RunStatus::Failed, RunStatus::Stopped,
                      RunStatus::Crashed})
    if (to_string(s) == text) return s;
  throw StoreError("unknown run status '" + text + "'");
}

std::string to_string(QueueState state) {
  switch (state) {
    case QueueState::Pending: return "pending";
    case QueueState::Running: return "running";
    case QueueState::Done: return "done";
    case QueueState::Failed: return "failed";
    case QueueState::Cancelled: return "cancelled";
  }
  return "unknown";
}

QueueState parse_queue_state(const std::string& text) {
  for (QueueState s : {QueueState::Pending, QueueState::Running, QueueState::Done, QueueState::Failed,
                       QueueState::Cancelled})
    if (to_string(s) == text) return s;
  throw StoreError("unknown queue state '" + text + "'");
}

RunStore::RunStore(const std::string& path, bool mark_crashed) : path_(path) {
  const bool in_memory = path.empty() || path == ":memory:";
  if (!in_memory) {
    const fs::path file(path);
    std::error_code ec;
    if (fs::is_directory(file, ec)) throw StoreError(path + ": is a folder, not a run store file");
    if (file.has_parent_path()) {
      fs::create_directories(file.parent_path(), ec);
      if (ec) throw StoreError(path + ": cannot create its folder: " + ec.message());
    }
  }
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw StoreError(path + ": cannot open: " + msg);
  }
  try {
    sqlite3_busy_timeout(db_, 5000);
    check_identity(db_, path_);
    // From here on the file is ours (or blank) and may be written.
    exec(db_, path_, "PRAGMA foreign_keys = ON");
    {
      Statement mode(db_, path_, "PRAGMA journal_mode = WAL");
      if (mode.step() && mode.text(0) != "wal" && !in_memory)
        store_log()->warn("{}: WAL journal unavailable (journal_mode is '{}'); readers may wait on writers", path_,
                    mode.text(0));
    }
    exec(db_, path_, "PRAGMA synchronous = NORMAL");  // safe in WAL mode; durable except on power loss
    migrate();
    if (mark_crashed) mark_stale_runs_crashed();
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

RunStore::~RunStore() {
  if (db_ && sqlite3_close(db_) != SQLITE_OK)
    store_log()->error("{}: cannot close the run store: {}", path_, sqlite3_errmsg(db_));
}

void RunStore::begin() { exec(db_, path_, "BEGIN IMMEDIATE"); }

void RunStore::commit() {
  try {
    exec(db_, path_, "COMMIT");
  } catch (...) {
    rollback();
    throw;
  }
}

void RunStore::rollback() {
  // SQLite may already have rolled back by itself (e.g. after SQLITE_FULL); a second ROLLBACK would fail.
  if (sqlite3_get_autocommit(db_)) return;
  if (sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr) != SQLITE_OK)
    store_log()->error("{}: rollback failed: {}", path_, sqlite3_errmsg(db_));
}

void RunStore::migrate() {
  if (query_int(db_, path_, "PRAGMA user_version") >= kSchemaVersion) return;
  transaction([&] {
    // Re-read under the write lock: another process may have migrated since.
    const std::int64_t from = query_int(db_, path_, "PRAGMA user_version");
    if (from > kSchemaVersion)
      throw StoreError(path_ + ": schema version " + std::to_string(from) +
                       " is newer than this RouteLab supports (" + std::to_string(kSchemaVersion) +
                       "); upgrade RouteLab");
    for (const Migration& m : kMigrations) {
      if (m.to_version <= from) continue;
      exec(db_, path_, m.sql);
      exec(db_, path_, ("PRAGMA user_version = " + std::to_string(m.to_version)).c_str());
    }
    exec(db_, path_, ("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str());
    if (from == 0)
      store_log()->info("{}: created a run store (schema version {})", path_, kSchemaVersion);
    else
      store_log()->info("{}: migrated the run store from schema version {} to {}", path_, from, kSchemaVersion);
  });
}

std::int64_t RunStore::create_run(const NewRun& run) {
  Statement s(db_, path_,
              "INSERT INTO runs (name, arch, preset, config_json, config_hash, seed, device, routelab_version, "
              "torch_version, qt_version, status, message, created_at, heartbeat_at, parent_run_id, "
              "resumed_from_step, total_steps, rank, world_size) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'running', '', ?11, ?11, ?12, ?13, ?14, ?15, ?16)");
  s.bind(1, run.name).bind(2, run.arch).bind(3, run.preset).bind(4, run.config_json).bind(5, run.config_hash);
  s.bind(6, run.seed).bind(7, run.device).bind(8, run.routelab_version).bind(9, run.torch_version);
  s.bind(10, run.qt_version).bind(11, now_seconds()).bind(12, run.parent_run_id).bind(13, run.resumed_from_step);
  s.bind(14, run.total_steps).bind(15, run.rank).bind(16, run.world_size);
  s.run();
  return sqlite3_last_insert_rowid(db_);
}

void RunStore::set_status(std::int64_t run_id, RunStatus status, const std::string& message) {
  const double now = now_seconds();
  if (status == RunStatus::Running) {
    // Resuming: the run is alive again, so its heartbeat is fresh and it has no end.
    Statement s(db_, path_,
                "UPDATE runs SET status = 'running', message = ?1, ended_at = NULL, heartbeat_at = ?2 WHERE id = ?3");
    s.bind(1, message).bind(2, now).bind(3, run_id).run();
  } else {
    Statement s(db_, path_, "UPDATE runs SET status = ?1, message = ?2, ended_at = ?3 WHERE id = ?4");
    s.bind(1, to_string(status)).bind(2, message).bind(3, now).bind(4, run_id).run();
  }
  if (sqlite3_changes(db_) == 0) throw StoreError(path_ + ": no run " + std::to_string(run_id));
}

void RunStore::heartbeat(std::int64_t run_id) {
  Statement s(db_, path_, "UPDATE runs SET heartbeat_at = ?1 WHERE id = ?2");
  s.bind(1, now_seconds()).bind(2, run_id).run();
  if (sqlite3_changes(db_) == 0) throw StoreError(path_ + ": no run " + std::to_string(run_id));
}

void RunStore::patch_run(std::int64_t run_id, const RunPatch& patch) {
  std::string sql = "UPDATE runs SET ";
  int n = 0;
  auto column = [&](const char* name, bool present) {
    if (!present) return;
    if (n > 0) sql += ", ";
    ++n;
    sql += std::string(name) + " = ?" + std::to_string(n);
  };
  column("name", patch.name.has_value());
  column("tags", patch.tags.has_value());
  column("notes", patch.notes.has_value());
  column("archived", patch.archived.has_value());
  column("resumed_from_step", patch.resumed_from_step.has_value());
  if (n == 0) return;
  sql += " WHERE id = ?" + std::to_string(n + 1);
  Statement s(db_, path_, sql.c_str());
  int i = 0;
  if (patch.name) s.bind(++i, *patch.name);
  if (patch.tags) s.bind(++i, *patch.tags);
  if (patch.notes) s.bind(++i, *patch.notes);
  if (patch.archived) s.bind(++i, *patch.archived);
  if (patch.resumed_from_step) s.bind(++i, *patch.resumed_from_step);
  s.bind(++i, run_id).run();
  if (sqlite3_changes(db_) == 0) throw StoreError(path_ + ": no run " + std::to_string(run_id));
}

void RunStore::delete_run(std::int64_t run_id) {
  Statement s(db_, path_, "DELETE FROM runs WHERE id = ?1");  // child rows go by ON DELETE CASCADE
  s.bind(1, run_id).run();
  if (sqlite3_changes(db_) == 0) throw StoreError(path_ + ": no run " + std::to_string(run_id));
}

int RunStore::mark_stale_runs_crashed(double stale_after_seconds) {
  const double cutoff = now_seconds() - stale_after_seconds;
  std::vector<std::pair<std::int64_t, double>> stale;  // (id, last heartbeat)
  {
    Statement s(db_, path_,
                "SELECT id, COALESCE(heartbeat_at, created_at) FROM runs "
                "WHERE status = 'running' AND COALESCE(heartbeat_at, created_at) < ?1");
    s.bind(1, cutoff);
    while (s.step()) stale.emplace_back(s.int64(0), s.real(1));
  }
  if (stale.empty()) return 0;
  int marked = 0;
  transaction([&] {
    // The condition is repeated: a writer may have beaten its heartbeat since the SELECT.
    Statement s(db_, path_,
                "UPDATE runs SET status = 'crashed', message = ?1, ended_at = ?2 "
                "WHERE id = ?3 AND status = 'running' AND COALESCE(heartbeat_at, created_at) < ?4");
    for (const auto& [id, last_beat] : stale) {
      s.bind(1, "no heartbeat since " + local_iso_time(last_beat) +
                    ": the process ended without recording a final status");
      s.bind(2, last_beat).bind(3, id).bind(4, cutoff).run();
      marked += sqlite3_changes(db_);
    }
  });
  if (marked > 0) store_log()->info("{}: marked {} stale run{} crashed", path_, marked, marked == 1 ? "" : "s");
  return marked;
}

void RunStore::insert_metrics(std::int64_t run_id, const std::vector<MetricRow>& rows) {
  if (rows.empty()) return;
  auto write = [&] {
    Statement s(db_, path_, "INSERT INTO metrics (run_id, key, step, wall_time, value) VALUES (?1, ?2, ?3, ?4, ?5)");
    s.bind(1, run_id);
    for (const MetricRow& r : rows) s.bind(2, r.key).bind(3, r.step).bind(4, r.wall_time).bind(5, r.value).run();
  };
  if (sqlite3_get_autocommit(db_))
    transaction(write);
  else
    write();
}

void RunStore::insert_routing(std::int64_t run_id, const std::vector<RoutingRow>& rows) {
  if (rows.empty()) return;
  auto write = [&] {
    Statement s(db_, path_,
                "INSERT INTO routing (run_id, step, layer, routed_fraction, gate_mean, aux_loss, tokens_attn, "
                "tokens_mlp) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    s.bind(1, run_id);
    for (const RoutingRow& r : rows) {
      s.bind(2, r.step).bind(3, r.layer).bind(4, r.routed_fraction).bind(5, r.gate_mean).bind(6, r.aux_loss);
      s.bind(7, r.tokens_attn).bind(8, r.tokens_mlp).run();
    }
  };
  if (sqlite3_get_autocommit(db_))
    transaction(write);
  else
    write();
}

void RunStore::insert_eval(std::int64_t run_id, const EvalRow& row) {
  Statement s(db_, path_,
              "INSERT INTO evals (run_id, step, split, loss, ppl, bpc, extra_json) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  s.bind(1, run_id).bind(2, row.step).bind(3, row.split).bind(4, row.loss).bind(5, row.ppl).bind(6, row.bpc);
  s.bind(7, row.extra_json).run();
}

void RunStore::insert_checkpoint(std::int64_t run_id, const CheckpointRow& row) {
  Statement s(db_, path_,
              "INSERT INTO checkpoints (run_id, step, path, bytes, created_at) VALUES (?1, ?2, ?3, ?4, ?5)");
  s.bind(1, run_id).bind(2, row.step).bind(3, row.path).bind(4, row.bytes).bind(5, row.created_at).run();
}

void RunStore::insert_probe(std::int64_t run_id, const ProbeRow& row) {
  Statement s(db_, path_, "INSERT INTO probes (run_id, step, json) VALUES (?1, ?2, ?3)");
  s.bind(1, run_id).bind(2, row.step).bind(3, row.json).run();
}

void RunStore::truncate_after(std::int64_t run_id, std::int64_t step) {
  transaction([&] {
    for (const char* sql : {"DELETE FROM metrics WHERE run_id = ?1 AND step > ?2",
                            "DELETE FROM routing WHERE run_id = ?1 AND step > ?2",
                            "DELETE FROM evals WHERE run_id = ?1 AND step > ?2",
                            "DELETE FROM probes WHERE run_id = ?1 AND step > ?2",
                            "DELETE FROM checkpoints WHERE run_id = ?1 AND step > ?2"}) {
      Statement s(db_, path_, sql);
      s.bind(1, run_id).bind(2, step).run();
    }
  });
}

std::vector<RunRecord> RunStore::list_runs(bool include_archived) const {
  const std::string sql =
      std::string("SELECT ") + kRunColumns + " FROM runs r WHERE ?1 OR r.archived = 0 ORDER BY r.id DESC";
  Statement s(db_, path_, sql.c_str());
  s.bind(1, include_archived);
  std::vector<RunRecord> out;
  while (s.step()) out.push_back(read_run(s));
  return out;
}

std::optional<RunRecord> RunStore::run(std::int64_t run_id) const {
  const std::string sql = std::string("SELECT ") + kRunColumns + " FROM runs r WHERE r.id = ?1";
  Statement s(db_, path_, sql.c_str());
  s.bind(1, run_id);
  if (!s.step()) return std::nullopt;
  return read_run(s);
}

std::vector<std::string> RunStore::metric_keys(std::int64_t run_id) const {
  Statement s(db_, path_, "SELECT DISTINCT key FROM metrics WHERE run_id = ?1 ORDER BY key");
  s.bind(1, run_id);
  std::vector<std::string> out;
  while (s.step()) out.push_back(s.text(0));
  return out;
}

std::vector<MetricPoint> RunStore::metric(std::int64_t run_id, const std::string& key,
                                          std::int64_t after_step) const {
  Statement s(db_, path_,
              "SELECT step, wall_time, value FROM metrics WHERE run_id = ?1 AND key = ?2 AND step > ?3 "
              "ORDER BY step, rowid");
  s.bind(1, run_id).bind(2, key).bind(3, after_step);
  std::vector<MetricPoint> out;
  while (s.step()) out.push_back({s.int64(0), s.real(1), s.real(2)});
  return out;
}

std::vector<RoutingRow> RunStore::routing(std::int64_t run_id, std::int64_t after_step) const {
  Statement s(db_, path_,
              "SELECT step, layer, routed_fraction, gate_mean, aux_loss, tokens_attn, tokens_mlp FROM routing "
              "WHERE run_id = ?1 AND step > ?2 ORDER BY step, layer, rowid");
  s.bind(1, run_id).bind(2, after_step);
  std::vector<RoutingRow> out;
  while (s.step())
    out.push_back({s.int64(0), static_cast<int>(s.int64(1)), s.real(2), s.real(3), s.real(4), s.int64(5),
                   s.int64(6)});
  return out;
}

std::vector<EvalRow> RunStore::evals(std::int64_t run_id) const {
  Statement s(db_, path_,
              "SELECT step, split, loss, ppl, bpc, extra_json FROM evals WHERE run_id = ?1 ORDER BY step, rowid");
  s.bind(1, run_id);
  std::vector<EvalRow> out;
  while (s.step()) out.push_back({s.int64(0), s.text(1), s.real(2), s.real(3), s.real(4), s.text(5)});
  return out;
}

std::vector<CheckpointRow> RunStore::checkpoints(std::int64_t run_id) const {
  Statement s(db_, path_,
              "SELECT step, path, bytes, created_at FROM checkpoints WHERE run_id = ?1 ORDER BY step, rowid");
  s.bind(1, run_id);
  std::vector<CheckpointRow> out;
  while (s.step()) out.push_back({s.int64(0), s.text(1), s.int64(2), s.real(3)});
  return out;
}

std::optional<CheckpointRow> RunStore::latest_checkpoint(std::int64_t run_id) const {
  Statement s(db_, path_,
              "SELECT step, path, bytes, created_at FROM checkpoints WHERE run_id = ?1 "
              "ORDER BY step DESC, rowid DESC LIMIT 1");
  s.bind(1, run_id);
  if (!s.step()) return std::nullopt;
  return CheckpointRow{s.int64(0), s.text(1), s.int64(2), s.real(3)};
}

std::vector<ProbeRow> RunStore::probes(std::int64_t run_id) const {
  Statement s(db_, path_, "SELECT step, json FROM probes WHERE run_id = ?1 ORDER BY step, rowid");
  s.bind(1, run_id);
  std::vector<ProbeRow> out;
  while (s.step()) out.push_back({s.int64(0), s.text(1)});
  return out;
}

std::int64_t RunStore::enqueue(const std::string& request_json, QueueState state) {
  Statement s(db_, path_,
              "INSERT INTO queue (position, request_json, state, created_at) "
              "VALUES ((SELECT COALESCE(MAX(position), -1) + 1 FROM queue), ?1, ?2, ?3)");
  s.bind(1, request_json).bind(2, to_string(state)).bind(3, now_seconds()).run();
  return sqlite3_last_insert_rowid(db_);
}

std::vector<QueueItem> RunStore::queue_items() const {
  const std::string sql = std::string("SELECT ") + kQueueColumns + " FROM queue ORDER BY position, id";
  Statement s(db_, path_, sql.c_str());
  std::vector<QueueItem> out;
  while (s.step()) out.push_back(read_queue_item(s));
  return out;
}

std::optional<QueueItem> RunStore::queue_item(std::int64_t id) const {
  const std::string sql = std::string("SELECT ") + kQueueColumns + " FROM queue WHERE id = ?1";
  Statement s(db_, path_, sql.c_str());
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return read_queue_item(s);
}

void RunStore::update_queue_item(std::int64_t id, QueueState state, std::optional<std::int64_t> run_id,
                                 const std::string& message, const std::optional<std::string>& request_json) {
  Statement s(db_, path_,
              "UPDATE queue SET state = ?1, run_id = COALESCE(?2, run_id), message = ?3, "
              "request_json = COALESCE(?4, request_json) WHERE id = ?5");
  s.bind(1, to_string(state)).bind(2, run_id).bind(3, message).bind(4, request_json).bind(5, id).run();
  if (sqlite3_changes(db_) == 0) throw StoreError(path_ + ": no queue item " + std::to_string(id));
}

void RunStore::reorder_queue(const std::vector<std::int64_t>& ids) {
  transaction([&] {
    Statement s(db_, path_, "UPDATE queue SET position = ?1 WHERE id = ?2");
    std::int64_t position = 0;
    for (std::int64_t id : ids) {
      s.bind(1, position++).bind(2, id).run();
      if (sqlite3_changes(db_) == 0) throw StoreError(path_ + ": no queue item " + std::to_string(id));
    }
  });
}

void RunStore::remove_queue_item(std::int64_t id) {
  Statement s(db_, path_, "DELETE FROM queue WHERE id = ?1");
  s.bind(1, id).run();
  if (sqlite3_changes(db_) == 0) throw StoreError(path_ + ": no queue item " + std::to_string(id));
}

int RunStore::clear_finished_queue_items() {
  Statement s(db_, path_, "DELETE FROM queue WHERE state IN ('done', 'failed', 'cancelled')");
  s.run();
  return sqlite3_changes(db_);
}

int RunStore::fail_interrupted_queue_items(const std::string& message) {
  Statement s(db_, path_, "UPDATE queue SET state = 'failed', message = ?1 WHERE state = 'running'");
  s.bind(1, message).run();
  return sqlite3_changes(db_);
}

}  // namespace routelab
