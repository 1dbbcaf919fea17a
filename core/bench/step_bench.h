// bench step: any preset's or config's training step as `train` runs it (its model, data, batch, accumulation,
// precision, optimizer and device), timed, and where its time goes by part of the model and step (ROUTELAB_PART) and
// by op or kernel: the question "why is this architecture's step slower than dense's" for architectures a benchmark
// cannot force (Radial Networks, DRR, early exit, the classifiers) as well as the others. No Torch in this header.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bench/part_profile.h"
#include "core/config/experiment_config.h"

namespace routelab {

struct StepBenchOptions {
  int steps = 10;         ///< timed steps (median)
  int warmup = 3;         ///< untimed steps first (on a GPU at least 1)
  int profiled = 3;       ///< profiled steps after the timed ones (medians by part); 0: no breakdown
  int top = 8;            ///< pieces (top-level ops or kernels) listed per part
  double progress = 0.0;  ///< the point of the run the model is told it is at (LanguageModel::set_progress)
  std::string db;         ///< the store holding train.distill_from's teacher
};

struct StepBenchResult {
  std::string origin;  ///< what the config came from (a preset's name, a file)
  std::string arch, description, device, precision;
  int threads = 0;
  bool classifier = false;
  std::int64_t batch = 0, micro_batches = 1;  ///< rows a step (examples or sequences) and train.grad_accum
  std::vector<double> step_ms;                ///< the timed steps, in order
  double median_ms = 0;
  double tokens_per_step = 0;  ///< the timed steps' mean: windows x context, or a classifier's real tokens
  bool kernel_breakdowns = false;
  int top = 0;
  CallProfile profile;  ///< empty where StepBenchOptions::profiled is 0
  /// The config it was compared with, its steps interleaved with these (null: none)
  std::shared_ptr<const StepBenchResult> against;
  double tokens_per_s() const { return median_ms > 0 ? tokens_per_step / (median_ms / 1000.0) : 0.0; }
  /// median ms over the other config's (0 without one)
  double time_ratio() const { return against && against->median_ms > 0 ? median_ms / against->median_ms : 0.0; }
  std::string to_table() const;
  nlohmann::json to_json() const;
};

/// Trains `options.warmup + steps + profiled` steps of `config` (a resolved experiment config) on its own data from
/// a fresh model of its seed, timing the middle ones. With `against` (another config on the same device, e.g. the
/// dense baseline), its steps are taken too, interleaved with the first's (each first every other time), and its
/// result is the result's `against`. Threads: `config`'s run.threads for both. A distilled config's teacher
/// (train.distill_from) is opened from `options.db` and runs in each step, as in training. Throws ConfigError for
/// train.cuda_graph (bench forward --train --cuda-graph times replayed steps), for two devices, and for what opening
/// the run throws (a teacher the store lacks, or one the architecture cannot start from).
StepBenchResult run_step_bench(const ExperimentConfig& config, const std::string& origin,
                               const StepBenchOptions& options, const ExperimentConfig* against = nullptr,
                               const std::string& against_origin = {});

}  // namespace routelab
