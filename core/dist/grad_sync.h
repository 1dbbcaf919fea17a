// Sums the gradients of a model over the ranks of a data-parallel run, in buckets sent while the backward pass
// still runs (as PyTorch's DDP does): a bucket goes out once every parameter in it has its gradient.
#pragma once
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "core/dist/collective.h"

namespace routelab {

class GradientSync {
 public:
  /// `params`: the trainable parameters (requires_grad), the same list in the same order on every rank. Buckets of
  /// about `bucket_mb` MB are filled in reverse order (the order back-propagation produces gradients). With
  /// `overlap` false every bucket is sent after the backward pass (for measuring what the overlap saves).
  GradientSync(std::shared_ptr<Collective> collective, std::vector<torch::Tensor> params, double bucket_mb,
               bool overlap);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  /// The next backward pass is the step's last (its micro-batch's gradients complete the accumulation): its
  /// buckets are sent as they fill. Earlier micro-batches' passes send nothing.
  void arm();
  /// Sends what the backward pass left unsent (buckets holding parameters this rank's tokens never reached, whose
  /// gradient stays as it was), in bucket order on every rank, waits for every bucket and writes the sums into
  /// the gradients. Every rank sends every bucket every step, so ranks whose routing left different parameters
  /// unused stay in step. A parameter without a gradient is sent as zeros; one that no rank has reached yet gets its
  /// gradient dropped again afterwards, as one process leaves it without one (AdamW then skips it: no decay, no
  /// moments), which takes one more small all-reduce of the ranks' flags while such parameters remain (in a step where
  /// every rank reaches every parameter, the first only). A DistError when a rank fails.
  void finish();

  int buckets() const;
  /// Seconds finish() waited for the network in the last step (what the overlap did not hide).
  double last_wait_s() const;

  struct State;  ///< shared with the autograd hooks (which outlive this object on LibTorch 1.13)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace routelab
