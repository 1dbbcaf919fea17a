// Shared behaviour of every language model: parameter counting and the weight-decay rule.
#include "core/models/language_model.h"

#include <cmath>
#include <map>
#include <sstream>

#include "core/inference/kv_cache.h"
#include "core/models/blocks/routing.h"
#include "core/util/device.h"
#include "core/util/errors.h"

namespace routelab {

bool LanguageModel::decays(const std::string& name, const torch::Tensor& parameter) const {
  const bool is_embedding = name.find("emb") != std::string::npos;
  return parameter.dim() >= 2 && !is_embedding;
}

namespace {

/// The mean of each key over `maps`, map i weighing weights[i] (a key missing from some counts over those that have
/// it).
std::map<std::string, double> mean_by_key(const std::vector<const std::map<std::string, double>*>& maps,
                                          const std::vector<double>& weights) {
  std::map<std::string, std::pair<double, double>> sums;
  for (std::size_t i = 0; i < maps.size(); ++i)
    for (const auto& [key, value] : *maps[i]) {
      auto& [sum, n] = sums[key];
      sum += weights[i] * value;
      n += weights[i];
    }
  std::map<std::string, double> mean;
  for (const auto& [key, sum_n] : sums) mean[key] = sum_n.first / sum_n.second;
  return mean;
}

torch::Tensor cat_defined(const std::vector<torch::Tensor>& parts) {
  for (const auto& t : parts)
    if (!t.defined()) return torch::Tensor();
  return parts.empty() ? torch::Tensor() : torch::cat(parts, 0);
}

/// The trace's on_device values and, where given, a model's stats_on_device (into `stats`), in one copy to the host.
void resolve_values(std::vector<LayerTrace>& trace, std::map<std::string, torch::Tensor>* stats_on_device,
                    std::map<std::string, double>* stats) {
  if (DeferredTraceReadback::active()) return;
  std::vector<torch::Tensor> values;
  const auto add = [&](const torch::Tensor& v) { values.push_back(v.detach().reshape({}).to(torch::kDouble)); };
  for (const auto& t : trace)
    for (const auto& [key, v] : t.on_device) add(v);
  if (stats_on_device)
    for (const auto& [key, v] : *stats_on_device) add(v);
  if (values.empty()) return;
  const auto host = to_host(torch::stack(values));  // the one wait
  const auto* read = host.data_ptr<double>();
  static const std::string tokens = "tokens_processed.";
  for (auto& t : trace) {
    for (const auto& [key, v] : t.on_device) {
      const double value = *read++;
      if (key == "aux_loss")
        t.aux_loss = value;
      else if (key == "routed_fraction")
        t.routed_fraction = value;
      else if (key == "flops")
        t.flops = value;
      else if (key.rfind(tokens, 0) == 0)
        t.tokens_processed[key.substr(tokens.size())] = std::llround(value);
      else
        t.stats[key] = value;
    }
    t.on_device.clear();
  }
  if (!stats_on_device) return;
  for (const auto& [key, v] : *stats_on_device) (*stats)[key] = *read++;
  stats_on_device->clear();
}

}  // namespace

void resolve_on_device(std::vector<LayerTrace>& trace) { resolve_values(trace, nullptr, nullptr); }

void resolve_on_device(ModelOutput& out) { resolve_values(out.trace, &out.stats_on_device, &out.stats); }

namespace {

/// How merge_micro_batches combines an on_device value over micro-batches: token counts and FLOPs add up, the rest
/// (shares, losses, statistics) is averaged, as for the host fields.
bool summed_on_device(const std::string& key) { return key == "flops" || key.rfind("tokens_processed.", 0) == 0; }

}  // namespace

void defer_settling(std::vector<DeferredSizing> layers, ModelOutput& out) {
  if (layers.empty()) return;
  std::vector<torch::Tensor> overflows;
  for (const auto& l : layers) overflows.push_back(l.overflow.reshape({}));
  out.overflow = torch::stack(overflows).any().to(torch::kFloat);
  out.check_shapes = [layers = std::move(layers)] {
    std::vector<torch::Tensor> counts;
    for (const auto& l : layers) counts.push_back(l.counts);
    const auto read = read_counts(counts);  // the one wait
    ShapeCheck check;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const auto before = *layers[i].capacity;
      if (!layers[i].settle(read[i])) {
        check.overflowed = true;
        continue;
      }
      check.resized = check.resized || *layers[i].capacity != before;
    }
    return check;
  };
}

ModelOutput merge_micro_batches(std::vector<ModelOutput> parts, std::vector<double> weights) {
  if (parts.size() == 1) return std::move(parts.front());
  ModelOutput out;
  if (parts.empty()) return out;
  const bool weighted = !weights.empty();
  if (!weighted) weights.assign(parts.size(), 1.0);
  TORCH_CHECK(weights.size() == parts.size(), "merge_micro_batches: one weight a part");
  double total = 0;
  for (const double w : weights) total += w;
  // The mean of one 0-dim value a part, on the parts' device; weighted, through a small copy of the weights (never
  // in a captured step, whose micro-batches are equal).
  const auto shares = weighted ? torch::tensor(weights, torch::kDouble) / total : torch::Tensor();  // (parts)
  const auto weighted_mean = [&](const std::vector<torch::Tensor>& values) {
    const auto stacked = torch::stack(values);
    if (!weighted || values.size() != parts.size()) return stacked.mean();
    return (stacked.to(torch::kDouble) * shares.to(stacked.device())).sum().to(stacked.scalar_type());
  };
  std::vector<torch::Tensor> aux;
  for (const auto& p : parts)
    if (p.aux_loss.defined()) aux.push_back(p.aux_loss);
  if (aux.size() == parts.size()) out.aux_loss = weighted_mean(aux);
  std::vector<const std::map<std::string, double>*> stats;
  std::map<std::string, std::vector<torch::Tensor>> stats_on_device;  // statistics: averaged, as the host's
  for (const auto& p : parts) {
    stats.push_back(&p.stats);
    for (const auto& [key, v] : p.stats_on_device) stats_on_device[key].push_back(v);
  }
  out.stats = mean_by_key(stats, weights);
  for (const auto& [key, values] : stats_on_device) out.stats_on_device[key] = weighted_mean(values);
  for (const auto& [key, first] : parts.front().token_data) {
    std::vector<torch::Tensor> pieces;
    for (const auto& p : parts) pieces.push_back(p.token_data.count(key) ? p.token_data.at(key) : torch::Tensor());
    out.token_data[key] = cat_defined(pieces);
  }
  out.trace = parts.front().trace;
  for (std::size_t layer = 0; layer < out.trace.size(); ++layer) {
    auto& t = out.trace[layer];
    std::vector<torch::Tensor> gates, decisions;
    std::vector<const std::map<std::string, double>*> layer_stats;
    std::map<std::string, std::vector<torch::Tensor>> on_device;  // left on the device (DeferredTraceReadback)
    double fraction = 0, aux_term = 0;
    t.tokens_processed.clear();
    t.flops = t.dense_flops = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const auto& pt = parts[i].trace.at(layer);
      gates.push_back(pt.gate);
      decisions.push_back(pt.decision);
      layer_stats.push_back(&pt.stats);
      for (const auto& [key, v] : pt.on_device) on_device[key].push_back(v);
      const double w = weights[i] / total;
      fraction += w * pt.routed_fraction;
      aux_term += w * pt.aux_loss;
      for (const auto& [sub, count] : pt.tokens_processed) t.tokens_processed[sub] += count;
      t.flops += pt.flops;
      t.dense_flops += pt.dense_flops;
    }
    t.gate = cat_defined(gates);
    t.decision = cat_defined(decisions);
    t.routed_fraction = fraction;
    t.aux_loss = aux_term;
    t.stats = mean_by_key(layer_stats, weights);
    t.on_device.clear();
    for (const auto& [key, values] : on_device)
      t.on_device[key] = summed_on_device(key) ? torch::stack(values).sum() : weighted_mean(values);
  }
  std::vector<torch::Tensor> overflows;
  std::vector<std::function<ShapeCheck()>> checks;
  for (auto& p : parts) {
    if (p.overflow.defined()) overflows.push_back(p.overflow);
    if (p.check_shapes) checks.push_back(std::move(p.check_shapes));
  }
  if (!overflows.empty()) out.overflow = torch::stack(overflows).amax();
  if (!checks.empty())
    out.check_shapes = [checks = std::move(checks)] {
      ShapeCheck all;
      for (const auto& check : checks) {  // every part's, so each sizes its shapes
        const auto c = check();
        all.overflowed = all.overflowed || c.overflowed;
        all.resized = all.resized || c.resized;
      }
      return all;
    };
  return out;
}

std::int64_t LanguageModel::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

std::unique_ptr<DecodeState> LanguageModel::begin_decode(std::int64_t /*batch*/) {
  throw ConfigError("architecture '" + arch_id() + "' has no incremental decoding (KV-cache generation)");
}

torch::Tensor LanguageModel::decode(DecodeState& /*state*/, const torch::Tensor& /*tokens*/, DecodeTrace* /*trace*/) {
  throw ConfigError("architecture '" + arch_id() + "' has no incremental decoding (KV-cache generation)");
}

std::string LanguageModel::describe() const {
  std::ostringstream out;
  out << arch_id() << ", " << num_layers() << " layers, " << parameter_count() / 1.0e6 << "M parameters";
  return out.str();
}

std::int64_t copy_matching_weights(torch::nn::Module& student, const torch::nn::Module& teacher,
                                   const std::vector<std::pair<std::string, std::string>>& renames,
                                   const std::vector<std::string>& own) {
  std::map<std::string, torch::Tensor> source;
  const auto add = [&](const std::string& name, const torch::Tensor& t) {
    std::string renamed = name;
    for (const auto& [from, to] : renames)
      if (renamed.rfind(from, 0) == 0) renamed = to + renamed.substr(from.size());
    source[renamed] = t;
  };
  for (const auto& item : teacher.named_parameters()) add(item.key(), item.value());
  for (const auto& item : teacher.named_buffers()) add(item.key(), item.value());
  torch::NoGradGuard no_grad;
  std::int64_t copied = 0;
  std::vector<std::string> missing;
  const auto take = [&](const std::string& name, torch::Tensor t) {
    for (const auto& prefix : own)
      if (name.rfind(prefix, 0) == 0) return;
    const auto it = source.find(name);
    if (it == source.end() || !it->second.sizes().equals(t.sizes())) {
      missing.push_back(name + (it == source.end() ? "" : " (teacher's shape differs)"));
      return;
    }
    t.copy_(it->second);
    ++copied;
  };
  for (auto& item : student.named_parameters()) take(item.key(), item.value());
  for (auto& item : student.named_buffers()) take(item.key(), item.value());
  if (!missing.empty()) {
    std::string list;
    for (std::size_t i = 0; i < missing.size() && i < 6; ++i) list += (i ? ", " : "") + missing[i];
    if (missing.size() > 6) list += ", ... (" + std::to_string(missing.size()) + " in all)";
    throw ConfigError("train.distill_from: the teacher has no counterpart for " + list +
                      " (it needs the same n_layer, n_embd, heads, d_ff and style)");
  }
  return copied;
}

}  // namespace routelab
