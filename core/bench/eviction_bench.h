// D-LLM's training attention (skipped tokens evicted as keys, official multiplicative form): the chunked kernel, the
// flash form (where LibTorch has flash attention for the device and precision; on a GPU in bf16 also on cuDNN's
// fused attention, EvictionKernel::Cudnn, where LibTorch has it, and in both precisions on memory-efficient attention,
// EvictionKernel::Efficient) and, on the CPU, RouteLab's CPU kernel (the form a CPU trains with) against the
// materialised one, forward + backward, at one layer's shape. Prints measured times, the peak memory each holds above
// its inputs, what the forward leaves held for the backward (what a model holds per layer until its backward reaches
// it), and the largest differences of output and gradients.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace routelab {

struct EvictionBenchOptions {
  std::int64_t batch = 8, heads = 15, head_dim = 64;  ///< the 360M presets' layer: d 960, 15 heads
  std::int64_t kv_heads = 0;  ///< key/value heads (0: `heads`); the flash form serves them grouped, the others repeated
  std::vector<std::int64_t> contexts{1024, 2048};
  double executed = 0.5;          ///< share of keys that execute (Bernoulli per token; the first two always)
  std::string device = "cpu";
  std::string precision = "fp32";  ///< fp32, bf16 or both
  int reps = 5, warmup = 2;
  int threads = 0;                 ///< CPU threads (0: all cores)
  bool materialised = true;        ///< also time the materialised form (O(B H T^2) memory)
  std::int64_t query_chunk = 0;    ///< rows per chunk of the chunked kernel (0: its automatic size)
};

/// One form's figures at one precision and length.
struct EvictionFormResult {
  std::string form;                         ///< chunked, flash, cudnn, efficient, cpu or materialised
  double ms = -1;                           ///< forward + backward, median; -1: it did not run
  double peak_mb = -1, saved_mb = -1;       ///< above the inputs, and held after the forward; -1: not tracked
  double output_diff = -1, grad_diff = -1;  ///< largest |difference| from the materialised form; -1: not compared
  std::string error;                        ///< why it did not run where it was tried (its c10::Error)
};

struct EvictionBenchRow {
  std::string precision;
  std::int64_t context = 0;
  std::int64_t chunk_rows = 0;  ///< rows per chunk the chunked kernel ran
  double grad_max = 0;          ///< the materialised form's largest gradient (q, k, v, w); 0 where it did not run
  std::vector<EvictionFormResult> forms;  ///< the chunked form first, the materialised one last where it ran
};

std::vector<EvictionBenchRow> bench_eviction(const EvictionBenchOptions& options);

}  // namespace routelab
