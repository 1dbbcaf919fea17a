// The benchmark model mirrors the peer exactly: GPT-2 style, d 256, L 6, H 8, d_ff 1024, vocab 65, learned
// positions, tied head, exact GELU, AdamW(lr 3e-4, PyTorch defaults: wd 0.01 on all parameters), clip 1.0.
#include "core/bench/train_step_bench.h"

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <torch/torch.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include "core/models/dense_transformer.h"
#include "core/train/step.h"
#include "core/util/device.h"
#include "core/util/version.h"

namespace routelab {

TrainStepBenchResult bench_train_step(const TrainStepBenchOptions& o) {
  TrainStepBenchResult r;
  r.threads = configure_threads(o.threads);
  torch::manual_seed(0);
  TransformerOptions opts;
  opts.style(ModelStyle::GPT2).vocab_size(65).max_seq_len(o.context).n_layer(6).n_embd(256).n_head(8).d_ff(1024)
      .tie_weights(true).init("normal");
  DenseTransformer model(opts);
  model.train();
  r.parameters = model.parameter_count();
  torch::optim::AdamW optimizer(model.parameters(), torch::optim::AdamWOptions(3e-4).weight_decay(0.01));
  Batch batch{torch::randint(0, 65, {o.batch, o.context}, torch::kLong),
              torch::randint(0, 65, {o.batch, o.context}, torch::kLong), torch::Tensor()};
  for (std::int64_t i = 0; i < o.warmup; ++i) train_step(model, optimizer, batch, 1.0, o.bf16, false);
  std::unique_ptr<torch::autograd::profiler::RecordProfile> profile;
  if (!o.profile_path.empty()) profile = std::make_unique<torch::autograd::profiler::RecordProfile>(o.profile_path);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < o.steps; ++i) {
    const auto res = train_step(model, optimizer, batch, 1.0, o.bf16, false);
    const double loss = res.loss.item<double>();
    if (i == 0) r.first_loss = loss;
    r.last_loss = loss;
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(o.steps);
  profile.reset();
  r.ms_per_step = dt * 1000.0;
  r.tokens_per_s = double(o.batch * o.context) / dt;
  return r;
}

PeerBenchResult run_peer_bench(const std::string& python, const std::string& script, const TrainStepBenchOptions& o) {
  PeerBenchResult r;
  const int threads = o.threads > 0 ? o.threads : configure_threads(0);
  std::ostringstream cmd;
  cmd << "THREADS=" << threads << " '" << python << "' '" << script << "' " << o.batch << " " << o.context << " "
      << o.steps << " 2>&1";
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

std::string default_peer_script() {
  if (const char* env = std::getenv("ROUTELAB_PYREF")) return env;
  namespace fs = std::filesystem;
  const fs::path source_root = fs::path(ROUTELAB_SOURCE_EXPERIMENTS_DIR).parent_path();
  for (const auto& candidate : {source_root / ".." / "shared" / "tools" / "pyref_gpt_step.py",
                                source_root / "shared" / "tools" / "pyref_gpt_step.py"})
    if (fs::exists(candidate)) return fs::weakly_canonical(candidate).string();
  return (source_root / ".." / "shared" / "tools" / "pyref_gpt_step.py").string();
}

}  // namespace routelab
