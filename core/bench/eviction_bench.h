// D-LLM's training attention (skipped tokens evicted as keys, official multiplicative form): the chunked kernel, the
// flash form (where LibTorch has flash attention for the device and precision; on a GPU in bf16 also on cuDNN's
// fused attention, EvictionKernel::Cudnn, where LibTorch has it) and, on the CPU, RouteLab's CPU
// kernel (the form a CPU trains with) against the materialised one,
// forward + backward, at one layer's shape. Prints measured times, the peak memory each holds above its inputs, what
// the forward leaves held for the backward (what a model holds per layer until its backward reaches it), and the
// largest differences of output and gradients.
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

struct EvictionBenchRow {
  std::string precision;
  std::int64_t context = 0;
  std::int64_t chunk_rows = 0;                               ///< rows per chunk the chunked kernel ran
  double chunked_ms = 0, materialised_ms = -1;               ///< forward + backward, median; -1: not run
  double chunked_peak_mb = -1, materialised_peak_mb = -1;    ///< above the inputs; -1: not tracked or not run
  double chunked_saved_mb = -1, materialised_saved_mb = -1;  ///< held after the forward, output included
  double output_diff = -1, grad_diff = -1, grad_max = 0;     ///< largest |difference| (output; q, k, v, w grads)
  double flash_ms = -1, flash_peak_mb = -1, flash_saved_mb = -1;  ///< the flash form; -1: not run
  double flash_output_diff = -1, flash_grad_diff = -1;            ///< its largest differences from materialised
  double cudnn_ms = -1, cudnn_peak_mb = -1, cudnn_saved_mb = -1;  ///< the flash form on cuDNN's kernel; -1: not run
  double cudnn_output_diff = -1, cudnn_grad_diff = -1;            ///< its largest differences from materialised
  std::string cudnn_error;  ///< why the cuDNN kernel did not run where it was tried (its c10::Error)
  double cpu_ms = -1, cpu_peak_mb = -1, cpu_saved_mb = -1;        ///< the CPU kernel (on the CPU); -1: not run
  double cpu_output_diff = -1, cpu_grad_diff = -1;                ///< its largest differences from materialised
};

std::vector<EvictionBenchRow> bench_eviction(const EvictionBenchOptions& options);

}  // namespace routelab
