// Times DTRNetLayer (compact and masked) and DenseBlock on the same input with forced routing decisions.
#include "core/bench/routing_bench.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>

#include <torch/torch.h>

#include "core/bench/bench_timing.h"
#include "core/models/dtrnet.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

double median_ms(int reps, const std::function<void()>& fn) {
  fn();  // warm-up (allocations, RoPE tables)
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) times.push_back(time_ms(fn));
  return median(times);
}

/// Sizes that cannot make the layer, or a share outside [0, 1], named by their command-line option.
void check_options(const RoutingBenchOptions& o) {
  const auto at_least = [](const std::string& option, std::int64_t value, std::int64_t least) {
    if (value < least)
      throw ConfigError("bench routing " + option + ": " + std::to_string(value) + " must be at least " +
                        std::to_string(least));
  };
  at_least("--batch", o.batch, 1);
  at_least("--embd", o.n_embd, 1);
  at_least("--heads", o.n_head, 1);
  at_least("--kv-heads", o.n_kv_head, 0);
  at_least("--reps", o.reps, 1);
  at_least("--threads", o.threads, 0);
  for (const auto T : o.contexts) at_least("--contexts", T, 1);
  for (const double f : o.fractions)
    if (!(f >= 0.0 && f <= 1.0))
      throw ConfigError("bench routing --fractions: " + std::to_string(f) + " is outside [0, 1]");
  if (o.n_embd % o.n_head != 0 || (o.n_embd / o.n_head) % 2 != 0)  // the layer is Llama style: RoPE on each head
    throw ConfigError("bench routing --heads: " + std::to_string(o.n_head) + " must divide --embd " +
                      std::to_string(o.n_embd) + " into heads of an even width");
  if (o.n_kv_head > 0 && o.n_head % o.n_kv_head != 0)
    throw ConfigError("bench routing --kv-heads: " + std::to_string(o.n_kv_head) + " does not divide --heads " +
                      std::to_string(o.n_head));
}

}  // namespace

std::vector<RoutingBenchRow> bench_routed_attention(const RoutingBenchOptions& o) {
  check_options(o);
  if (o.threads > 0) at::set_num_threads(o.threads);
  torch::manual_seed(0);
  std::vector<RoutingBenchRow> rows;
  for (const auto T : o.contexts) {
    TransformerOptions model;
    model.style(ModelStyle::Llama).n_layer(1).n_embd(o.n_embd).n_head(o.n_head).n_kv_head(o.n_kv_head).max_seq_len(T);
    DTRNetLayer layer(model, DTRNetOptions());
    DenseBlock dense(model, 0);
    const auto x = torch::randn({o.batch, T, o.n_embd}).requires_grad_();
    const auto positions = torch::arange(T, torch::kLong);
    const auto grad = torch::randn({o.batch, T, o.n_embd});
    const double dense_ms = median_ms(o.reps, [&] { (dense->forward(x, positions) * grad).sum().backward(); });
    for (const auto fraction : o.fractions) {
      const auto decision = torch::rand({o.batch, T}) < fraction;
      RoutingBenchRow row;
      row.context = T;
      row.fraction = fraction;
      row.dense_ms = dense_ms;
      const auto run = [&](DtrAttention impl) {
        layer->options.attention(impl);
        return median_ms(o.reps, [&] { (layer->forward(x, positions, decision).y * grad).sum().backward(); });
      };
      row.compact_ms = run(DtrAttention::Compact);
      if (o.masked) row.masked_ms = run(DtrAttention::Masked);
      layer->options.attention(DtrAttention::Compact);
      torch::NoGradGuard no_grad;
      const auto out = layer->forward(x, positions, decision);  // the compacted forward timed above, priced
      row.routed_share = static_cast<double>(out.routed) / static_cast<double>(o.batch * T);
      row.flops_ratio = layer->flops(o.batch, T, out) /
                        dense_layer_flops(static_cast<double>(o.batch), static_cast<double>(T), layer->shape);
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace routelab
