// The training loop (no Qt, no Torch in this header): builds data and model from a resolved config, trains
// with AdamW + cosine schedule, evaluates, checkpoints, resumes exactly, and records everything in the run
// store. The CLI and the GUI worker call the same train()/resume() and get the same curve for the same seed.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/config/experiment_config.h"
#include "core/dist/launch_env.h"
#include "core/run/evaluation_record.h"
#include "core/store/run_store.h"

namespace routelab {

struct StepMetrics {
  std::int64_t step = 0;          ///< 1-based: the number of optimizer steps done
  std::int64_t total_steps = 0;
  double loss = 0;                ///< training loss of this step (CE, without the auxiliary loss)
  double aux_loss = 0;
  double lr = 0;
  double grad_norm = 0;           ///< before clipping
  double tokens_per_s = 0;        ///< over the last log interval
  double elapsed_s = 0;
  double eta_s = 0;
  std::int64_t tokens_seen = 0;
  std::vector<double> routed_fraction;  ///< per layer (1.0 for dense layers)
  std::optional<double> flops_ratio;    ///< layer FLOPs / dense layer FLOPs of this step's batch (logged steps)
  std::optional<double> accuracy;  ///< classification: accuracy on this step's batch
};

struct EvalMetrics {
  std::int64_t step = 0;
  double val_loss = 0;
  double val_ppl = 0;
  double val_bpc = 0;             ///< bits per character of the validation split
  double flops_ratio = 1;         ///< layer FLOPs / dense layer FLOPs over the validation batches (inference mode)
  std::vector<double> routed_fraction;  ///< per layer, inference-mode share of tokens on the routed path
  std::map<std::string, double> stats;  ///< model-level statistics (ModelOutput::stats), mean over the batches
  /// per layer, the record the evaluation stores: what the architecture's registry entry prices cost curves from
  std::vector<LayerRouting> layers;
  /// Classification runs (whole validation split; val_ppl and val_bpc are NaN there):
  std::optional<double> val_accuracy, val_macro_f1;
  std::optional<std::int64_t> epoch;  ///< completed epochs at this evaluation
};

struct TrainOutcome {
  std::int64_t run_id = 0;
  RunStatus status = RunStatus::Running;
  std::string message;
  std::int64_t last_step = 0;
  std::optional<double> first_val_loss, last_val_loss;
  std::optional<double> first_val_accuracy, last_val_accuracy;  ///< classification runs
  std::string db_path;
};

/// Receives progress on the training thread. Implementations must be cheap (copy values, return).
class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_started(std::int64_t run_id, const std::string& description, std::int64_t total_steps) {}
  virtual void on_step(const StepMetrics& metrics) {}
  virtual void on_eval(const EvalMetrics& metrics) {}
  virtual void on_finished(const TrainOutcome& outcome) {}
};

struct TrainRequest {
  ExperimentConfig config;
  std::string db_path;            ///< "" = default_db_path()
  std::string name;               ///< "" = "<arch>-<preset>"
  std::string qt_version;         ///< recorded with the run when started from the GUI
};

/// Trains a new run: language modelling or classification, as the architecture's registry entry says (the
/// data source must match: kjv/file/copy/sort vs entailment/pairs). Classification trains by epochs
/// (train.epochs) with a whole-split validation pass after each; see core/train/classification_step.h for its
/// metrics. Errors in the config, data or device are reported as a `failed` outcome when the run
/// row exists, and thrown (ConfigError, DataError, DeviceError, StoreError) when nothing was stored yet.
/// `cancel` set to true stops after the current step with status `stopped` and a final checkpoint.
/// With `dist` this process is one rank of a data-parallel run (core/dist/launch_env.h): every rank trains its share
/// of each step and its share of each evaluation's batches; rank 0 alone merges the evaluations, checkpoints and
/// writes the store, and the other ranks' outcome has rank 0's run_id.
TrainOutcome train(const TrainRequest& request, TrainObserver* observer = nullptr,
                   const std::atomic<bool>* cancel = nullptr, const DistEnv* dist = nullptr);

/// Continues run `run_id` from its newest intact checkpoint in the same run row: rows after the checkpoint's step
/// are dropped, resumed_from_step is recorded, status goes back to running. On CPU the continued loss curve
/// equals the uninterrupted one. `threads` >= 0 replaces the stored run.threads (0 = every core): a queue that
/// runs several runs side by side gives a resumed run its share of the cores. The run's lease is taken first
/// (RunStore::acquire_lease, with `takeover_after_s`): while another live process writes the run, resume is a
/// StoreError and nothing changes. A damaged checkpoint, or one of another run, config or step, is passed over for
/// the one before it; none intact is a CheckpointError.
/// With `dist`, every rank calls it: rank 0 restores and takes the lease, the other ranks load the checkpoint it
/// chose; the number of ranks may differ from the run's last (the global batch stays the config's), which the
/// run's message says.
TrainOutcome resume(const std::string& db_path, std::int64_t run_id, TrainObserver* observer = nullptr,
                    const std::atomic<bool>* cancel = nullptr, int threads = -1,
                    double takeover_after_s = RunStore::kNeverTakeOver, const DistEnv* dist = nullptr);

}  // namespace routelab
