// Zero-shot tasks (core/analysis/zero_shot.h) on a stored run's checkpoint, and their results kept with the run: a
// metric row per task and measure ("task/piqa/acc" at the checkpoint's step, which `table` and the Compare view read
// as any metric) and the whole result as the run's "zero-shot" analysis of that task.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/analysis/zero_shot.h"

namespace routelab {

struct ZeroShotOptions {
  std::vector<TaskSpec> tasks;
  std::int64_t limit = 0;         ///< examples per task (0 = all)
  std::int64_t batch_size = 0;    ///< requests per forward (0 = the run's train.batch_size)
  std::int64_t max_length = 0;    ///< tokens read at most (0 = the run's data.context)
  std::int64_t step = 0;          ///< checkpoint step (0 = the latest)
  std::vector<std::string> sets;  ///< eval-only overrides
  std::int64_t fewshot = 0;       ///< solved examples before each prompt (with_few_shot; 0: zero-shot)
  /// Where each task's few-shot examples come from, by task name (its training or dev split); a task not named draws
  /// them from its own file, never its own answer.
  std::vector<TaskSpec> fewshot_from;
  std::uint64_t fewshot_seed = 1234;  ///< the harness's fewshot_random_seed
  /// Called after each batch of requests: the task's index in `tasks`, its requests scored and their total.
  std::function<void(std::size_t task, std::int64_t scored, std::int64_t total)> progress;
};

struct ZeroShotReport {
  std::int64_t run_id = 0;
  std::string db_path, name, arch;
  std::int64_t step = 0, max_length = 0, batch_size = 0;
  std::vector<std::string> sets;
  std::vector<TaskResult> tasks;
  std::vector<std::int64_t> task_steps;  ///< each task's checkpoint step (stored_zero_shot; scored ones share `step`)
  nlohmann::json to_json() const;
  /// A Markdown table: task, format, examples, acc, acc_norm (with their standard errors), perplexities, FLOPs ratio.
  std::string to_table() const;
};

/// Reads every task file first (so a bad one fails before any scoring), then opens the run (load_run's errors; a
/// classification run is a ConfigError naming it) and scores each task on its checkpoint. An InterruptScope alive on
/// the calling thread stops it between two batches (Interrupted).
ZeroShotReport evaluate_zero_shot(const std::string& db_path, std::int64_t run_id, const ZeroShotOptions& options);

/// The task files of `options` read once (DataError naming the file, line and key; ConfigError for none or two of one
/// name, or a few-shot file naming no task), with their few-shot prompts where options.fewshot > 0, for scoring
/// several runs or checkpoints on them with the overload below.
std::vector<ZeroShotTask> read_tasks(const ZeroShotOptions& options);
/// evaluate_zero_shot on tasks already read (options.tasks and options.limit are not read again).
ZeroShotReport evaluate_zero_shot(const std::string& db_path, std::int64_t run_id,
                                  const std::vector<ZeroShotTask>& tasks, const ZeroShotOptions& options);

/// The checkpoint steps to score of run `run_id`: `step` alone (0 = the latest), or with `every_checkpoint` the steps
/// of its kept checkpoints, oldest first (the stored measures then draw each task over training; {0} for a run
/// without any, whose scoring names it). StoreError for an unreadable store.
std::vector<std::int64_t> steps_to_score(const std::string& db_path, std::int64_t run_id, bool every_checkpoint,
                                         std::int64_t step);

/// The run's stored results (the latest store_zero_shot of each task; those of `names` only where given), for
/// tables and pairs without scoring again: the report's step is the latest of the tasks' (each task's own is in
/// `task_steps`). A result stored before each example's answers were kept pairs nothing. ConfigError for a run with
/// none (or none of those names); DataError naming the run and task for a stored document that is not a result.
ZeroShotReport stored_zero_shot(const std::string& db_path, std::int64_t run_id,
                                const std::vector<std::string>& names = {});

/// Keeps the results with the run: each task's measures as metrics "task/<name>/<measure>" at the checkpoint's step
/// (replacing those of an earlier call at that step) and its result document as analysis ("zero-shot", name).
void store_zero_shot(const std::string& db_path, const ZeroShotReport& report);

}  // namespace routelab
