// The residual-ratio probe of Radial Networks (Dotzel et al. 2024, §4.1): r = ||R(x)||_2 / ||x||_2 per token for every
// residual sub-block (attention, FFN), where x is the residual stream entering the sub-block and R(x) the update
// it adds to the stream. Blocks report their (x, update) pairs; nothing is computed unless a ResidualProbe is
// collecting on the calling thread, so training and ordinary evaluation pay one thread-local check. The
// LayerStateProbe does the same for the stream after each layer (DTRNet Figure 1).
#pragma once
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/models/blocks/routing.h"

namespace routelab {

/// One sub-block's ratios over a batch.
struct ResidualSample {
  int layer = 0;       ///< the layer whose sub-block ran (Radial: the layer the router chose)
  std::string block;   ///< "attn" or "mlp"
  int step = -1;       ///< Radial Networks: the routing step; -1 for fixed-depth models
  torch::Tensor ratio; ///< (B, T) float on the CPU; NaN where the token did not run the sub-block
};

/// Collects the samples of every forward pass run on this thread while it is alive (one at a time per thread).
class ResidualProbe {
 public:
  ResidualProbe();
  ~ResidualProbe();
  ResidualProbe(const ResidualProbe&) = delete;
  ResidualProbe& operator=(const ResidualProbe&) = delete;

  std::vector<ResidualSample> samples;
};

/// True while a ResidualProbe collects on this thread; call sites test it before building anything to record.
bool residual_probe_active();

/// x, update: (B, T, C). `ran` (B, T) bool marks the tokens that ran the sub-block (undefined = all).
void record_residual(int layer, const std::string& block, const torch::Tensor& x, const torch::Tensor& update,
                     const torch::Tensor& ran = {}, int step = -1);
/// The same for a sub-block run on compacted rows: x_rows, update_rows (B, K, C) in the order of `rows`.
void record_residual(int layer, const std::string& block, const torch::Tensor& x_rows,
                     const torch::Tensor& update_rows, const Compaction& rows, int step = -1);

/// Collects, while alive, the residual stream after every layer of the forward passes run on this thread (Radial
/// Networks: after every routing step; tokens that skipped or exited keep their state): the per-layer outputs of
/// DTRNet Figure 1 as the model's own forward computes them. One at a time per thread.
class LayerStateProbe {
 public:
  /// With `keep_graph` the states stay attached to the autograd graph (a loss on them trains the model: distillation
  /// matching a teacher's layer outputs); otherwise they are detached.
  explicit LayerStateProbe(bool keep_graph = false);
  ~LayerStateProbe();
  LayerStateProbe(const LayerStateProbe&) = delete;
  LayerStateProbe& operator=(const LayerStateProbe&) = delete;

  std::vector<torch::Tensor> states;  ///< (B, T, C) each, in the order recorded
  bool keep_graph = false;
};

/// Records x (B, T, C) as the next layer's output when a LayerStateProbe collects on this thread.
void record_layer_state(const torch::Tensor& x);
/// True while a LayerStateProbe collects on this thread.
bool layer_state_probe_active();

}  // namespace routelab
