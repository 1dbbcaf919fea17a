// Small all-reduces of host numbers, packed into one tensor on the collective's device.
#include "core/dist/step_reduce.h"

#include <algorithm>
#include <cmath>

#include "core/util/errors.h"

namespace routelab {
namespace {

/// Sums `values` over the ranks (as doubles) and returns them.
std::vector<double> sum_over_ranks(Collective& collective, const std::vector<double>& values) {
  auto t = torch::tensor(values, torch::kDouble).to(collective.device());
  collective.all_reduce_sum(t);
  t = t.to(torch::kCPU).contiguous();
  return {t.data_ptr<double>(), t.data_ptr<double>() + t.numel()};
}

}  // namespace

torch::Tensor reduce_step_scalars(Collective& collective, torch::Tensor& loss, torch::Tensor& aux_loss, bool stop,
                                  torch::Tensor* count) {
  const auto dev = collective.device();
  const auto on = torch::TensorOptions(dev).dtype(torch::kDouble);
  std::vector<torch::Tensor> parts{loss.detach().to(dev, torch::kDouble).reshape({}),
                                   aux_loss.defined() ? aux_loss.detach().to(dev, torch::kDouble).reshape({})
                                                      : torch::zeros({}, on),
                                   torch::full({}, stop ? 1.0 : 0.0, on)};
  if (count) parts.push_back(count->detach().to(dev, torch::kDouble).reshape({}));
  auto packed = torch::stack(parts);
  collective.all_reduce_sum(packed);
  const auto out_device = loss.device();
  loss = packed[0].to(out_device, torch::kFloat);
  aux_loss = packed[1].to(out_device, torch::kFloat);
  if (count) *count = packed[3].to(count->device(), count->scalar_type());
  return packed[2];
}

void reduce_trace(Collective& collective, std::vector<LayerTrace>& trace, std::map<std::string, double>& stats,
                  double weight) {
  const auto n = static_cast<double>(collective.world_size());
  const double counts = weight > 0 ? 1.0 : 0.0;  // sums: a stand-in trace adds nothing
  // Rank 0's statistics keys; each rank adds (weight x value, weight) for those it has, (0, 0) for the others.
  std::string keys;
  for (const auto& [key, value] : stats) keys += key + '\n';
  keys = collective.broadcast_string(keys);
  std::vector<std::string> names;
  for (std::size_t start = 0, end; (end = keys.find('\n', start)) != std::string::npos; start = end + 1)
    names.push_back(keys.substr(start, end - start));
  std::vector<double> values;
  values.push_back(static_cast<double>(trace.size()));
  values.push_back(weight);
  for (const auto& layer : trace) {
    values.push_back(weight * layer.routed_fraction);
    values.push_back(weight * layer.aux_loss);
    values.push_back(weight * (layer.gate.defined() ? layer.gate.to(torch::kFloat).mean().item<double>() : 1.0));
    values.push_back(counts * layer.flops);
    values.push_back(counts * layer.dense_flops);
    for (const char* sub : {"attn", "mlp", "kv"}) {
      const auto it = layer.tokens_processed.find(sub);
      values.push_back(it == layer.tokens_processed.end() ? 0.0 : counts * static_cast<double>(it->second));
    }
  }
  for (const auto& name : names) {
    const auto it = stats.find(name);
    values.push_back(it == stats.end() ? 0.0 : weight * it->second);
    values.push_back(it == stats.end() ? 0.0 : weight);
  }
  const auto sums = sum_over_ranks(collective, values);
  if (sums[0] != n * static_cast<double>(trace.size()))
    throw DistError("the ranks traced different numbers of layers (rank " + std::to_string(collective.rank()) +
                    ": " + std::to_string(trace.size()) + ")");
  const double total = std::max(sums[1], 1e-300);
  std::size_t i = 2;
  for (auto& layer : trace) {
    layer.routed_fraction = sums[i++] / total;
    layer.aux_loss = sums[i++] / total;
    const double gate = sums[i++] / total;
    if (layer.gate.defined()) layer.gate = torch::full({1}, gate);
    layer.flops = sums[i++];
    layer.dense_flops = sums[i++];
    for (const char* sub : {"attn", "mlp", "kv"}) {
      const auto sum = static_cast<std::int64_t>(std::llround(sums[i++]));
      if (layer.tokens_processed.count(sub)) layer.tokens_processed[sub] = sum;
    }
  }
  std::map<std::string, double> global;
  for (const auto& name : names) {
    const double sum = sums[i++], count = sums[i++];
    if (count > 0) global[name] = sum / count;
  }
  stats = std::move(global);
}

void broadcast_module(Collective& collective, torch::nn::Module& module, int root) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> tensors;
  for (const auto& p : module.parameters()) tensors.push_back(p);
  for (const auto& b : module.buffers()) tensors.push_back(b);
  for (auto& t : tensors) {
    if (t.device() == collective.device()) {
      auto target = t;
      collective.broadcast(target, root);
    } else {
      auto copy = t.to(collective.device());
      collective.broadcast(copy, root);
      t.copy_(copy);
    }
  }
}

void check_same_everywhere(Collective& collective, const std::string& fingerprint, const std::string& what) {
  const auto reference = collective.broadcast_string(fingerprint);
  std::vector<double> differs(static_cast<std::size_t>(collective.world_size()), 0.0);
  differs[static_cast<std::size_t>(collective.rank())] = reference == fingerprint ? 0.0 : 1.0;
  const auto all = sum_over_ranks(collective, differs);
  std::string ranks;
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] > 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (!ranks.empty())
    throw DistError("rank" + std::string(ranks.find(',') == std::string::npos ? " " : "s ") + ranks + " of " +
                    std::to_string(collective.world_size()) + " run another " + what + " than rank 0" +
                    (reference == fingerprint ? "" : " (this rank: " + fingerprint + "; rank 0: " + reference + ")"));
}

}  // namespace routelab
