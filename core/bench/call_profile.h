// One call (a forward, a training step) profiled a few times: where its time goes by op or kernel class, by part of
// the model and step, and by op or kernel name (bench forward's breakdowns, bench step).
#pragma once
#include <functional>

#include <torch/types.h>

#include "core/bench/part_profile.h"

namespace routelab {

/// Whether profiles on `device` are the GPU's kernel time (Kineto) rather than the host's time per op.
bool kernel_breakdowns(const torch::Device& device);

/// Median over `runs` profiled calls of `run` of the ms of each class (one call is too noisy on a shared machine),
/// of each part's forward and backward time and of what a call launches: kernel classes and kernels on a GPU
/// (kernel_breakdowns), else op classes and top-level ops on the host; with `top` > 0 the last call's pieces by part
/// and its `top` longest kernels (a GPU) or every top-level op by name (the host).
CallProfile profile_calls(const std::function<void()>& run, const torch::Device& device, int runs, int top);

}  // namespace routelab
