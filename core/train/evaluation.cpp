// Evaluation passes and their routing accumulator.
#include "core/train/evaluation.h"

#include <algorithm>

#include "core/train/step.h"
#include "core/util/device.h"
#include "core/util/interrupt.h"

namespace routelab {

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ULL + stream * 0xBF58476D1CE4E5B9ULL + index + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

Batch to_device(Batch b, const torch::Device& device) {
  if (device.is_cpu()) return b;
  b.input = copy_to_device(b.input, device);
  b.target = copy_to_device(b.target, device);
  b.loss_mask = copy_to_device(b.loss_mask, device);
  return b;
}

nlohmann::json tensor_to_json(const torch::Tensor& t) {
  if (t.dim() == 0) {
    if (t.is_floating_point()) return t.item<double>();
    return t.item<std::int64_t>();
  }
  nlohmann::json out = nlohmann::json::array();
  for (std::int64_t i = 0; i < t.size(0); ++i) out.push_back(tensor_to_json(t[i]));
  return out;
}

void InferenceRouting::add(const std::vector<LayerTrace>& trace) {
  InferenceRouting batch;
  for (const auto& t : trace)
    batch.layers_.push_back({t.kind, t.routed, t.routed_fraction, t.flops, t.dense_flops, t.stats, 1});
  merge(batch);
}

double InferenceRouting::flops_ratio() const {
  double f = 0, d = 0;
  for (const auto& l : layers_) f += l.flops, d += l.dense_flops;
  return d > 0 ? f / d : 1.0;
}

std::vector<double> InferenceRouting::routed_fractions() const {
  std::vector<double> out;
  for (const auto& l : layers_) out.push_back(l.batches ? l.fraction_sum / l.batches : 1.0);
  return out;
}

bool InferenceRouting::any_routed() const {
  return std::any_of(layers_.begin(), layers_.end(), [](const Layer& l) { return l.routed; });
}

double InferenceRouting::mean_routed_fraction() const {
  double sum = 0;
  int n = 0;
  for (const auto& l : layers_)
    if (l.routed) sum += l.fraction_sum / std::max(1, l.batches), ++n;
  return n ? sum / n : 1.0;
}

std::vector<LayerRouting> InferenceRouting::layers() const {
  std::vector<LayerRouting> out;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    LayerRouting r{static_cast<int>(i), l.kind, l.routed, l.batches ? l.fraction_sum / l.batches : 1.0,
                   l.flops, l.dense_flops, {}};
    for (const auto& [key, value] : l.stats) r.stats[key] = value / std::max(1, l.batches);
    out.push_back(std::move(r));
  }
  return out;
}

EvaluationRecord InferenceRouting::record() const {
  EvaluationRecord r;
  r.flops_ratio = flops_ratio();
  r.layers = layers();
  return r;
}

void InferenceRouting::merge(const InferenceRouting& other) {
  if (layers_.size() < other.layers_.size()) layers_.resize(other.layers_.size());
  for (std::size_t i = 0; i < other.layers_.size(); ++i) {
    auto& l = layers_[i];
    const auto& o = other.layers_[i];
    if (o.batches == 0) continue;
    l.kind = o.kind;
    l.routed = o.routed;
    l.fraction_sum += o.fraction_sum;
    l.flops += o.flops;
    l.dense_flops += o.dense_flops;
    for (const auto& [key, value] : o.stats) l.stats[key] += value;
    l.batches += o.batches;
  }
}

nlohmann::json InferenceRouting::to_json() const {
  auto out = nlohmann::json::array();
  for (const auto& l : layers_)
    out.push_back({{"kind", l.kind}, {"routed", l.routed}, {"fraction_sum", l.fraction_sum}, {"flops", l.flops},
                   {"dense_flops", l.dense_flops}, {"stats", l.stats}, {"batches", l.batches}});
  return out;
}

InferenceRouting InferenceRouting::from_json(const nlohmann::json& j) {
  InferenceRouting r;
  for (const auto& e : j) {
    Layer l;
    l.kind = e.at("kind").get<std::string>();
    l.routed = e.at("routed").get<bool>();
    l.fraction_sum = e.at("fraction_sum").get<double>();
    l.flops = e.at("flops").get<double>();
    l.dense_flops = e.at("dense_flops").get<double>();
    l.stats = e.at("stats").get<std::map<std::string, double>>();
    l.batches = e.at("batches").get<int>();
    r.layers_.push_back(std::move(l));
  }
  return r;
}

void EvalPass::merge(const EvalPass& other) {
  const double total = static_cast<double>(batches + other.batches);
  if (total == 0) return;
  const double mine = static_cast<double>(batches) / total, theirs = static_cast<double>(other.batches) / total;
  loss = loss * mine + other.loss * theirs;
  for (auto& [key, value] : stats) value *= mine;
  for (const auto& [key, value] : other.stats) stats[key] += value * theirs;  // a key one shard lacks counts 0 there
  routing.merge(other.routing);
  batches += other.batches;
}

nlohmann::json EvalPass::to_json() const {
  return {{"loss", loss}, {"stats", stats}, {"batches", batches}, {"routing", routing.to_json()}};
}

EvalPass EvalPass::from_json(const nlohmann::json& j) {
  EvalPass pass;
  pass.loss = j.at("loss").get<double>();
  pass.stats = j.at("stats").get<std::map<std::string, double>>();
  pass.batches = j.at("batches").get<std::int64_t>();
  pass.routing = InferenceRouting::from_json(j.at("routing"));
  return pass;
}

EvalPass evaluate_split(LanguageModel& model, const LmDataset& data, Split split, std::int64_t batches,
                        std::int64_t batch_size, std::uint64_t seed, const torch::Device& device, bool bf16,
                        std::int64_t shard, std::int64_t shards) {
  torch::NoGradGuard no_grad;
  const EvalMode eval_mode(model);
  EvalPass pass;
  double total = 0;
  for (std::int64_t i = shard; i < batches; i += std::max<std::int64_t>(1, shards)) {
    interruption_point();
    const auto batch = to_device(data.sample(split, batch_size, mix_seed(seed, kEvalStream, static_cast<std::uint64_t>(i))), device);
    AutocastGuard autocast(bf16, device);
    const auto out = model.forward(batch.input, /*trace=*/true);
    total += lm_loss(out.logits, batch.target, batch.loss_mask).item<double>();
    pass.routing.add(out.trace);
    for (const auto& [key, value] : out.stats) pass.stats[key] += value;
    ++pass.batches;
  }
  const double n = static_cast<double>(std::max<std::int64_t>(1, pass.batches));
  pass.loss = total / n;
  for (auto& [key, value] : pass.stats) value /= n;
  return pass;
}

std::optional<EvalPass> evaluate_strided(LanguageModel& model, const LmDataset& data, Split split,
                                         std::int64_t max_windows, std::int64_t batch_size, const torch::Device& device,
                                         bool bf16, std::int64_t* windows_used) {
  torch::NoGradGuard no_grad;
  const EvalMode eval_mode(model);
  EvalPass pass;
  double total = 0;
  std::int64_t used = 0;
  while (used < max_windows) {
    interruption_point();
    const auto batch = data.windows(split, used, std::min(batch_size, max_windows - used));
    if (!batch) break;
    const auto rows = batch->input.size(0);
    AutocastGuard autocast(bf16, device);
    const auto out = model.forward(batch->input.to(device), /*trace=*/true);
    total += lm_loss(out.logits, batch->target.to(device), torch::Tensor()).item<double>() * static_cast<double>(rows);
    pass.routing.add(out.trace);
    for (const auto& [key, value] : out.stats) pass.stats[key] += value * static_cast<double>(rows);
    used += rows;
  }
  if (windows_used) *windows_used = used;
  if (used == 0) return std::nullopt;
  pass.loss = total / static_cast<double>(used);
  for (auto& [key, value] : pass.stats) value /= static_cast<double>(used);
  return pass;
}

}  // namespace routelab
