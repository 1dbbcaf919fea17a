// Routed-attention benchmark: one DTRNet layer's forward + backward with its compacted attention (gather ->
// attention over the k routed tokens -> scatter) against the dense-masked oracle and a dense layer, at several
// sequence lengths and routed shares, so the O(k^2) claim is a measured number.
#pragma once
#include <cstdint>
#include <vector>

namespace routelab {

struct RoutingBenchOptions {
  std::int64_t batch = 4, n_embd = 256, n_head = 8, n_kv_head = 0;
  std::vector<std::int64_t> contexts{512, 2048};
  std::vector<double> fractions{0.1, 0.25, 0.5, 1.0};
  int reps = 5;      ///< timed repetitions (the median is reported)
  int threads = 0;   ///< 0: all cores
  bool masked = true;  ///< also time the dense-masked oracle (O(T^2) memory)
};

struct RoutingBenchRow {
  std::int64_t context = 0;
  double fraction = 0;         ///< routed share asked for (Bernoulli per token)
  double routed_share = 0;     ///< share actually routed
  double compact_ms = 0, masked_ms = 0, dense_ms = 0;  ///< forward + backward, median
  double flops_ratio = 0;      ///< the routed layer's FLOPs / a dense layer's, from the real decisions
};

std::vector<RoutingBenchRow> bench_routed_attention(const RoutingBenchOptions& options);

}  // namespace routelab
