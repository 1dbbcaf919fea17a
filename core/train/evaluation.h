// Evaluation shared by the trainer and the analysis commands: the reproducible batch seeds, the inference-mode
// pass over a split's fixed batches, and the per-layer routing it accumulates. One code path, so a run
// re-evaluated later (other eval-only options, another split) is comparable with what training recorded.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/data/dataset.h"
#include "core/models/language_model.h"
#include "core/run/evaluation_record.h"

namespace routelab {

/// SplitMix64 of (seed, stream, index): independent, reproducible batch seeds for every step and eval batch.
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream, std::uint64_t index);
inline constexpr std::uint64_t kTrainStream = 1, kEvalStream = 2;

Batch to_device(Batch b, const torch::Device& device);

/// A small tensor as nested JSON arrays (float or integer values).
nlohmann::json tensor_to_json(const torch::Tensor& t);

/// Inference-mode routing over evaluation batches: per-layer routed shares, stats and the FLOPs ratio.
class InferenceRouting {
 public:
  void add(const std::vector<LayerTrace>& trace);
  double flops_ratio() const;
  std::vector<double> routed_fractions() const;
  bool any_routed() const;
  double mean_routed_fraction() const;
  /// Per layer, as an evaluation stores them: mean routed fraction and stats over the batches, summed FLOPs.
  std::vector<LayerRouting> layers() const;
  /// The evaluation document of a language model: its FLOPs ratio and layers (core/run/evaluation_record.h).
  EvaluationRecord record() const;
  /// Adds `other`'s batches (another shard of the same model's evaluation).
  void merge(const InferenceRouting& other);
  /// The sums held, as JSON, and back (to merge shards evaluated by other processes).
  nlohmann::json to_json() const;
  static InferenceRouting from_json(const nlohmann::json& j);

 private:
  struct Layer {
    std::string kind = "dense";
    bool routed = false;
    double fraction_sum = 0, flops = 0, dense_flops = 0;
    std::map<std::string, double> stats;
    int batches = 0;
  };
  std::vector<Layer> layers_;
};

struct EvalPass {
  double loss = 0;                       ///< mean over the batches of the masked next-token CE
  InferenceRouting routing;
  std::map<std::string, double> stats;   ///< ModelOutput::stats, mean over the batches
  std::int64_t batches = 0;              ///< how many batches the means are over

  /// The pass of this pass's batches and `other`'s (another shard of the same evaluation): means weighted by batches.
  void merge(const EvalPass& other);
  nlohmann::json to_json() const;
  static EvalPass from_json(const nlohmann::json& j);
};

/// Runs batches of `split` in eval mode without gradients: batch i comes from mix_seed(seed, kEvalStream, i), so
/// every call sees the same tokens. Of the `batches` batches, this call runs i = shard, shard + shards, ...: the
/// shards' passes merged (EvalPass::merge) are the whole evaluation. Restores train mode when it was on.
EvalPass evaluate_split(LanguageModel& model, const LmDataset& data, Split split, std::int64_t batches,
                        std::int64_t batch_size, std::uint64_t seed, const torch::Device& device, bool bf16,
                        std::int64_t shard = 0, std::int64_t shards = 1);

/// Strided evaluation over the first `max_windows` windows of `split` (LmDataset::windows), `batch_size` windows
/// per forward; the loss is the mean over windows. `windows_used` receives how many the split held. Returns
/// nullopt for a dataset without windows (synthetic tasks).
std::optional<EvalPass> evaluate_strided(LanguageModel& model, const LmDataset& data, Split split,
                                         std::int64_t max_windows, std::int64_t batch_size, const torch::Device& device,
                                         bool bf16, std::int64_t* windows_used = nullptr);

}  // namespace routelab
