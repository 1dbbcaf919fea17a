// The run store: every run, its resolved config, metrics, routing statistics, evaluations, probes and
// checkpoints in one SQLite file (WAL). RunStore is one connection (one per thread); StoreWriter batches the
// trainer's rows in transactions on its own thread so the trainer never waits on SQLite.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/util/errors.h"
#include "core/util/process.h"

struct sqlite3;

namespace routelab {

enum class RunStatus { Running, Finished, Failed, Stopped, Crashed };
std::string to_string(RunStatus status);
RunStatus parse_run_status(const std::string& text);  ///< throws StoreError on an unknown word

struct NewRun {
  std::string name;
  std::string arch;
  std::string preset;            ///< preset name or config file ("" for defaults)
  std::string config_json;       ///< full resolved config
  std::string config_hash;
  std::int64_t seed = 0;
  std::string device = "cpu";
  std::string routelab_version;
  std::string torch_version;
  std::string qt_version;        ///< "" when started from the CLI
  std::int64_t total_steps = 0;
  std::optional<std::int64_t> parent_run_id;      ///< the run this one was resumed or cloned from
  std::optional<std::int64_t> resumed_from_step;
  int rank = 0;                  ///< data-parallel rank of the writer (only rank 0 writes; kept for scale-out)
  int world_size = 1;
  std::string backend;           ///< data parallel: "gloo" or "nccl" (schema v5); "" for one process
  /// When set (new_lease_token()), the run is created leased to this process: it is the run's one writer.
  std::string lease_token;
  /// Tokenizer::to_json of the tokenizer the run trains with ("" for none), stored once per content (schema v4).
  std::string tokenizer_json;
};

/// The process that writes a run (schema v3). One process at a time holds a run's lease: `train` takes it when it
/// creates the run, `resume` when it continues one, and a terminal status gives it back.
struct RunLease {
  std::string token;         ///< random per taking; every write of the holder names it
  ProcessIdentity holder;
  double taken_at = 0;       ///< unix seconds
  double heartbeat_at = 0;   ///< the run's last heartbeat
};

/// A write refused because the run is no longer this writer's: another process took it over, or it was deleted.
class LeaseLostError : public StoreError {
 public:
  using StoreError::StoreError;
};

/// A fresh random lease token (128 bits, hex).
std::string new_lease_token();

struct RunRecord {
  std::int64_t id = 0;
  std::string name, arch, preset, config_json, config_hash;
  std::int64_t seed = 0;
  std::string device, routelab_version, torch_version, qt_version;
  RunStatus status = RunStatus::Running;
  std::string message;
  double created_at = 0, ended_at = 0, heartbeat_at = 0;  ///< unix seconds; 0 = unset
  std::optional<std::int64_t> parent_run_id, resumed_from_step;
  std::int64_t total_steps = 0, last_step = 0;            ///< last_step = highest step with a train/loss metric
  int world_size = 1;
  std::string backend;  ///< data parallel: the c10d backend ("gloo", "nccl"); "" for a run of one process
  std::string tags;    ///< comma-separated
  std::string notes;
  bool archived = false;
  std::optional<double> last_train_loss, last_val_loss, best_val_loss;
  std::optional<std::int64_t> checkpoint_step;  ///< step of the latest checkpoint row, if any
};

struct MetricPoint {
  std::int64_t step = 0;
  double wall_time = 0;  ///< unix seconds
  double value = 0;      ///< NaN and +-Inf round-trip
};

struct MetricRow {
  std::string key;       ///< e.g. "train/loss", "train/lr", "val/loss"
  std::int64_t step = 0;
  double wall_time = 0;
  double value = 0;
};

/// Per routed layer, per logged step.
struct RoutingRow {
  std::int64_t step = 0;
  int layer = 0;
  double routed_fraction = 0;   ///< fraction of tokens taking the routed (expensive) path
  double gate_mean = 0;         ///< mean gate probability of the routed path
  double aux_loss = 0;
  std::int64_t tokens_attn = 0; ///< tokens processed by the attention sub-layer
  std::int64_t tokens_mlp = 0;  ///< tokens processed by the MLP sub-layer
};

struct EvalRow {
  std::int64_t step = 0;
  std::string split = "val";
  double loss = 0, ppl = 0, bpc = 0;
  std::string extra_json = "{}";
};

struct CheckpointRow {
  std::int64_t step = 0;
  std::string path;              ///< absolute when read back; stored relative to the store's folder when inside it
  std::int64_t bytes = 0;
  double created_at = 0;
  std::optional<std::uint32_t> crc32;  ///< CRC-32 of the file's bytes as written (schema v3; none before)
};

/// The token x layer routing of the run's fixed probe text at one evaluation (JSON document).
struct ProbeRow {
  std::int64_t step = 0;
  std::string json;
};

/// One stored analysis of a run (RunStore::analyses).
struct AnalysisRow {
  std::string key;
  std::int64_t step = 0;
  std::string document;
};

/// States of a queue item. `running` items left by a process that ended are made `failed` at the next start
/// (see RunStore::fail_interrupted_queue_items).
enum class QueueState { Pending, Running, Done, Failed, Cancelled };
std::string to_string(QueueState state);
QueueState parse_queue_state(const std::string& text);  ///< throws StoreError on an unknown word

/// One entry of the persisted run queue (schema v2). `request_json` is the launcher's own document (preset,
/// config, overrides, name, or a resume of a run); the store does not interpret it.
struct QueueItem {
  std::int64_t id = 0;
  std::int64_t position = 0;  ///< order of execution (ascending)
  std::string request_json = "{}";
  QueueState state = QueueState::Pending;
  std::optional<std::int64_t> run_id;
  double created_at = 0;
  std::string message;
};

struct RunPatch {
  std::optional<std::string> name, tags, notes;
  std::optional<bool> archived;
  std::optional<std::int64_t> resumed_from_step;
  std::optional<int> world_size;  ///< a run resumed on another number of ranks
  std::optional<std::string> backend;
};

class RunStore {
 public:
  static constexpr int kSchemaVersion = 6;
  /// Only for runs without a lease (written before schema v3): a heartbeat older than this means the writer died.
  static constexpr double kStaleHeartbeatSeconds = 30.0;
  /// acquire_lease: never take a lease from a holder on another host, however long it has been silent.
  static constexpr double kNeverTakeOver = -1.0;

  /// Opens (creating the file and its parent dirs when missing) and migrates. A file that is not a RouteLab
  /// database, or one of a newer schema, is refused with a StoreError naming the file and left untouched.
  /// A store this process cannot write (a read-only file or mount) opens read-only: reads work (one of an older
  /// schema through a copy in memory upgraded there, unless that copy would take half the free memory), writes are
  /// StoreErrors, nothing is marked. When `mark_crashed` is true, running runs whose writer is provably gone become
  /// `crashed` (see mark_stale_runs_crashed); a store that cannot take the write (a full disk) is left as it is.
  explicit RunStore(const std::string& path, bool mark_crashed = true);
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  const std::string& path() const { return path_; }
  bool read_only() const { return read_only_; }

  /// Names are valid UTF-8 of at most kMaxNameBytes bytes (a StoreError otherwise).
  static constexpr std::size_t kMaxNameBytes = 200;
  std::int64_t create_run(const NewRun& run);
  /// With `lease_token`, only while the run's lease is that token (LeaseLostError otherwise); a terminal status
  /// then gives the lease back.
  void set_status(std::int64_t run_id, RunStatus status, const std::string& message = "",
                  const std::string& lease_token = "");
  /// With `lease_token`, only while the lease is that token (LeaseLostError otherwise); a run a reader marked
  /// `crashed` while its writer was paused becomes `running` again.
  void heartbeat(std::int64_t run_id, const std::string& lease_token = "");
  void patch_run(std::int64_t run_id, const RunPatch& patch);
  /// Deletes the run's rows (metrics, routing, evals, probes, checkpoints rows). Files are the caller's.
  void delete_run(std::int64_t run_id);
  /// Running runs whose writer is provably gone become `crashed`: the lease's process ended on this host (or the
  /// host rebooted). A paused writer, or one on another host, is left running. Runs without a lease (older
  /// RouteLab) fall back to a heartbeat older than `stale_after_seconds`.
  int mark_stale_runs_crashed(double stale_after_seconds = kStaleHeartbeatSeconds);

  /// Makes this process the writer of `run_id` and returns the lease's token. Refused (StoreError naming the
  /// holder) while another process holds it and is alive, or is on another host and has beaten its heartbeat in
  /// the last `takeover_after_s` seconds (kNeverTakeOver: always refused). Atomic: of two processes asking at
  /// once, one gets it.
  std::string acquire_lease(std::int64_t run_id, double takeover_after_s = kNeverTakeOver);
  /// Gives the lease back if it is still `token` (a no-op otherwise).
  void release_lease(std::int64_t run_id, const std::string& token);
  /// This process no longer writes with `token` (its writer ended; giving the lease back in the store may have
  /// failed). A lease naming this process that no writer here holds counts as gone: the run can be resumed, and is
  /// marked crashed, without restarting the process (the GUI). create_run and acquire_lease hold their tokens; a
  /// terminal status and release_lease forget them.
  static void forget_lease(const std::string& token);
  std::optional<RunLease> lease(std::int64_t run_id) const;

  void insert_metrics(std::int64_t run_id, const std::vector<MetricRow>& rows);
  /// insert_metrics after deleting the run's rows of the same keys and steps (a measure taken again), in one
  /// transaction.
  void replace_metrics(std::int64_t run_id, const std::vector<MetricRow>& rows);
  void insert_routing(std::int64_t run_id, const std::vector<RoutingRow>& rows);
  void insert_eval(std::int64_t run_id, const EvalRow& row);
  void insert_checkpoint(std::int64_t run_id, const CheckpointRow& row);
  /// Removes the row of run `run_id`'s checkpoint of `step` (its file is the caller's to remove, afterwards).
  void delete_checkpoint(std::int64_t run_id, std::int64_t step);
  void insert_probe(std::int64_t run_id, const ProbeRow& row);
  /// Removes metrics, routing, evals, probes and checkpoint rows with step > `step` (used when resuming).
  void truncate_after(std::int64_t run_id, std::int64_t step);

  std::vector<RunRecord> list_runs(bool include_archived = true) const;
  std::optional<RunRecord> run(std::int64_t run_id) const;
  std::vector<std::string> metric_keys(std::int64_t run_id) const;
  std::vector<MetricPoint> metric(std::int64_t run_id, const std::string& key, std::int64_t after_step = -1) const;
  std::vector<RoutingRow> routing(std::int64_t run_id, std::int64_t after_step = -1) const;
  /// The step, layer and routed fraction of routing()'s rows, one at a time: what a routing history needs of them,
  /// without holding them all (a long routed run has millions) or reading their other columns.
  void each_routed_fraction(std::int64_t run_id, std::int64_t after_step,
                            const std::function<void(std::int64_t step, int layer, double fraction)>& visit) const;
  std::vector<EvalRow> evals(std::int64_t run_id) const;
  std::vector<CheckpointRow> checkpoints(std::int64_t run_id) const;
  std::optional<CheckpointRow> latest_checkpoint(std::int64_t run_id) const;
  /// The stored tokenizer of the run (Tokenizer::to_json), "" when it has none (a run of schema v3 or earlier, or a
  /// classifier).
  std::string run_tokenizer(std::int64_t run_id) const;
  std::vector<ProbeRow> probes(std::int64_t run_id) const;

  // Analyses computed from a run's checkpoint (schema v6), kept so that asking again reads them: `kind` names the
  // analysis ("routing-breakdown"), `key` hashes everything its result depends on. Resuming drops those of later
  // steps (truncate_after); deleting the run drops them all.
  /// The stored document, if this analysis was kept.
  std::optional<std::string> analysis(std::int64_t run_id, const std::string& kind, const std::string& key) const;
  /// Keeps (or replaces) the document of an analysis of the checkpoint of `step`. False, with nothing written, on a
  /// read-only store.
  bool put_analysis(std::int64_t run_id, const std::string& kind, const std::string& key, std::int64_t step,
                    const std::string& document);
  /// Every stored analysis of `kind` of the run, by key.
  std::vector<AnalysisRow> analyses(std::int64_t run_id, const std::string& kind) const;

  // The run queue (schema v2).
  /// Appends an item after the last one; returns its id.
  std::int64_t enqueue(const std::string& request_json, QueueState state = QueueState::Pending);
  /// Every item, in execution order (position, then id).
  std::vector<QueueItem> queue_items() const;
  std::optional<QueueItem> queue_item(std::int64_t id) const;
  /// Sets state, run id (kept when not given) and message; `request_json` replaces the request when given.
  void update_queue_item(std::int64_t id, QueueState state, std::optional<std::int64_t> run_id = std::nullopt,
                         const std::string& message = "", const std::optional<std::string>& request_json = {});
  /// Gives the listed items positions 0..n-1 in the order given; unknown ids are a StoreError.
  void reorder_queue(const std::vector<std::int64_t>& ids);
  void remove_queue_item(std::int64_t id);
  /// Removes done, failed and cancelled items; returns how many.
  int clear_finished_queue_items();
  /// Items left `running` (the process that ran them ended) become `failed` with `message`; returns how many.
  int fail_interrupted_queue_items(const std::string& message);

  /// Runs `fn` inside BEGIN IMMEDIATE ... COMMIT (ROLLBACK on exception).
  template <class Fn>
  void transaction(Fn&& fn) {
    begin();
    try {
      fn();
    } catch (...) {
      rollback();
      throw;
    }
    commit();
  }

 private:
  void begin();
  void commit();
  void rollback();
  void migrate();
  std::int64_t insert_run(const NewRun& run);
  std::string stored_checkpoint_path(const std::string& file) const;
  std::string resolve_checkpoint_path(std::int64_t run_id, const std::string& stored) const;

  std::string path_;
  sqlite3* db_ = nullptr;
  bool read_only_ = false;
};

/// Batches the rows of one run and writes them from its own thread and connection, at most every
/// `flush_interval_s`; keeps the run's heartbeat fresh while alive. Only the rank-0 process creates one.
/// Every write names the run's lease (`lease_token`, "" for none): once another process holds the run, nothing more
/// is written. A failed write (a full disk, an I/O error) keeps its rows and is retried, in order, for up to
/// `retry_for_s` seconds; if it still fails, the writer stops for good (nothing later is written, so the stored
/// rows never have a gap) and the error reaches the caller through check(), flush() or set_status().
class StoreWriter {
 public:
  StoreWriter(const std::string& db_path, std::int64_t run_id, std::string lease_token = "",
              double flush_interval_s = 0.25, double retry_for_s = 30.0);
  ~StoreWriter();  ///< flushes what is pending
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  void add_metric(const MetricRow& row);
  void add_routing(const RoutingRow& row);
  void add_eval(const EvalRow& row);
  void add_checkpoint(const CheckpointRow& row);
  /// Removes the row of the run's checkpoint of `step`, in order with the rows added before it.
  void retire_checkpoint(std::int64_t step);
  void add_probe(const ProbeRow& row);
  /// Blocks until everything added so far is committed; rethrows a write error as StoreError.
  void flush();
  /// Does not block: throws the error that stopped the writer for good (once), if any.
  void check();
  /// Flushes, then writes the terminal (or running) status synchronously.
  void set_status(RunStatus status, const std::string& message = "");

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace routelab
