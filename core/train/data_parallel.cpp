// The split of a step over the ranks, and the collectives a step adds: one gradient sum (in buckets, during the
// backward pass) and one small all-reduce of the step's scalars (plus one of its trace at log steps).
#include "core/train/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/config/experiment_config.h"
#include "core/dist/step_reduce.h"
#include "core/models/registry.h"
#include "core/util/errors.h"

namespace routelab {

namespace {

void check_rows_split(std::int64_t global_rows, std::int64_t ranks) {
  if (global_rows % ranks != 0)
    throw ConfigError("train.batch_size x train.grad_accum: a step of " + std::to_string(global_rows) +
                      " sequences does not split evenly over " + std::to_string(ranks) +
                      " ranks; choose a batch the number of ranks divides");
}

}  // namespace

void check_data_parallel(const ExperimentConfig& config, int ranks) {
  const auto& train = config.train();
  if (train.at("cuda_graph").get<bool>())
    throw ConfigError("train.cuda_graph: a captured step; data-parallel training (" + std::to_string(ranks) +
                      " ranks) runs eager steps; start it as one process");
  // A classifier's examples split as evenly as they go (example_block): any count of ranks will do.
  if (architecture(config.arch()).task == Task::Classification) return;
  check_rows_split(train.at("batch_size").get<std::int64_t>() * train.at("grad_accum").get<std::int64_t>(), ranks);
}

DataParallel::DataParallel(std::shared_ptr<Collective> collective, std::int64_t global_rows, std::int64_t batch_size)
    : collective_(std::move(collective)), global_rows_(global_rows), batch_size_(batch_size) {
  const auto ranks = static_cast<std::int64_t>(collective_->world_size());
  check_rows_split(global_rows_, ranks);
  local_rows_ = global_rows_ / ranks;
  // The fewest micro-batches of at most batch_size rows that split this rank's rows evenly.
  micro_batches_ = std::max<std::int64_t>(1, (local_rows_ + batch_size - 1) / batch_size);
  while (local_rows_ % micro_batches_ != 0) ++micro_batches_;
}

DataParallel::DataParallel(std::shared_ptr<Collective> collective, std::int64_t batch_size)
    : collective_(std::move(collective)), batch_size_(batch_size), examples_(true) {}

DataParallel DataParallel::for_examples(std::shared_ptr<Collective> collective, std::int64_t global_examples,
                                        std::int64_t batch_size) {
  DataParallel dp(std::move(collective), batch_size);
  dp.global_rows_ = global_examples;
  const auto block = dp.example_block(global_examples);  // rank 0's, the largest
  dp.local_rows_ = block.count;
  dp.micro_batches_ = block.micro_batches;
  return dp;
}

DataParallel::Block DataParallel::example_block(std::int64_t examples) const {
  const auto ranks = static_cast<std::int64_t>(collective_->world_size()), r = static_cast<std::int64_t>(rank());
  Block b;
  b.count = examples / ranks + (r < examples % ranks ? 1 : 0);
  b.start = r * (examples / ranks) + std::min(r, examples % ranks);
  if (b.count == 0) {  // the step's first example, weighed 0
    b = Block{0, 1, 1, true};
    return b;
  }
  b.micro_batches = (b.count + batch_size_ - 1) / batch_size_;
  return b;
}

StepShare DataParallel::example_share(std::int64_t examples, const Block& block) const {
  StepShare share;
  share.global_rows = examples;
  share.sync = sync_.get();
  share.stand_in = block.stand_in;
  return share;
}

torch::Tensor DataParallel::finish_example_step(ClassStepResult& result, bool traced, bool stop) {
  auto correct = torch::full({}, static_cast<double>(result.correct), torch::kDouble);
  auto stops = reduce_step_scalars(*collective_, result.loss, result.aux_loss, stop, &correct);
  if (traced)
    reduce_trace(*collective_, result.output.trace, result.output.stats, result.real_tokens);  // token means
  result.correct = std::llround(correct.item<double>());
  return stops;
}

std::vector<std::string> DataParallel::texts_of_every_rank(const std::string& text) {
  std::vector<std::string> texts;
  for (int r = 0; r < collective_->world_size(); ++r)
    texts.push_back(collective_->broadcast_string(r == rank() ? text : std::string(), r));
  return texts;
}

std::optional<ClassEvalSums> DataParallel::merge_class_eval(const ClassEvalSums& own) {
  // The sums as text; the assignments (a tensor of the whole split on every rank, -1 where another rank ran the
  // example) summed over the ranks as value + 1, which leaves each example's own rank's.
  std::vector<std::int64_t> shape;
  std::optional<ClassEvalSums> merged;
  for (const auto& text : texts_of_every_rank(own.to_json().dump())) {
    const auto j = nlohmann::json::parse(text);
    if (j.contains("assignments_shape")) shape = j.at("assignments_shape").get<std::vector<std::int64_t>>();
    if (!writes()) continue;
    if (merged)
      merged->merge(ClassEvalSums::from_json(j));
    else
      merged = ClassEvalSums::from_json(j);
  }
  if (!shape.empty()) {
    auto plus_one = own.assignments.defined() ? own.assignments.to(torch::kInt) + 1 : torch::zeros(shape, torch::kInt);
    plus_one = plus_one.to(collective_->device());
    collective_->all_reduce_sum(plus_one);
    if (merged) merged->assignments = (plus_one.to(torch::kCPU) - 1).to(torch::kShort);
  }
  return merged;
}

std::string DataParallel::describe() const {
  std::ostringstream out;
  const auto ranks = collective_->world_size();
  out << ranks << (ranks == 1 ? " rank (" : " ranks (") << collective_->backend() << "), "
      << (examples_ ? "up to " : "") << local_rows_ << (examples_ ? " examples" : " sequences") << " each";
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
  const auto texts = texts_of_every_rank(own.to_json().dump());
  if (!writes()) return std::nullopt;
  EvalPass merged;
  for (const auto& text : texts) merged.merge(EvalPass::from_json(nlohmann::json::parse(text)));
  return merged;
}

}  // namespace routelab
