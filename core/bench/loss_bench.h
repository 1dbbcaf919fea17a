// The next-token loss on a GPU: RouteLab's fused cross-entropy kernels against the unfused path (an fp32 copy of the
// logits, log_softmax, its backward and the cast back), forward and backward, on logits shaped as the LM head
// leaves them (a (rows, V) view of a product padded to a multiple of 64 columns). Prints measured times and the
// largest differences of loss and gradient.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace routelab {

struct LossBenchOptions {
  std::int64_t rows = 16384, vocab = 50257, reps = 10, warmup = 3;
  std::string device = "cuda";
  std::string precision = "both";  ///< fp32, bf16 or both
};

struct LossBenchRow {
  std::string precision;
  double unfused_ms = 0, fused_ms = 0;  ///< median forward + backward
  double loss_diff = 0;                 ///< largest |per-row loss difference|
  double grad_diff = 0, grad_max = 0;   ///< largest |gradient difference|, largest |gradient| (unfused)
};

std::vector<LossBenchRow> bench_loss(const LossBenchOptions& options);

}  // namespace routelab
