// What a data-parallel step reports, made global: every rank ran its share of the step's sequences (or examples), so
// a 4-rank run stores the numbers a 1-rank run of the same global batch would.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/dist/collective.h"
#include "core/models/language_model.h"

namespace routelab {

/// Sums each rank's share of the step's mean loss and auxiliary loss (0-dim tensors, replaced by the sums), the
/// ranks' stop requests (`stop` on this one) and, given, each rank's `count` (a 0-dim tensor replaced by the sum:
/// a classifier's correct answers), in one all-reduce. Returns the number of ranks asking to stop as a 0-dim tensor,
/// left unread: on a GPU nothing here waits for the device.
torch::Tensor reduce_step_scalars(Collective& collective, torch::Tensor& loss, torch::Tensor& aux_loss, bool stop,
                                  torch::Tensor* count = nullptr);

/// A log step's routing trace and model statistics over every rank, in one all-reduce: per layer the routed share,
/// the auxiliary term and the gate's mean are averaged (the trace's gate becomes that mean, one element), token
/// counts and FLOPs summed; statistics averaged over the ranks that report them (rank 0's keys). Each rank's values
/// weigh `weight` in the averages (a classifier's real tokens, where the ranks' shares differ); a rank of weight 0
/// (one that held none of the step's examples and traced a stand-in) adds nothing to the sums either.
void reduce_trace(Collective& collective, std::vector<LayerTrace>& trace, std::map<std::string, double>& stats,
                  double weight = 1.0);

/// Rank `root`'s values of every tensor of `module` (parameters and buffers) on every rank.
void broadcast_module(Collective& collective, torch::nn::Module& module, int root = 0);

/// Every rank's `fingerprint` (config and build) against rank 0's: a DistError on every rank, naming the ranks
/// that differ and `what`, when any does.
void check_same_everywhere(Collective& collective, const std::string& fingerprint, const std::string& what);

}  // namespace routelab
