// Times DTRNetLayer (compact and masked) and DenseBlock on the same input with forced routing decisions.
#include "core/bench/routing_bench.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include <torch/torch.h>

#include "core/bench/bench_timing.h"
#include "core/models/dtrnet.h"

namespace routelab {
namespace {

double median_ms(int reps, const std::function<void()>& fn) {
  fn();  // warm-up (allocations, RoPE tables)
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) times.push_back(time_ms(fn));
  return median(times);
}

}  // namespace

std::vector<RoutingBenchRow> bench_routed_attention(const RoutingBenchOptions& o) {
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
