// Checkpoints: model, optimizer, RNG, step and the resolved config in one file, written atomically.
#pragma once
#include <cstdint>
#include <string>

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
