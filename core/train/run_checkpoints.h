// A training run's checkpoints: where each goes, written by the step or on a thread of its own
// (train.checkpoint_async), recorded in the store once on the disk, and the oldest beyond train.keep_checkpoints
// deleted.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/logger.h>
#include <torch/torch.h>

#include "core/store/run_store.h"
#include "core/train/checkpoint.h"
#include "core/train/data_parallel.h"

namespace routelab {

/// Rewinds run `run_id` of `store` to `step` (a resume's: the rows of later steps go) and then deletes the files of the
/// checkpoints whose rows went (those the resume passed over, a damaged one included, and any written after it).
void rewind_run(RunStore& store, std::int64_t run_id, std::int64_t step, spdlog::logger& log);

class RunCheckpoints {
 public:
  /// `async`: train.checkpoint_async; `keep`: train.keep_checkpoints (0: every one).
  RunCheckpoints(bool async, std::int64_t keep) : async_(async), keep_(keep) {}

  /// Run `run_id` of the store `db_path`, recorded through `writer` (rank 0's; the caller keeps both alive). Reads the
  /// run's stored checkpoints (a resume's) when some are to be deleted.
  void open(const std::string& db_path, std::int64_t run_id, RankWriter& writer, std::shared_ptr<spdlog::logger> log);

  /// Writes the checkpoint of `meta.step` (once per step): the one being written is finished and recorded first.
  void write(torch::nn::Module& model, torch::optim::AdamW& optimizer, const CheckpointMeta& meta);
  /// Records the checkpoint being written if it is done (without waiting); rethrows its CheckpointError.
  void poll();
  /// Waits for the checkpoint being written, if any, and records it; rethrows its CheckpointError.
  void finish();

 private:
  /// A checkpoint on the disk counts for resume once its row is committed; then the oldest beyond keep_ go.
  void record(const WrittenCheckpoint& written);

  bool async_ = true;
  std::int64_t keep_ = 0;
  std::string db_path_;
  std::int64_t run_id_ = 0;
  RankWriter* writer_ = nullptr;
  std::shared_ptr<spdlog::logger> log_;
  std::int64_t last_step_ = -1;
  std::vector<CheckpointRow> kept_;  ///< with keep_: the run's stored checkpoints, oldest first
  BackgroundCheckpointWriter background_;
};

}  // namespace routelab
