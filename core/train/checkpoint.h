// Checkpoints: model, optimizer, RNG, step and the resolved config in one file, written atomically.
#pragma once
#include <cstdint>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/models/language_model.h"
#include "core/store/run_store.h"

namespace routelab {

struct CheckpointMeta {
  std::int64_t step = 0;
  std::int64_t tokens_seen = 0;
  double elapsed_s = 0;
  std::string config_json;
  std::string tokenizer_json;
  std::int64_t run_id = 0;   ///< the run that wrote it (0: none, or a checkpoint of format 1)
  std::string config_hash;   ///< of that run's config ("" likewise)
};

/// What a checkpoint must be to continue a stored run: the row's step, the run's id and config. Checked before
/// anything is loaded into the model.
struct CheckpointExpectation {
  std::int64_t step = 0;
  std::int64_t run_id = 0;
  std::string config_hash;
};

struct SavedCheckpoint {
  std::int64_t bytes = 0;
  std::uint32_t crc32 = 0;  ///< of the bytes written (zlib's CRC-32)
};

/// Writes to `path` (via a temporary file, flushed to the disk, and a rename: a crash never leaves a torn
/// checkpoint; a full disk is a CheckpointError and leaves no file). `model` is any module (a LanguageModel or a
/// SequenceClassifier).
SavedCheckpoint save_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                const CheckpointMeta& meta);

/// A checkpoint taken at one step: host copies of the model's parameters and buffers (same names), of the optimizer
/// and its state, and of the generators' states, so that training can go on while another thread writes it.
struct CheckpointSnapshot {
  std::string path;  ///< where it is to be written
  CheckpointMeta meta;
  std::shared_ptr<torch::nn::Module> model;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::vector<std::pair<std::string, torch::Tensor>> generators;  ///< archive key, state
  std::int64_t bytes = 0;  ///< of the copied tensors
};

/// Copies what a checkpoint of `model` and `optimizer` (AdamW, or a kind of it) holds, on the host: the copies' bytes
/// once more in host memory. A disk without room for the checkpoint is a CheckpointError before anything is copied.
CheckpointSnapshot checkpoint_snapshot(const std::string& path, torch::nn::Module& model,
                                       torch::optim::AdamW& optimizer, const CheckpointMeta& meta);

/// Writes `snapshot` as save_checkpoint writes a checkpoint: loaded, it restores what save_checkpoint's file of the
/// same state restores (the bytes differ: the optimizer's state is filed under the copies' addresses). Reads only the
/// snapshot's copies: a thread of its own may call it while training goes on.
SavedCheckpoint write_checkpoint(const CheckpointSnapshot& snapshot);

/// A checkpoint written to its file.
struct WrittenCheckpoint {
  std::string path;
  std::int64_t step = 0;
  SavedCheckpoint saved;
  double write_s = 0;  ///< seconds on the writing thread
};

/// Writes checkpoint snapshots on a thread of its own, one at a time, while the caller trains on. A write that failed
/// rethrows its CheckpointError from the next poll() or finish(); destroying the writer waits for a write in flight.
class BackgroundCheckpointWriter {
 public:
  /// Starts writing `snapshot`; a CheckpointError if a write is still in flight (finish() it first).
  void start(CheckpointSnapshot snapshot);
  /// The write in flight if it has finished (without waiting), else nothing.
  std::optional<WrittenCheckpoint> poll();
  /// Waits for the write in flight, if any, and returns it.
  std::optional<WrittenCheckpoint> finish();
  bool busy() const { return pending_.valid(); }

 private:
  std::future<WrittenCheckpoint> pending_;
};

/// Reads the whole file and compares its CRC-32 with the one recorded when it was written: a CheckpointError naming
/// the file when it was changed or damaged since.
void verify_checkpoint_file(const std::string& path, std::uint32_t expected_crc32);

/// Loads weights (and optimizer state and the default CPU RNG when `optimizer` is given) into an already
/// built model of the same config. Shape or key mismatches are CheckpointErrors naming the file; so is, with
/// `expect`, a checkpoint of another run, config or step (checked before the model is touched).
CheckpointMeta load_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                               torch::Device device = torch::kCPU, const CheckpointExpectation* expect = nullptr);

/// The checkpoint a stored run resumes from.
struct ResumePoint {
  CheckpointMeta meta;
  std::string path;
  std::vector<std::string> passed_over;  ///< "step 40: <why>" for each newer one that could not be used
};

/// Loads the newest of run `run_id`'s checkpoint rows (oldest first, as RunStore::checkpoints lists them) that is
/// intact (its CRC-32), of this run and config, and of its row's step; the newer ones are passed over, each with a
/// warning. A CheckpointError naming every reason when none can be used.
ResumePoint load_newest_intact(const std::vector<CheckpointRow>& rows, std::int64_t run_id,
                               const std::string& config_hash, torch::nn::Module& model,
                               torch::optim::Optimizer* optimizer, torch::Device device);

}  // namespace routelab
