// RunStore's lease: one writer per run. Who holds a run (process, host, boot, start time), taking it atomically,
// leased status and heartbeat writes, and marking runs crashed only when their writer is provably gone.
#include <cstdio>
#include <mutex>
#include <random>
#include <set>

#include "core/store/run_store.h"
#include "core/store/sqlite_detail.h"

namespace routelab {
using namespace store_detail;

namespace {

/// The leases this process's writers hold now. A lease the store names this process for, but no writer here holds
/// (its run ended without its final status reaching the store: a full disk), is as gone as a dead process's.
std::mutex g_held_mutex;
std::set<std::string> g_held;

void hold(const std::string& token) {
  std::lock_guard lock(g_held_mutex);
  g_held.insert(token);
}

bool held_here(const std::string& token) {
  std::lock_guard lock(g_held_mutex);
  return g_held.count(token) > 0;
}


/// The lease columns of one run, read inside the caller's statement.
constexpr const char* kLeaseColumns =
    "lease_token, lease_pid, lease_host, lease_boot, lease_start, COALESCE(lease_at, 0), "
    "COALESCE(heartbeat_at, created_at)";

RunLease read_lease(const Statement& s, int first) {
  RunLease lease;
  lease.token = s.text(first);
  lease.holder.pid = s.int64(first + 1);
  lease.holder.host = s.text(first + 2);
  lease.holder.boot_id = s.text(first + 3);
  lease.holder.start = s.text(first + 4);
  lease.taken_at = s.real(first + 5);
  lease.heartbeat_at = s.real(first + 6);
  return lease;
}

Liveness holder_liveness(const RunLease& lease) {
  const ProcessIdentity me = this_process();
  const bool this_process_holds = lease.holder.pid == me.pid && lease.holder.host == me.host &&
                                  lease.holder.boot_id == me.boot_id && lease.holder.start == me.start;
  if (this_process_holds) return held_here(lease.token) ? Liveness::Alive : Liveness::Gone;
  return liveness(lease.holder);
}

std::string describe_holder(const RunLease& lease) {
  return "process " + std::to_string(lease.holder.pid) + " on host '" + lease.holder.host + "' (since " +
         local_iso_time(lease.taken_at) + ", last heartbeat " +
         std::to_string(static_cast<long long>(std::max(0.0, now_seconds() - lease.heartbeat_at))) + " s ago)";
}

}  // namespace

void RunStore::forget_lease(const std::string& token) {
  std::lock_guard lock(g_held_mutex);
  g_held.erase(token);
}

std::string new_lease_token() {
  std::random_device device;
  char buf[33];
  for (int i = 0; i < 4; ++i) std::snprintf(buf + 8 * i, 9, "%08x", static_cast<unsigned>(device()));
  return std::string(buf, 32);
}

void RunStore::set_status(std::int64_t run_id, RunStatus status, const std::string& message,
                          const std::string& lease_token) {
  const double now = now_seconds();
  const bool leased = !lease_token.empty();
  if (status == RunStatus::Running) {
    // Resuming: the run is alive again, so its heartbeat is fresh and it has no end.
    Statement s(db_, path_,
                leased ? "UPDATE runs SET status = 'running', message = ?1, ended_at = NULL, heartbeat_at = ?2 "
                         "WHERE id = ?3 AND lease_token = ?4"
                       : "UPDATE runs SET status = 'running', message = ?1, ended_at = NULL, heartbeat_at = ?2 "
                         "WHERE id = ?3 AND ?4 = ''");
    s.bind(1, message).bind(2, now).bind(3, run_id).bind(4, lease_token).run();
  } else {
    // A terminal status gives the lease back in the same write.
    Statement s(db_, path_,
                leased ? "UPDATE runs SET status = ?1, message = ?2, ended_at = ?3, lease_token = NULL "
                         "WHERE id = ?4 AND lease_token = ?5"
                       : "UPDATE runs SET status = ?1, message = ?2, ended_at = ?3 WHERE id = ?4 AND ?5 = ''");
    s.bind(1, to_string(status)).bind(2, message).bind(3, now).bind(4, run_id).bind(5, lease_token).run();
    if (leased && sqlite3_changes(db_) > 0) forget_lease(lease_token);
  }
  if (sqlite3_changes(db_) == 0) {
    if (leased && run(run_id)) throw LeaseLostError(path_ + ": run " + std::to_string(run_id) +
                                                    " is no longer written by this process (another took it over)");
    throw StoreError(path_ + ": no run " + std::to_string(run_id));
  }
}

void RunStore::heartbeat(std::int64_t run_id, const std::string& lease_token) {
  if (lease_token.empty()) {
    Statement s(db_, path_, "UPDATE runs SET heartbeat_at = ?1 WHERE id = ?2");
    s.bind(1, now_seconds()).bind(2, run_id).run();
  } else {
    // A reader may have marked the run crashed while this writer was paused (an older RouteLab, or a stale
    // heartbeat on another host): the writer is alive, so the run is running again.
    Statement s(db_, path_,
                "UPDATE runs SET heartbeat_at = ?1, "
                "message = CASE WHEN status = 'crashed' THEN '' ELSE message END, "
                "ended_at = CASE WHEN status = 'crashed' THEN NULL ELSE ended_at END, "
                "status = CASE WHEN status = 'crashed' THEN 'running' ELSE status END "
                "WHERE id = ?2 AND lease_token = ?3");
    s.bind(1, now_seconds()).bind(2, run_id).bind(3, lease_token).run();
    if (sqlite3_changes(db_) == 0 && run(run_id)) {
      const auto holder = lease(run_id);
      throw LeaseLostError(path_ + ": run " + std::to_string(run_id) + " is now written by " +
                           (holder ? describe_holder(*holder) : std::string("no process")) +
                           "; this process stops writing it");
    }
  }
  if (sqlite3_changes(db_) == 0) throw LeaseLostError(path_ + ": no run " + std::to_string(run_id) + " (deleted?)");
}

std::optional<RunLease> RunStore::lease(std::int64_t run_id) const {
  const std::string sql = std::string("SELECT ") + kLeaseColumns + " FROM runs WHERE id = ?1 AND lease_token IS NOT NULL";
  Statement s(db_, path_, sql.c_str());
  s.bind(1, run_id);
  if (!s.step()) return std::nullopt;
  return read_lease(s, 0);
}

std::string RunStore::acquire_lease(std::int64_t run_id, double takeover_after_s) {
  const std::string token = new_lease_token();
  const ProcessIdentity me = this_process();
  transaction([&] {
    const std::string sql = std::string("SELECT status, ") + kLeaseColumns + " FROM runs WHERE id = ?1";
    Statement q(db_, path_, sql.c_str());
    q.bind(1, run_id);
    if (!q.step()) throw StoreError(path_ + ": no run with id " + std::to_string(run_id));
    const std::string status = q.text(0);
    const bool held = !q.is_null(1);
    const RunLease current = read_lease(q, 1);
    const double silent = now_seconds() - current.heartbeat_at;
    const std::string run = "run " + std::to_string(run_id);
    if (held) {
      switch (holder_liveness(current)) {
        case Liveness::Alive:
          throw StoreError(run + " is being written by " + describe_holder(current) +
                           (current.holder.pid == me.pid ? " (this process)" : "") +
                           ": stop it first (a paused process keeps its run)");
        case Liveness::Unknown:
          if (takeover_after_s < 0 || silent <= takeover_after_s)
            throw StoreError(run + " is being written by " + describe_holder(current) +
                             ", another host: if that process is gone, take the run over with --takeover-after "
                             "SECONDS (it has been silent " +
                             std::to_string(static_cast<long long>(silent)) + " s)");
          store_log()->warn("{}: {}: taking over from {}, silent for more than {} s", path_, run,
                            describe_holder(current), takeover_after_s);
          break;
        case Liveness::Gone:
          store_log()->info("{}: {}: its last writer, process {} on this host, has ended", path_, run,
                            current.holder.pid);
          break;
      }
    } else if (status == "running" && silent < kStaleHeartbeatSeconds) {
      // A run of an older RouteLab (no lease): only its heartbeat tells.
      throw StoreError(run + " is still running (heartbeat " + std::to_string(static_cast<long long>(silent)) +
                       " s ago)");
    }
    Statement u(db_, path_,
                "UPDATE runs SET lease_token = ?1, lease_pid = ?2, lease_host = ?3, lease_boot = ?4, "
                "lease_start = ?5, lease_at = ?6, heartbeat_at = ?6 WHERE id = ?7");
    u.bind(1, token).bind(2, static_cast<std::int64_t>(me.pid)).bind(3, me.host).bind(4, me.boot_id);
    u.bind(5, me.start).bind(6, now_seconds()).bind(7, run_id).run();
  });
  hold(token);
  return token;
}

void RunStore::release_lease(std::int64_t run_id, const std::string& token) {
  Statement s(db_, path_, "UPDATE runs SET lease_token = NULL WHERE id = ?1 AND lease_token = ?2");
  s.bind(1, run_id).bind(2, token).run();
  forget_lease(token);
}

void store_detail::hold_lease_in_process(const std::string& token) { hold(token); }

int RunStore::mark_stale_runs_crashed(double stale_after_seconds) {
  if (read_only_) return 0;
  const double cutoff = now_seconds() - stale_after_seconds;
  struct Stale {
    std::int64_t id;
    std::optional<std::string> token;  // the lease that was found gone (none: a run without a lease)
    std::string message;
    double last_beat;
  };
  std::vector<Stale> stale;
  {
    const std::string sql = std::string("SELECT id, ") + kLeaseColumns + " FROM runs WHERE status = 'running'";
    Statement s(db_, path_, sql.c_str());
    while (s.step()) {
      const RunLease lease = read_lease(s, 1);
      if (!s.is_null(1)) {
        // Only a writer that is provably gone: a paused process, or one on another host, keeps its run.
        if (holder_liveness(lease) != Liveness::Gone) continue;
        stale.push_back({s.int64(0), lease.token,
                         "its process (" + std::to_string(lease.holder.pid) + " on host '" + lease.holder.host +
                             "') ended without recording a final status; last heartbeat " +
                             local_iso_time(lease.heartbeat_at),
                         lease.heartbeat_at});
      } else if (lease.heartbeat_at < cutoff) {
        stale.push_back({s.int64(0), std::nullopt,
                         "no heartbeat since " + local_iso_time(lease.heartbeat_at) +
                             ": the process ended without recording a final status",
                         lease.heartbeat_at});
      }
    }
  }
  if (stale.empty()) return 0;
  int marked = 0;
  transaction([&] {
    // The conditions are repeated: a writer may have beaten its heartbeat, or another taken the run, since.
    Statement by_lease(db_, path_,
                       "UPDATE runs SET status = 'crashed', message = ?1, ended_at = ?2 "
                       "WHERE id = ?3 AND status = 'running' AND lease_token = ?4");
    Statement by_beat(db_, path_,
                      "UPDATE runs SET status = 'crashed', message = ?1, ended_at = ?2 "
                      "WHERE id = ?3 AND status = 'running' AND lease_token IS NULL AND "
                      "COALESCE(heartbeat_at, created_at) < ?4");
    for (const Stale& run : stale) {
      if (run.token)
        by_lease.bind(1, run.message).bind(2, run.last_beat).bind(3, run.id).bind(4, *run.token).run();
      else
        by_beat.bind(1, run.message).bind(2, run.last_beat).bind(3, run.id).bind(4, cutoff).run();
      marked += sqlite3_changes(db_);
    }
  });
  if (marked > 0) store_log()->info("{}: marked {} stale run{} crashed", path_, marked, marked == 1 ? "" : "s");
  return marked;
}

}  // namespace routelab
