// The language-model training step captured once as a CUDA graph and replayed (train.cuda_graph): forward, loss,
// backward, clip and AdamW launched as one graph instead of some thousand kernels from the host, which is where an
// eager step loses time when the host cannot queue kernels as fast as the GPU runs them.
#pragma once
#include <memory>

#include "core/train/graph_recorder.h"
#include "core/train/step.h"

namespace routelab {

class MultiTensorAdamW;

/// Eager calls a CudaGraphStep makes before it captures, by default.
constexpr int kCudaGraphEagerSteps = 3;
/// Calls that leave a default CudaGraphStep replaying: its eager steps, the capture, one replay (a benchmark's
/// warm-up before it times replays).
constexpr int kCudaGraphWarmupCalls = kCudaGraphEagerSteps + 2;

/// train_step for an architecture whose step has fixed shapes (ArchitectureEntry::cuda_graph_step). The first
/// `eager_steps` calls run train_step eagerly on a side stream (real training steps, which also create the
/// gradients, the optimizer's state and the libraries' workspaces the graph reuses); the next call captures the step
/// and replays it, and every later call copies its batch into the captured inputs and replays. The arithmetic is
/// train_step's (fused AdamW, learning rate read from the device, staged before each replay), so a run repeats an
/// eager run's losses. Each call returns copies of the step's scalars (the graph overwrites its own on every
/// replay) and, when `trace` is asked for, the trace taken at capture. The optimizer must be MultiTensorAdamW with
/// the fused kernel; the model must stay in training mode between calls (evaluations may switch it and back).
/// A routed model whose forward sizes its work from earlier forwards (DTRNet's sized rows: ModelOutput::overflow and
/// check_shapes) is checked after each replay (one wait): a batch that routed more rows than the captured shapes hold
/// left the parameters as they were (the update skipped on the device) and runs again eagerly, after which the step
/// is captured anew; shapes resized for the routing seen (grown, or shrunk well below) are captured anew at the next
/// call.
/// Throws ConfigError where this build has no CUDA, the model is not on a GPU, or a batch's shape or mask differs
/// from the captured one.
class CudaGraphStep {
 public:
  /// `micro_batches`: train_step's gradient accumulation, captured with the step.
  CudaGraphStep(LanguageModel& model, MultiTensorAdamW& optimizer, double grad_clip, bool bf16,
                std::int64_t micro_batches = 1, int eager_steps = kCudaGraphEagerSteps);
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  StepResult run(const Batch& batch, bool trace);
  /// Whether the graph has been captured (after eager_steps + 1 calls).
  bool captured() const;
  /// How often the step was captured: once, plus once each time a routed model's shapes changed (see below).
  int captures() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace routelab
