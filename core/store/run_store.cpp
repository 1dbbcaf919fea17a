// RunStore: the SQLite C API behind the run store. Opening refuses foreign or newer files before anything is
// written, then switches to WAL and migrates by PRAGMA user_version. The lease is in run_lease.cpp, the queue in
// run_queue_store.cpp, the shared statement wrapper in sqlite_detail.h. NaN is stored as the text 'nan' in REAL
// columns (SQLite turns a bound NaN into NULL); +-Inf are ordinary REAL values.
#include "core/store/run_store.h"

#include <sqlite3.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/store/sqlite_detail.h"
#include "core/store/store_schema.h"
#include "core/util/content_hash.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "core/util/paths.h"

namespace fs = std::filesystem;

namespace routelab {
using namespace store_detail;
namespace {

constexpr std::int32_t kApplicationId = 0x524C4142;  // "RLAB"

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
    "(SELECT MAX(c.step) FROM checkpoints c WHERE c.run_id = r.id), r.backend";

/// Well-formed UTF-8 (no overlong forms, surrogates or code points above U+10FFFF).
bool valid_utf8(const std::string& text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const unsigned char c = *p;
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++p;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (static_cast<std::size_t>(end - p) <= n) return false;
    for (std::size_t i = 1; i <= n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += n + 1;
  }
  return true;
}

void check_name(const std::string& path, const std::string& name) {
  if (!valid_utf8(name)) throw StoreError(path + ": a run name must be valid UTF-8");
  if (name.size() > RunStore::kMaxNameBytes)
    throw StoreError(path + ": a run name is at most " + std::to_string(RunStore::kMaxNameBytes) + " bytes (this one is " +
                     std::to_string(name.size()) + ")");
}

/// A file URI for sqlite3_open_v2 with SQLITE_OPEN_URI: '%', '?' and '#' escaped.
std::string file_uri(const std::string& path, const char* query) {
  std::string uri = "file:";
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      uri += buf;
    } else {
      uri += c;
    }
  }
  return uri + "?" + query;
}

/// Whether this process may write `file` and create the journal files beside it (false on a read-only mount).
bool writable(const fs::path& file) {
  if (!fs::exists(file)) return true;  // created (or refused) by SQLite itself
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  return ::access(file.c_str(), W_OK) == 0 && ::access(dir.c_str(), W_OK) == 0;
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
  r.backend = s.text(28);
  return r;
}

/// A checkpoint row as stored (the path not yet resolved): step, path, bytes, created_at, crc32.
CheckpointRow read_checkpoint(const Statement& s) {
  CheckpointRow row{s.int64(0), s.text(1), s.int64(2), s.real(3), std::nullopt};
  if (!s.is_null(4)) row.crc32 = static_cast<std::uint32_t>(s.int64(4));
  return row;
}

/// A copy in memory of the database open on `db` (a read-only store of schema `version`, older than this build's),
/// to be migrated there and read as a current store while the file stays as it is. Refused, with what to do
/// instead, where the copy would take more than half of the memory free now.
sqlite3* copy_into_memory(sqlite3* db, const std::string& path, std::int64_t version) {
  const std::string old_schema = path + ": the store is read-only here and has schema version " +
                                 std::to_string(version) + "; this RouteLab reads version " +
                                 std::to_string(RunStore::kSchemaVersion);
  std::error_code ec;
  const double bytes = static_cast<double>(fs::file_size(path, ec));
  const double free_bytes =
      static_cast<double>(std::max(0L, ::sysconf(_SC_AVPHYS_PAGES))) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (ec || bytes > free_bytes / 2) {
    char sizes[128];
    std::snprintf(sizes, sizeof sizes, " (%.0f MB, against %.0f MB of memory free)", bytes / 1e6, free_bytes / 1e6);
    throw StoreError(old_schema + ": too large to upgrade in memory" + (ec ? std::string() : sizes) +
                     ": open it once where it can be written to upgrade it");
  }
  sqlite3* memory = nullptr;
  int rc = sqlite3_open_v2(":memory:", &memory, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc == SQLITE_OK) {
    sqlite3_backup* backup = sqlite3_backup_init(memory, "main", db, "main");
    rc = backup ? sqlite3_backup_step(backup, -1) : sqlite3_errcode(memory);
    const int finished = backup ? sqlite3_backup_finish(backup) : rc;
    if (rc == SQLITE_DONE) rc = finished;
  }
  if (rc != SQLITE_OK) {
    const std::string why = memory ? sqlite3_errmsg(memory) : "out of memory";
    sqlite3_close(memory);
    throw StoreError(old_schema + ": cannot copy it into memory to upgrade it there: " + why);
  }
  return memory;
}

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
    read_only_ = !writable(file);
  }
  auto open = [&](const std::string& name, int flags) {
    // One thread uses a connection at a time (the header's contract): SQLite's own mutex around every call, a lock
    // and an unlock per column read, is left out.
    if (sqlite3_open_v2(name.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
      const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close(db_);
      db_ = nullptr;
      throw StoreError(path + ": cannot open: " + msg);
    }
    sqlite3_busy_timeout(db_, 5000);
  };
  try {
    if (!read_only_) {
      open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
      check_identity(db_, path_);
    } else {
      // A WAL store read where nothing can be written: its shared-memory file cannot be created, so the file is
      // opened as immutable (no locks: nobody can write it here either) when a plain read-only open cannot read.
      open(file_uri(path, "mode=ro"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
      try {
        check_identity(db_, path_);
      } catch (const StoreError&) {
        sqlite3_close(db_);
        db_ = nullptr;
        open(file_uri(path, "immutable=1"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
        check_identity(db_, path_);
      }
      const std::int64_t version = query_int(db_, path_, "PRAGMA user_version");
      if (version < kSchemaVersion) {
        // An older schema read where it cannot be upgraded (an archive, a colleague's folder): upgraded in a copy
        // in memory that refuses writes as the file would.
        sqlite3* memory = copy_into_memory(db_, path_, version);
        sqlite3_close(db_);
        db_ = memory;
        migrate();
        exec(db_, path_, "PRAGMA query_only = 1");
        store_log()->info(
            "{}: opened read-only with schema version {}: read from a copy in memory upgraded to version {} (the file "
            "is unchanged; open it once where it can be written to upgrade it)",
            path_, version, kSchemaVersion);
        return;
      }
      store_log()->info("{}: opened read-only (this process cannot write the file or its folder)", path_);
      return;
    }
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
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
  if (!mark_crashed) return;
  try {
    mark_stale_runs_crashed();
  } catch (const StoreError& e) {
    // A reader on a full disk still reads: the marking waits for a store that can take the write.
    store_log()->warn("{}: runs whose writer ended were not marked crashed: {}", path_, e.what());
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
    if (read_only_) return;  // a read-only store's copy in memory: the constructor says so
    if (from == 0)
      store_log()->info("{}: created a run store (schema version {})", path_, kSchemaVersion);
    else
      store_log()->info("{}: migrated the run store from schema version {} to {}", path_, from, kSchemaVersion);
  });
}

std::int64_t RunStore::create_run(const NewRun& run) {
  check_name(path_, run.name);
  std::int64_t id = 0;
  transaction([&] {
    id = insert_run(run);
    if (run.lease_token.empty()) return;
    hold_lease_in_process(run.lease_token);
    const ProcessIdentity me = this_process();
    Statement s(db_, path_,
                "UPDATE runs SET lease_token = ?1, lease_pid = ?2, lease_host = ?3, lease_boot = ?4, "
                "lease_start = ?5, lease_at = heartbeat_at WHERE id = ?6");
    s.bind(1, run.lease_token).bind(2, static_cast<std::int64_t>(me.pid)).bind(3, me.host).bind(4, me.boot_id);
    s.bind(5, me.start).bind(6, id).run();
  });
  return id;
}

std::int64_t RunStore::insert_run(const NewRun& run) {
  std::string tokenizer_hash;
  if (!run.tokenizer_json.empty()) {
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(run.tokenizer_json);
    } catch (const nlohmann::json::exception& e) {
      throw StoreError(path_ + ": the tokenizer of run '" + run.name + "' is not JSON (" + e.what() + ")");
    }
    tokenizer_hash = content_hash(run.tokenizer_json);
    Statement t(db_, path_,
                "INSERT OR IGNORE INTO tokenizers (hash, kind, document, created_at) VALUES (?1, ?2, ?3, ?4)");
    t.bind(1, tokenizer_hash).bind(2, doc.value("kind", std::string())).bind(3, run.tokenizer_json);
    t.bind(4, now_seconds()).run();
  }
  Statement s(db_, path_,
              "INSERT INTO runs (name, arch, preset, config_json, config_hash, seed, device, routelab_version, "
              "torch_version, qt_version, status, message, created_at, heartbeat_at, parent_run_id, "
              "resumed_from_step, total_steps, rank, world_size, tokenizer_hash, backend) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'running', '', ?11, ?11, ?12, ?13, ?14, ?15, ?16, "
              "?17, ?18)");
  s.bind(1, run.name).bind(2, run.arch).bind(3, run.preset).bind(4, run.config_json).bind(5, run.config_hash);
  s.bind(6, run.seed).bind(7, run.device).bind(8, run.routelab_version).bind(9, run.torch_version);
  s.bind(10, run.qt_version).bind(11, now_seconds()).bind(12, run.parent_run_id).bind(13, run.resumed_from_step);
  s.bind(14, run.total_steps).bind(15, run.rank).bind(16, run.world_size).bind(17, tokenizer_hash);
  s.bind(18, run.backend);
  s.run();
  return sqlite3_last_insert_rowid(db_);
}

void RunStore::patch_run(std::int64_t run_id, const RunPatch& patch) {
  if (patch.name) check_name(path_, *patch.name);
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
  column("world_size", patch.world_size.has_value());
  column("backend", patch.backend.has_value());
  if (n == 0) return;
  sql += " WHERE id = ?" + std::to_string(n + 1);
  Statement s(db_, path_, sql.c_str());
  int i = 0;
  if (patch.name) s.bind(++i, *patch.name);
  if (patch.tags) s.bind(++i, *patch.tags);
  if (patch.notes) s.bind(++i, *patch.notes);
  if (patch.archived) s.bind(++i, *patch.archived);
  if (patch.resumed_from_step) s.bind(++i, *patch.resumed_from_step);
  if (patch.world_size) s.bind(++i, static_cast<std::int64_t>(*patch.world_size));
  if (patch.backend) s.bind(++i, *patch.backend);
  s.bind(++i, run_id).run();
  if (sqlite3_changes(db_) == 0) throw StoreError(path_ + ": no run " + std::to_string(run_id));
}

void RunStore::delete_run(std::int64_t run_id) {
  Statement s(db_, path_, "DELETE FROM runs WHERE id = ?1");  // child rows go by ON DELETE CASCADE
  s.bind(1, run_id).run();
  if (sqlite3_changes(db_) == 0) throw StoreError(path_ + ": no run " + std::to_string(run_id));
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

void RunStore::replace_metrics(std::int64_t run_id, const std::vector<MetricRow>& rows) {
  transaction([&] {
    Statement s(db_, path_, "DELETE FROM metrics WHERE run_id = ?1 AND key = ?2 AND step = ?3");
    s.bind(1, run_id);
    for (const MetricRow& r : rows) s.bind(2, r.key).bind(3, r.step).run();
    insert_metrics(run_id, rows);
  });
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
              "INSERT INTO checkpoints (run_id, step, path, bytes, created_at, crc32) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  s.bind(1, run_id).bind(2, row.step).bind(3, stored_checkpoint_path(row.path)).bind(4, row.bytes);
  s.bind(5, row.created_at);
  if (row.crc32)
    s.bind(6, static_cast<std::int64_t>(*row.crc32));
  else
    s.bind_null(6);
  s.run();
}

void RunStore::delete_checkpoint(std::int64_t run_id, std::int64_t step) {
  Statement s(db_, path_, "DELETE FROM checkpoints WHERE run_id = ?1 AND step = ?2");
  s.bind(1, run_id).bind(2, step).run();
}

std::string RunStore::stored_checkpoint_path(const std::string& file) const {
  if (path_.empty() || path_ == ":memory:") return file;
  // Relative to the store's folder when inside it: a store moved (or reached by another relative path) with its
  // folder finds its checkpoints.
  const fs::path folder = fs::absolute(path_).parent_path().lexically_normal();
  const fs::path absolute = fs::absolute(file).lexically_normal();
  const fs::path relative = absolute.lexically_relative(folder);
  if (relative.empty() || *relative.begin() == "..") return absolute.string();
  return relative.string();
}

std::string RunStore::resolve_checkpoint_path(std::int64_t run_id, const std::string& stored) const {
  if (path_.empty() || path_ == ":memory:") return stored;
  const fs::path folder = fs::absolute(path_).parent_path().lexically_normal();
  const fs::path file(stored);
  const fs::path resolved = file.is_absolute() ? file : (folder / file).lexically_normal();
  std::error_code ec;
  if (fs::exists(resolved, ec)) return resolved.string();
  // Rows of older RouteLab: relative to the directory the writer ran in, or absolute in a folder since moved. The
  // trainer always wrote them to the store's own checkpoint folder, so the file is looked for there.
  const fs::path own = fs::path(checkpoint_dir(path_, run_id)) / file.filename();
  const fs::path own_absolute = own.is_absolute() ? own : (fs::absolute(own)).lexically_normal();
  if (fs::exists(own_absolute, ec)) return own_absolute.string();
  return resolved.string();
}

void RunStore::insert_probe(std::int64_t run_id, const ProbeRow& row) {
  Statement s(db_, path_, "INSERT INTO probes (run_id, step, json) VALUES (?1, ?2, ?3)");
  s.bind(1, run_id).bind(2, row.step).bind(3, row.json).run();
}

void RunStore::truncate_after(std::int64_t run_id, std::int64_t step) {
  transaction([&] {
    for (const char* sql :
         {"DELETE FROM metrics WHERE run_id = ?1 AND step > ?2", "DELETE FROM routing WHERE run_id = ?1 AND step > ?2",
          "DELETE FROM evals WHERE run_id = ?1 AND step > ?2", "DELETE FROM probes WHERE run_id = ?1 AND step > ?2",
          "DELETE FROM analyses WHERE run_id = ?1 AND step > ?2",
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
  // One index seek a key (the next key after the last one found), not a scan of every row of the run: a long run's
  // DISTINCT took 73 ms at 660,000 rows.
  std::vector<std::string> out;
  for (;;) {
    Statement s(db_, path_,
                out.empty() ? "SELECT key FROM metrics WHERE run_id = ?1 ORDER BY key LIMIT 1"
                            : "SELECT key FROM metrics WHERE run_id = ?1 AND key > ?2 ORDER BY key LIMIT 1");
    s.bind(1, run_id);
    if (!out.empty()) s.bind(2, out.back());
    if (!s.step()) return out;
    out.push_back(s.text(0));
  }
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

void RunStore::each_routed_fraction(std::int64_t run_id, std::int64_t after_step,
                                    const std::function<void(std::int64_t, int, double)>& visit) const {
  Statement s(db_, path_,
              "SELECT step, layer, routed_fraction FROM routing WHERE run_id = ?1 AND step > ?2 "
              "ORDER BY step, layer, rowid");
  s.bind(1, run_id).bind(2, after_step);
  while (s.step()) visit(s.int64(0), static_cast<int>(s.int64(1)), s.real(2));
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
              "SELECT step, path, bytes, created_at, crc32 FROM checkpoints WHERE run_id = ?1 ORDER BY step, rowid");
  s.bind(1, run_id);
  std::vector<CheckpointRow> out;
  while (s.step()) {
    out.push_back(read_checkpoint(s));
    out.back().path = resolve_checkpoint_path(run_id, out.back().path);
  }
  return out;
}

std::string RunStore::run_tokenizer(std::int64_t run_id) const {
  Statement s(db_, path_,
              "SELECT t.document FROM runs r JOIN tokenizers t ON t.hash = r.tokenizer_hash WHERE r.id = ?1");
  s.bind(1, run_id);
  return s.step() ? s.text(0) : std::string();
}

std::optional<CheckpointRow> RunStore::latest_checkpoint(std::int64_t run_id) const {
  Statement s(db_, path_,
              "SELECT step, path, bytes, created_at, crc32 FROM checkpoints WHERE run_id = ?1 "
              "ORDER BY step DESC, rowid DESC LIMIT 1");
  s.bind(1, run_id);
  if (!s.step()) return std::nullopt;
  auto row = read_checkpoint(s);
  row.path = resolve_checkpoint_path(run_id, row.path);
  return row;
}

std::vector<ProbeRow> RunStore::probes(std::int64_t run_id) const {
  Statement s(db_, path_, "SELECT step, json FROM probes WHERE run_id = ?1 ORDER BY step, rowid");
  s.bind(1, run_id);
  std::vector<ProbeRow> out;
  while (s.step()) out.push_back({s.int64(0), s.text(1)});
  return out;
}

}  // namespace routelab
