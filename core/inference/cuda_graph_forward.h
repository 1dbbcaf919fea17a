// The untraced eval-mode forward captured once as a CUDA graph and replayed: a forward of a routed model at a width
// where the host queues kernels slower than the GPU runs them (bf16 at d 512, batch 1) is launched as one graph.
#pragma once
#include <memory>
#include <string>

#include <torch/torch.h>

#include "core/models/language_model.h"
#include "core/train/graph_recorder.h"

namespace routelab {

/// Forward calls a CudaGraphForward makes eagerly before it captures, by default: the sized forms' capacities come
/// from them (ArchitectureEntry::cuda_graph_forward).
constexpr int kCudaGraphEagerForwards = 3;

/// model.forward(tokens).logits for a model in eval mode whose forward can be captured (why_no_cuda_graph_forward is
/// empty), on a GPU by default. The first `eager_calls` calls run the forward eagerly (which also sizes what the
/// model sizes from earlier forwards); the next call captures the forward with its readback deferred
/// (DeferredTraceReadback) and replays it; every later call copies its tokens into the captured input and replays.
/// Autocast and no-grad are the caller's, as for an eager forward. A routed model whose rows were sized from earlier
/// forwards is checked after each replay (ModelOutput::check_shapes, one wait): a batch that routed more rows than the
/// captured shapes hold runs again eagerly with exact counts (its logits are returned), and shapes resized for the
/// routing seen are captured anew at the next call. A forward that cannot be captured after all (it read something
/// back) runs eagerly from then on, with eager_reason() saying why.
/// Throws ConfigError where this build has no CUDA or the model is not on a GPU (with the default recorder), the model
/// is in training mode, or a batch's shape differs from the captured one.
class CudaGraphForward {
 public:
  explicit CudaGraphForward(LanguageModel& model, int eager_calls = kCudaGraphEagerForwards,
                            std::unique_ptr<GraphRecorder> recorder = nullptr);
  ~CudaGraphForward();
  CudaGraphForward(const CudaGraphForward&) = delete;
  CudaGraphForward& operator=(const CudaGraphForward&) = delete;

  /// The logits (B, T, V) of `tokens` (B, T) on the model's device. A replay's are the recorded output tensor, which
  /// the next call overwrites: clone them to keep them.
  torch::Tensor run(const torch::Tensor& tokens);
  /// Whether the forward is captured now.
  bool captured() const;
  /// How often the forward was captured (more than once: its routed shapes changed).
  int captures() const;
  /// Empty while the forward is or can be captured; else why it runs eagerly (its capture failed).
  const std::string& eager_reason() const;

 private:
  LanguageModel& model_;
  int eager_calls_;
  int eager_done_ = 0;
  int captures_ = 0;
  bool captured_ = false;
  std::string eager_reason_;
  std::unique_ptr<GraphRecorder> recorder_;
  torch::Tensor input_;  ///< the captured forward's tokens: each replay reads what was copied into them
  ModelOutput output_;   ///< the captured forward's output, overwritten by each replay

  void release();
};

}  // namespace routelab
