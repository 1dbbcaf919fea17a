// Training-step benchmark: RouteLab's train_step on the GPT-2-style model of the PyTorch peer scripts
// (../shared/tools/pyref_gpt_step.py for PyTorch 1.x, pyref2_gpt_step.py for 2.x), with the peer's optimizer settings,
// timed in this process on the CPU or a GPU; the peer runs the same shape in its own process.
#pragma once
#include <cstdint>
#include <string>

namespace routelab {

struct TrainStepBenchOptions {
  std::int64_t batch = 64, context = 128, steps = 10, warmup = 3;
  std::int64_t n_embd = 256, n_layer = 6, n_head = 8, d_ff = 1024, vocab = 65;
  int threads = 0;             ///< 0: all cores, following the load as a training run does (ThreadGovernor)
  bool bf16 = false;
  bool tf32 = false;           ///< CUDA: fp32 matmuls on TF32 tensor cores, both sides (train.tf32's default)
  bool cuda_graph = false;     ///< CUDA: RouteLab's step captured as a CUDA graph (train.cuda_graph)
  std::string device = "cpu";  ///< cpu, cuda or cuda:N
  /// when set, three steps after the timed ones are recorded as a Chrome trace (PyTorch's Kineto profiler on
  /// LibTorch 2.4+: host ops and GPU kernels; the legacy autograd profiler's host ops before)
  std::string profile_path;
  int kernel_top = 0;          ///< CUDA, > 0: a table of kernel time by class and the kernel_top longest kernels
};

/// The named benchmark shapes: "small" (d 256, L 6, H 8, d_ff 1024, vocab 65, B 64, T 128: the peer's default) and
/// "gpt2-small" (d 768, L 12, H 12, d_ff 3072, vocab 50257, B 16, T 1024). Throws ConfigError naming --shape for
/// anything else.
void apply_bench_shape(TrainStepBenchOptions& options, const std::string& shape);

/// Model FLOPs of one training step: 6 per parameter-token of the matrices (embeddings excluded, the tied head
/// included) plus the causal attention products, 6·2·L·T·d per token (PaLM's MFU convention, as nanoGPT).
double train_step_flops(const TrainStepBenchOptions& options);

struct TrainStepBenchResult {
  double ms_per_step = 0;
  double tokens_per_s = 0;
  double first_loss = 0, last_loss = 0;  ///< of the timed steps (fixed batch: the loss must fall)
  double tflops = 0;                     ///< achieved model TFLOP/s (train_step_flops / step time)
  std::int64_t parameters = 0;
  int threads = 0;                       ///< Torch threads at the end of the timed steps
  std::string optimizer;                 ///< which AdamW kernel ran ("fused", "foreach")
  std::string kernels;                   ///< RouteLab's own kernels in the step ("loss, add+norm"; "none")
  std::string kernel_table;              ///< kernel_top > 0: KernelProfile::to_table per step
};

/// Throws ConfigError for options that cannot run here (a device LibTorch lacks; --kernels off a GPU or without
/// Kineto); bench_train_step checks them too, the CLI before it starts the peer.
void check_train_step_bench(const TrainStepBenchOptions& options);

TrainStepBenchResult bench_train_step(const TrainStepBenchOptions& options);

struct PeerBenchResult {
  bool ok = false;
  double ms_per_step = 0, tokens_per_s = 0;
  std::string output;  ///< what the script printed (for error messages)
};

/// Runs `python script B T steps` with THREADS, DEVICE, BF16, COMPILE and the shape (D, L, H, FF, V) in its
/// environment and parses its "step_ms X tokens_per_s Y" line.
PeerBenchResult run_peer_bench(const std::string& python, const std::string& script, const TrainStepBenchOptions& options,
                               bool compile = false);

/// The peer interpreter: $ROUTELAB_PYTHON, else the project's LibTorch venv (.venv-torch, PyTorch 2.x, made by
/// `packaging/install-deps.sh --torch pip`) when it exists, else /usr/bin/python3 (Debian's PyTorch 1.13).
std::string default_peer_python();

/// The peer script for `python`: $ROUTELAB_PYREF, else pyref2_gpt_step.py (fused causal attention) when the
/// interpreter's torch is 2.x, else pyref_gpt_step.py, from ../shared/tools next to the source tree.
std::string default_peer_script(const std::string& python);

}  // namespace routelab
