// AdamW with decay / no-decay parameter groups and the warm-up + cosine learning-rate schedule.
#pragma once
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/models/classifier.h"
#include "core/models/language_model.h"

namespace routelab {

/// Learning rate at (0-based) step `step`: linear warm-up from 0 to lr over `warmup` steps, then cosine
/// decay to min_lr at `total`. A pure function of the step, so resume needs no scheduler state.
double lr_at(std::int64_t step, std::int64_t total, std::int64_t warmup, double lr, double min_lr);

/// The key torch::optim::Optimizer files a parameter's state under: the TensorImpl address, as a string up to
/// LibTorch 1.13 (formatted as c10::guts::to_string does) and as the pointer itself from 2.0.
template <typename Map>
typename Map::key_type state_key(const Map&, const torch::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;
    out << p.unsafeGetTensorImpl();
    return out.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

/// How MultiTensorAdamW updates the parameters of one device and dtype.
enum class AdamWKernel {
  Fused,    ///< at::_fused_adamw_: one pass over every parameter (LibTorch >= 2.4, CPU and CUDA)
  Foreach,  ///< at::_foreach_* over the whole group: a handful of launches per group (CUDA: multi-tensor kernels)
};

/// torch::optim::AdamW's update and state (so checkpoints and the saved state stay the same format), applied to a
/// whole parameter group per call instead of one tensor at a time, and without reading anything back to the host.
/// The foreach kernel computes exactly torch::optim::AdamW's arithmetic; the fused one agrees within rounding.
/// amsgrad is not supported (RouteLab never sets it).
class MultiTensorAdamW : public torch::optim::AdamW {
 public:
  MultiTensorAdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults,
                   AdamWKernel kernel = default_kernel());
  torch::Tensor step(LossClosure closure = nullptr) override;
  AdamWKernel kernel() const { return kernel_; }
  /// Fused where this LibTorch has the kernel, else foreach.
  static AdamWKernel default_kernel();
  static bool fused_available();

  /// For a step captured as a CUDA graph (core/train/cuda_graph_step.h): from now on the fused kernel reads each
  /// group's learning rate from a tensor on the parameters' device, filled by stage_learning_rates() (not by step(),
  /// so a captured step replays with the rate staged before each replay). Needs the fused kernel.
  void keep_learning_rates_on_device();
  /// Copies each group's learning rate (its options) into its device tensor; a no-op before
  /// keep_learning_rates_on_device().
  void stage_learning_rates();
  /// Counts one more step for every parameter with a gradient, as step() does on the host, for a replayed graph whose
  /// step() ran on the device only: the state's step counts (checkpoints) stay the truth.
  void count_replayed_step(std::int64_t steps = 1);
  /// The next step() leaves every parameter, moment and step count as it is where `flag`, a 0-dim float on the
  /// parameters' device, is nonzero (the fused kernel's found_inf, read on the device: the host counts the step
  /// regardless, so a graph step that finds the flag set takes it back with count_replayed_step(-1)). Needs the fused
  /// kernel (ConfigError).
  void skip_next_step_if(const torch::Tensor& flag);

 private:
  AdamWKernel kernel_;
  /// keep_learning_rates_on_device(): one 0-dim tensor per group (on its first parameter's device).
  std::vector<torch::Tensor> device_lrs_;
  torch::Tensor skip_flag_;  ///< skip_next_step_if(), for the next step() only
  /// Fused kernel: each parameter's step count as a float tensor on its device, and the count it was made from
  /// (the AdamWParamState's integer step stays the truth, so a loaded optimizer re-creates these).
  std::unordered_map<const void*, std::pair<std::int64_t, torch::Tensor>> step_tensors_;
};

/// AdamW over two groups: matrices of linear layers decay by train.weight_decay; norms, biases and
/// embeddings (LanguageModel::decays) do not.
std::unique_ptr<MultiTensorAdamW> make_optimizer(LanguageModel& model, const nlohmann::json& train);
/// The same groups for a classifier (SequenceClassifier::decays).
std::unique_ptr<MultiTensorAdamW> make_optimizer(SequenceClassifier& model, const nlohmann::json& train);

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

/// Global 2-norm of the gradients of `params` (those without a gradient are skipped) as a 0-dim tensor on their
/// device; when max_norm > 0 the gradients are scaled by min(1, max_norm / (norm + 1e-6)) in place, as
/// torch::nn::utils::clip_grad_norm_ does, but with multi-tensor kernels and no host synchronisation.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace routelab
