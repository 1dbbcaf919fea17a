// The split of a step over the ranks, and the collectives a step adds: one gradient sum (in buckets, during the
// backward pass) and one small all-reduce of the step's scalars (plus one of its trace at log steps).
#include "core/train/data_parallel.h"

#include <sstream>

#include "core/dist/step_reduce.h"
#include "core/util/errors.h"

namespace routelab {

DataParallel::DataParallel(std::shared_ptr<Collective> collective, std::int64_t global_rows, std::int64_t batch_size)
    : collective_(std::move(collective)), global_rows_(global_rows) {
  const auto ranks = static_cast<std::int64_t>(collective_->world_size());
  if (global_rows_ % ranks != 0)
    throw ConfigError("train.batch_size x train.grad_accum: a step of " + std::to_string(global_rows_) +
                      " sequences does not split evenly over " + std::to_string(ranks) +
                      " ranks; choose a batch the number of ranks divides");
  local_rows_ = global_rows_ / ranks;
  // The fewest micro-batches of at most batch_size rows that split this rank's rows evenly.
  micro_batches_ = std::max<std::int64_t>(1, (local_rows_ + batch_size - 1) / batch_size);
  while (local_rows_ % micro_batches_ != 0) ++micro_batches_;
}

std::string DataParallel::describe() const {
  std::ostringstream out;
  out << collective_->world_size() << " ranks (" << collective_->backend() << "), " << local_rows_
      << " sequences each";
  if (micro_batches_ > 1) out << " as " << micro_batches_ << " micro-batches of " << local_rows_ / micro_batches_;
  return out.str();
}

void DataParallel::start(torch::nn::Module& model, const std::string& fingerprint, double bucket_mb, bool overlap) {
  check_same_everywhere(*collective_, fingerprint, "config or build");
  broadcast_module(*collective_, model);
  std::vector<torch::Tensor> trainable;
  for (const auto& p : model.parameters())
    if (p.requires_grad()) trainable.push_back(p);
  sync_ = std::make_unique<GradientSync>(collective_, std::move(trainable), bucket_mb, overlap);
}

Batch DataParallel::local_part(const Batch& batch) const {
  return batch_rows(batch, local_rows_ * collective_->rank(), local_rows_);
}

StepShare DataParallel::share_of(const Batch& batch) const {
  StepShare share;
  share.global_rows = global_rows_;
  if (batch.loss_mask.defined()) share.global_counted = batch.loss_mask.sum().to(torch::kFloat).clamp_min(1.0);
  share.sync = sync_.get();
  return share;
}

torch::Tensor DataParallel::finish_step(StepResult& result, bool traced, bool stop) {
  auto stops = reduce_step_scalars(*collective_, result.loss, result.aux_loss, stop);
  if (traced) reduce_trace(*collective_, result.output.trace, result.output.stats);
  return stops;
}

std::optional<EvalPass> DataParallel::merge_eval(const EvalPass& own) {
  const auto text = own.to_json().dump();
  EvalPass merged;
  for (int r = 0; r < collective_->world_size(); ++r) {
    const auto received = collective_->broadcast_string(r == rank() ? text : std::string(), r);
    if (writes()) merged.merge(EvalPass::from_json(nlohmann::json::parse(received)));
  }
  if (!writes()) return std::nullopt;
  return merged;
}

}  // namespace routelab
