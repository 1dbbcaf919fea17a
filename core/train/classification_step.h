// The classification pieces of the training loop (TAGAT, issue 5): the epoch schedule (a shuffled order per
// epoch from the run seed, so a resumed run sees the same batches), the training step (CE + the model's aux
// loss), the whole-split evaluation with accuracy and macro-F1, and the per-token probe.
//
// Metrics the trainer stores for classification runs (see trainer.cpp):
//   train/loss (CE of the step's batch), train/accuracy (the batch's), train/lr, train/grad_norm; at log steps
//   train/aux_loss (λ-weighted), train/tokens_per_s (real tokens) and train/<stat> for every model stat; at the
//   end of each epoch train/epoch_loss and train/epoch_accuracy (example-weighted over the epoch); at evaluations
//   val/loss, val/accuracy, val/macro_f1, val/epoch and val/<stat>. TAGAT's stats: entropy (mean routing entropy, the
//   L_ent term before λ_ent), load_imbalance (the paper's L_bal = Σ_i (ū_i - 1/N)² of the layer-mean loads, before
//   λ_bal), load_imbalance_per_layer (the mean over layers of each layer's sum), load/L<l>/E<i> (the paper's
//   soft load u_i of expert i in layer l: mean gate weight over real tokens), load/E<i> (u_i averaged over the
//   layers, the paper's Table 1-2 column), assign/L<l>/E<i> (the hard share of (token, slot) assignments) and,
//   from the second evaluation on, routing_change and routing_change_set (per layer /L<l>: the share of
//   validation tokens whose top expert, or set of experts, changed since the previous evaluation; 0 = frozen;
//   not after a resume's first evaluation, whose predecessor's choices were not kept).
//   Validation stats are means over the validation batches weighted by their real-token counts.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/data/classification.h"
#include "core/models/classifier.h"
#include "core/train/evaluation.h"
#include "core/train/step.h"

namespace routelab {

ClassBatch to_device(ClassBatch b, const torch::Device& device);

/// Drops the trailing positions that are padding in every example of the batch (dynamic padding): the models'
/// masks make the result the same up to rounding, and a batch of short pairs no longer pays for max_length.
ClassBatch trim_padding(ClassBatch b);

/// Mean cross-entropy of logits (B, C) against labels (B), in fp32.
torch::Tensor classification_loss(const torch::Tensor& logits, const torch::Tensor& labels);

/// Which training examples each (1-based) step sees: epoch e = (step - 1) / steps_per_epoch walks
/// epoch_order(n, mix_seed(seed, kTrainStream, e)) in batches; the last batch of an epoch may be smaller.
class EpochSchedule {
 public:
  EpochSchedule(std::int64_t examples, std::int64_t batch_size, std::uint64_t seed);
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  std::int64_t epoch_of(std::int64_t step) const { return (step - 1) / steps_per_epoch_; }  ///< 0-based
  bool ends_epoch(std::int64_t step) const { return step % steps_per_epoch_ == 0; }
  std::int64_t batch_size_at(std::int64_t step) const;
  std::vector<std::int64_t> indices(std::int64_t step);

 private:
  std::int64_t examples_, batch_size_, steps_per_epoch_;
  std::uint64_t seed_;
  std::int64_t cached_epoch_ = -1;
  std::vector<std::int64_t> order_;
};

/// The training loss and accuracy of the epoch so far, weighted by examples (train/epoch_loss, train/epoch_accuracy).
class EpochTally {
 public:
  /// One step's mean loss, correct answers and examples.
  void add(double loss, std::int64_t correct, std::int64_t examples);
  double loss() const { return loss_sum_ / static_cast<double>(std::max<std::int64_t>(1, examples_)); }
  double accuracy() const {
    return static_cast<double>(correct_) / static_cast<double>(std::max<std::int64_t>(1, examples_));
  }
  void clear() { *this = EpochTally(); }
  /// After a resume at `step` inside an epoch: the epoch's steps so far, from their stored per-step loss and
  /// accuracy ((step, value) points of train/loss and train/accuracy) and the schedule's batch sizes.
  void restore(const std::vector<std::pair<std::int64_t, double>>& losses,
               const std::vector<std::pair<std::int64_t, double>>& accuracies, const EpochSchedule& schedule,
               std::int64_t step);

 private:
  double loss_sum_ = 0;
  std::int64_t correct_ = 0, examples_ = 0;
};

struct ClassStepResult {
  torch::Tensor loss;       ///< detached scalar CE (aux loss excluded)
  torch::Tensor aux_loss;   ///< detached scalar
  torch::Tensor grad_norm;  ///< 0-dim, before clipping
  std::int64_t correct = 0, examples = 0;
  double real_tokens = 0;   ///< a traced step's real tokens (0 untraced, and for a stand-in)
  ClassifierOutput output;  ///< trace, stats and token data when asked for (logits dropped)
};

/// Rows [start, start + rows) of every tensor of the batch (views): a micro-batch.
ClassBatch class_batch_rows(const ClassBatch& b, std::int64_t start, std::int64_t rows);

/// One batch's output from those of its micro-batches, in order, by merge_micro_batches's rules (per layer, gates and
/// decisions joined along the batch, token counts and FLOPs summed, shares, auxiliary terms and stats averaged, each
/// part weighing its `weights` entry: a traced step's real tokens, as the statistics are means over them; token data
/// joined; the auxiliary loss averaged likewise). Logits are not merged.
ClassifierOutput merge_classifier_micro_batches(std::vector<ClassifierOutput> parts, std::vector<double> weights);

/// Forward (bf16 autocast when asked), CE + aux loss, backward, global-norm clip, optimizer step. With
/// `micro_batches` k > 1 (train.grad_accum) the batch's examples run as k micro-batches one after another (as even as
/// they can be; fewer where the batch has fewer than k examples), each one's CE and auxiliary loss weighed by its
/// share of the examples, their gradients accumulated before the one update: the CE and its gradient are the one
/// batch's within rounding (the auxiliary losses are taken per micro-batch). The result's loss and aux_loss are
/// the same weighted sums; its output the merged one. With `share` (data parallel) `batch` is this rank's examples
/// of the step: each micro-batch weighs by its share of the whole step's examples (share->global_rows; nothing for
/// a stand-in), the gradients are summed over the ranks (share->sync) before the one update, and the loss, auxiliary
/// loss and correct answers returned are this rank's parts (examples: 0 for a stand-in).
ClassStepResult classification_train_step(SequenceClassifier& model, torch::optim::Optimizer& optimizer,
                                          const ClassBatch& batch, double grad_clip, bool bf16, bool trace,
                                          std::int64_t micro_batches = 1, const StepShare* share = nullptr);

struct ClassificationScores {
  double accuracy = 0;
  double macro_f1 = 0;      ///< mean F1 over the classes present in the labels or the predictions
  std::vector<double> f1;   ///< per class (0 for a class never labelled nor predicted)
};
ClassificationScores classification_scores(const std::vector<std::int64_t>& labels,
                                           const std::vector<std::int64_t>& predicted, std::int64_t num_classes);

struct ClassEvalPass {
  double loss = 0;                      ///< mean CE per example over the split
  ClassificationScores scores;
  InferenceRouting routing;
  std::map<std::string, double> stats;  ///< model stats, real-token-weighted mean over the batches
  std::int64_t examples = 0;
  /// For models that route tokens to experts (token data "expert"): (examples, T, L, k) int16 CPU, each real
  /// token's chosen experts, highest gate weight first, -1 at padding. Undefined for other models.
  torch::Tensor assignments;
};

/// An evaluation's sums over the batches one process ran (a shard of it in a data-parallel run), before the means.
struct ClassEvalSums {
  std::int64_t examples = 0;              ///< of the whole split
  double loss = 0;                        ///< CE summed over the examples run
  double tokens = 0;                      ///< their real tokens
  std::map<std::string, double> stats;    ///< model stats, each batch's times its real tokens
  std::vector<std::int64_t> labels, predicted;  ///< of the examples run, in the order run
  InferenceRouting routing;
  /// As ClassEvalPass::assignments, over the whole split: -1 also at the examples this shard did not run.
  torch::Tensor assignments;

  /// Adds another shard's sums, but its assignments (the data-parallel merge sums those over the ranks).
  void merge(const ClassEvalSums& other);
  /// The sums without the assignments (whose shape "assignments_shape" gives), as JSON, and back.
  nlohmann::json to_json() const;
  static ClassEvalSums from_json(const nlohmann::json& j);
};

/// The split in order, in batches of `batch_size`, eval mode, no gradients; of its batches this call runs i = shard,
/// shard + shards, ...: the shards' sums merged are the whole split's. Restores train mode.
ClassEvalSums evaluate_classifier_sums(SequenceClassifier& model, const ClassificationDataset& data, Split split,
                                       std::int64_t batch_size, const torch::Device& device, bool bf16,
                                       std::int64_t shard = 0, std::int64_t shards = 1);

/// The evaluation's means and scores from the whole split's sums. Given the `previous` pass's assignments (same split
/// and shape), adds the routing_change stats (see routing_change).
ClassEvalPass finish_classifier_eval(const ClassEvalSums& sums, std::int64_t num_classes,
                                     const torch::Tensor& previous = {});

/// The whole split (evaluate_classifier_sums in one process, then finish_classifier_eval).
ClassEvalPass evaluate_classifier(SequenceClassifier& model, const ClassificationDataset& data, Split split,
                                  std::int64_t batch_size, const torch::Device& device, bool bf16,
                                  const torch::Tensor& previous = {});

/// Between two assignment tensors of evaluate_classifier, over the real tokens (>= 0 in `current`), per layer
/// (key/L<l>) and as the mean over layers (key): routing_change, the share of tokens whose top expert (highest
/// gate weight) changed, and routing_change_set, the share whose set of k experts changed. With near-zero
/// routing entropy the top expert carries all the weight, so the soft loads follow routing_change, while the
/// second choice may change freely. Empty when either is undefined or their shapes differ.
std::map<std::string, double> routing_change(const torch::Tensor& previous, const torch::Tensor& current);

/// The probe example of the validation split: {"task": "classification", "tokens", "label", "label_name",
/// "class_probs", "predicted", "layers": [{layer, kind, routed, stats}], "token_data": {name: per-token values of
/// the real tokens, e.g. "gate" (T, L, N)}}.
std::string classification_probe_json(SequenceClassifier& model, const ClassificationDataset& data,
                                      const torch::Device& device);

}  // namespace routelab
