// One optimisation step (forward, loss, backward, clip, AdamW) shared by the trainer and the benchmark, so
// the benchmark times exactly what training runs.
#pragma once
#include <torch/torch.h>

#include "core/data/dataset.h"
#include "core/models/language_model.h"
#include "core/train/distillation.h"

namespace routelab {

class GradientSync;

/// A rank's part of a data-parallel step (core/dist): how its rows weigh in the step's global mean, and what sums
/// the gradients over the ranks before the update.
struct StepShare {
  std::int64_t global_rows = 0;   ///< sequences (a classifier's examples) of the whole step, over every rank
  torch::Tensor global_counted;   ///< counted positions of the whole step (float, 0-dim), when the batch has a mask
  GradientSync* sync = nullptr;
  /// This rank holds none of the step's examples (a classifier's step with fewer examples than ranks): its batch is a
  /// stand-in whose losses weigh 0, run so that every rank traces the same layers and sends the same gradients.
  bool stand_in = false;
};

/// Rows [start, start + rows) of every tensor of the batch (views): a micro-batch, or a rank's share of a step.
Batch batch_rows(const Batch& b, std::int64_t start, std::int64_t rows);

/// Mean next-token cross-entropy over the positions where `mask` is 1 (all when undefined), in fp32. On a GPU of a
/// CUDA build through the fused kernels (core/train/fused_cross_entropy.h), else log_softmax on an fp32 copy.
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& target, const torch::Tensor& mask);

/// Enables bf16 autocast for the current thread (CPU or CUDA) while alive.
class AutocastGuard {
 public:
  AutocastGuard(bool enabled, const torch::Device& device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_;
  bool cuda_;
  bool previous_;
  at::ScalarType previous_dtype_;
};

/// Puts a module in eval mode while alive and restores the mode it had, also when an evaluation stops early (an
/// interruption or an error): a training loop or a cached model a stopped build used keeps training mode.
class EvalMode {
 public:
  explicit EvalMode(torch::nn::Module& module) : module_(module), was_training_(module.is_training()) {
    module_.eval();
  }
  ~EvalMode() { module_.train(was_training_); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

/// Disables autocast for the current thread (CPU or CUDA) while alive, restoring it after: a training step called
/// where autocast is on (a benchmark's region) then runs its backward outside autocast, as training does (train_step
/// turns it on for its forward only; a backward under autocast re-casts the inputs of fp32 ops such as the routers'
/// products to bf16 and the results back).
class AutocastOff {
 public:
  explicit AutocastOff(const torch::Device& device);
  ~AutocastOff();
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  bool cuda_;
  bool previous_;
};

struct StepResult {
  torch::Tensor loss;      ///< detached scalar: CE of the final head only (exit heads and aux loss excluded)
  torch::Tensor aux_loss;  ///< detached scalar
  torch::Tensor grad_norm; ///< 0-dim, before clipping, on the model's device (read it when logging)
  ModelOutput output;      ///< with the routing trace when asked for (logits dropped)
};

/// Zeroes the gradients of `model` in place (they stay allocated: the same on every LibTorch, and a captured CUDA
/// graph keeps their addresses).
void zero_grads(torch::nn::Module& model);
/// Clips the global gradient norm at `grad_clip` (0: no clip) and steps the optimizer; returns the norm before
/// clipping as a 0-dim tensor on the model's device, so the step never waits for the device. A defined `skip` (a
/// forward's ModelOutput::overflow) leaves the parameters as they are where it is nonzero
/// (MultiTensorAdamW::skip_next_step_if; ConfigError for another optimizer).
torch::Tensor clip_and_step(torch::nn::Module& model, torch::optim::Optimizer& optimizer, double grad_clip,
                            const torch::Tensor& skip = {});
/// zero_grads, back-propagates `total`, clip_and_step. Shared by the LM and classification steps.
torch::Tensor backward_and_step(const torch::Tensor& total, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                double grad_clip, const torch::Tensor& skip = {});

/// One optimizer step on `batch`. With `micro_batches` k > 1 (train.grad_accum) the batch's rows are split into k
/// equal micro-batches run one after another, their gradients accumulated before the one update: each micro-batch's
/// loss weighs by its share of the batch's counted positions, so the update is the one batch's (in fp32 within
/// rounding), while only a micro-batch's activations are alive at a time. Auxiliary losses are taken per
/// micro-batch and averaged; the loss returned is the batch's, the trace that of the whole batch
/// (merge_micro_batches). Throws ConfigError naming train.grad_accum where k does not divide the batch's rows.
/// With `teacher` (distillation), each micro-batch's loss adds teacher->weight x KL(teacher || model) of the two
/// models' next-token distributions (distill_kl); the KL is reported in the trace's stats ("distill_kl").
/// A forward that sized its routed work without reading back (ModelOutput::overflow, under DeferredTraceReadback)
/// and overflowed makes the step leave the parameters as they are (the result's output.overflow says so).
/// With `share` (data parallel) `batch` is this rank's rows of the step: each micro-batch weighs by its share of
/// the whole step's rows (or counted positions), the gradients are summed over the ranks (share->sync) before the
/// one update, and the loss returned is this rank's part of the step's mean (reduce_step_scalars sums them).
StepResult train_step(LanguageModel& model, torch::optim::Optimizer& optimizer, const Batch& batch, double grad_clip,
                      bool bf16, bool trace, std::int64_t micro_batches = 1, const Teacher* teacher = nullptr,
                      const StepShare* share = nullptr);

}  // namespace routelab
