// The benchmark model mirrors the peer exactly: GPT-2 style, learned positions, tied head, exact GELU, AdamW(lr 3e-4,
// PyTorch defaults: wd 0.01 on all parameters), clip 1.0; d 256, L 6, H 8, d_ff 1024, vocab 65 unless a shape is set.
#include "core/bench/train_step_bench.h"

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>

#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include "core/bench/bench_timing.h"
#include "core/bench/kernel_profile.h"
#include "core/models/blocks/fused_norm.h"
#include "core/models/dense_transformer.h"
#include "core/train/cuda_graph_step.h"
#include "core/train/fused_cross_entropy.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/device.h"
#include "core/util/errors.h"
#include "core/util/version.h"

namespace routelab {

void apply_bench_shape(TrainStepBenchOptions& o, const std::string& shape) {
  if (shape == "small") {
    o.n_embd = 256, o.n_layer = 6, o.n_head = 8, o.d_ff = 1024, o.vocab = 65, o.batch = 64, o.context = 128;
  } else if (shape == "gpt2-small") {
    // nanoGPT's GPT-2 small run: 1024-token sequences, 16 of them a step on one GPU.
    o.n_embd = 768, o.n_layer = 12, o.n_head = 12, o.d_ff = 3072, o.vocab = 50257, o.batch = 16, o.context = 1024;
  } else {
    throw ConfigError("bench train-step --shape: '" + shape + "' (small or gpt2-small)");
  }
}

double train_step_flops(const TrainStepBenchOptions& o) {
  const double d = double(o.n_embd), L = double(o.n_layer), T = double(o.context);
  // Per layer: QKV + output (4 d^2) and the MLP (2 d d_ff); the tied head (d V) once; biases and norms are noise.
  const double matrices = L * (4.0 * d * d + 2.0 * d * double(o.d_ff)) + d * double(o.vocab);
  const double per_token = 6.0 * matrices + 12.0 * L * T * d;
  return per_token * double(o.batch) * T;
}

void check_train_step_bench(const TrainStepBenchOptions& o) {
  const auto device = resolve_device(o.device);
  if (o.kernel_top > 0 && !device.is_cuda())
    throw ConfigError("bench train-step --kernels: the kernel table is a GPU's (--device cuda); on the CPU, --profile "
                      "writes a trace of the ops");
  if (o.kernel_top > 0 && !kernel_profiling_unavailable().empty())
    throw ConfigError("bench train-step --kernels: " + kernel_profiling_unavailable());
}

namespace {

/// kKernelProfileSteps more steps after the timed ones, recorded: the kernel table (CUDA) and the Chrome trace.
std::string profile_steps(const TrainStepBenchOptions& o, const torch::Device& device,
                          const std::function<StepResult()>& step) {
  constexpr int kKernelProfileSteps = 3;
  if (!kernel_profiling_unavailable().empty()) {  // before LibTorch 2.4: the legacy profiler's trace of the host's ops
    const torch::autograd::profiler::RecordProfile trace(o.profile_path);
    for (int i = 0; i < kKernelProfileSteps; ++i) step();
    synchronize(device);
    return "";
  }
  KernelProfiler profiler(device.is_cuda());
  for (int i = 0; i < kKernelProfileSteps; ++i) step();
  synchronize(device);
  const auto profile = profiler.stop(o.profile_path);
  if (o.kernel_top <= 0) return "";
  return "RouteLab, " + std::to_string(kKernelProfileSteps) + " steps after the timed ones (PyTorch's Kineto profiler): " +
         profile.to_table(o.kernel_top, kKernelProfileSteps, "per step");
}

}  // namespace

TrainStepBenchResult bench_train_step(const TrainStepBenchOptions& o) {
  TrainStepBenchResult r;
  ThreadGovernor threads(o.threads);  // as a training run: "all cores" follows the machine's load
  check_train_step_bench(o);
  const auto device = resolve_device(o.device);
  if (device.is_cuda()) configure_cuda_math(o.tf32);
  torch::manual_seed(0);
  TransformerOptions opts;
  opts.style(ModelStyle::GPT2).vocab_size(o.vocab).max_seq_len(o.context).n_layer(o.n_layer).n_embd(o.n_embd)
      .n_head(o.n_head).d_ff(o.d_ff).tie_weights(true).init("normal");
  DenseTransformer model(opts);
  model.to(device);
  model.train();
  r.parameters = model.parameter_count();
  std::vector<torch::optim::OptimizerParamGroup> groups{torch::optim::OptimizerParamGroup(model.parameters())};
  MultiTensorAdamW optimizer(std::move(groups), torch::optim::AdamWOptions(3e-4).weight_decay(0.01));
  r.optimizer = optimizer.kernel() == AdamWKernel::Fused ? "fused" : "foreach";
  // The benchmark's model is GPT-2 style (LayerNorm, learned positions): no rotary embedding to fuse.
  std::vector<std::string> kernels;
  if (device.is_cuda() && fused_cross_entropy_available()) kernels.push_back("loss");
  if (fused_norm_enabled(device)) kernels.push_back("add+norm");
  for (const auto& k : kernels) r.kernels += (r.kernels.empty() ? "" : ", ") + k;
  if (r.kernels.empty()) r.kernels = "none";
  const auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  Batch batch{torch::randint(0, o.vocab, {o.batch, o.context}, ids), torch::randint(0, o.vocab, {o.batch, o.context}, ids),
              torch::Tensor()};
  // The graph's eager steps and its capture are part of the warm-up: the timed steps are replays.
  std::unique_ptr<CudaGraphStep> graph;
  if (o.cuda_graph) graph = std::make_unique<CudaGraphStep>(model, optimizer, 1.0, o.bf16);
  const auto step = [&] {
    return graph ? graph->run(batch, false) : train_step(model, optimizer, batch, 1.0, o.bf16, false);
  };
  // Warm-up pays for first-call costs (CUDA context, cuBLAS handles, kernel selection, allocator growth).
  const std::int64_t warmup = std::max<std::int64_t>(graph ? kCudaGraphWarmupCalls : 1, o.warmup);
  for (std::int64_t i = 0; i < warmup; ++i) {
    step();
    threads.update();
  }
  synchronize(device);
  std::vector<torch::Tensor> losses;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < o.steps; ++i) {
    losses.push_back(step().loss);
    threads.update();
  }
  synchronize(device);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(o.steps);
  if (o.kernel_top > 0 || !o.profile_path.empty()) r.kernel_table = profile_steps(o, device, step);
  r.first_loss = losses.front().item<double>();
  r.last_loss = losses.back().item<double>();
  r.threads = threads.threads();
  r.ms_per_step = dt * 1000.0;
  r.tokens_per_s = double(o.batch * o.context) / dt;
  r.tflops = train_step_flops(o) / dt / 1e12;
  return r;
}

PeerBenchResult run_peer_bench(const std::string& python, const std::string& script, const TrainStepBenchOptions& o,
                               bool compile) {
  PeerBenchResult r;
  const int threads = o.threads > 0 ? o.threads : configure_threads(0);
  std::ostringstream cmd;
  // PyTorch reads this once at start: its fp32 matmuls then take TF32 as allow_tf32 = True would.
  if (o.tf32) cmd << "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 ";
  cmd << "THREADS=" << threads << " DEVICE='" << o.device << "' BF16=" << (o.bf16 ? 1 : 0) << " COMPILE="
      << (compile ? 1 : 0) << " D=" << o.n_embd << " L=" << o.n_layer << " H=" << o.n_head << " FF=" << o.d_ff
      << " V=" << o.vocab << " '" << python << "' '" << script << "' " << o.batch << " " << o.context << " " << o.steps
      << " 2>&1";
  FILE* pipe = popen(cmd.str().c_str(), "r");
  if (!pipe) {
    r.output = "cannot start " + python;
    return r;
  }
  std::array<char, 512> buf{};
  while (fgets(buf.data(), buf.size(), pipe)) r.output += buf.data();
  const int status = pclose(pipe);
  const auto pos = r.output.find("step_ms ");
  if (status != 0 || pos == std::string::npos) return r;
  std::istringstream in(r.output.substr(pos));
  std::string k1, k2;
  in >> k1 >> r.ms_per_step >> k2 >> r.tokens_per_s;
  r.ok = static_cast<bool>(in);
  return r;
}

namespace {

std::filesystem::path source_root() {
  return std::filesystem::path(ROUTELAB_SOURCE_EXPERIMENTS_DIR).parent_path();
}

/// The torch major version `python` imports (0 when it cannot import torch).
int python_torch_major(const std::string& python) {
  const std::string cmd = "'" + python + "' -c 'import torch; print(torch.__version__)' 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return 0;
  std::array<char, 128> buf{};
  std::string out;
  while (fgets(buf.data(), buf.size(), pipe)) out += buf.data();
  pclose(pipe);
  return out.empty() ? 0 : std::atoi(out.c_str());
}

}  // namespace

std::string default_peer_python() {
  if (const char* env = std::getenv("ROUTELAB_PYTHON")) return env;
  const auto venv = source_root() / ".venv-torch" / "bin" / "python3";
  if (std::filesystem::exists(venv)) return venv.string();
  return "/usr/bin/python3";
}

std::string default_peer_script(const std::string& python) {
  if (const char* env = std::getenv("ROUTELAB_PYREF")) return env;
  namespace fs = std::filesystem;
  const std::string name = python_torch_major(python) >= 2 ? "pyref2_gpt_step.py" : "pyref_gpt_step.py";
  for (const auto& candidate : {source_root() / ".." / "shared" / "tools" / name, source_root() / "shared" / "tools" / name})
    if (fs::exists(candidate)) return fs::weakly_canonical(candidate).string();
  return (source_root() / ".." / "shared" / "tools" / name).string();
}

}  // namespace routelab
