// Training-step benchmark: RouteLab's train_step on the GPT-2-style model of the PyTorch peer script
// (../shared/tools/pyref_gpt_step.py), with the peer's optimizer settings, timed in this process.
#pragma once
#include <cstdint>
#include <string>

namespace routelab {

struct TrainStepBenchOptions {
  std::int64_t batch = 64, context = 128, steps = 10, warmup = 2;
  int threads = 0;     ///< 0: all cores
  bool bf16 = false;
  std::string profile_path;  ///< when set, the timed steps are recorded as a Chrome trace (autograd profiler)
};

struct TrainStepBenchResult {
  double ms_per_step = 0;
  double tokens_per_s = 0;
  double first_loss = 0, last_loss = 0;  ///< of the timed steps (fixed batch: the loss must fall)
  std::int64_t parameters = 0;
  int threads = 0;
};

TrainStepBenchResult bench_train_step(const TrainStepBenchOptions& options);

struct PeerBenchResult {
  bool ok = false;
  double ms_per_step = 0, tokens_per_s = 0;
  std::string output;  ///< what the script printed (for error messages)
};

/// Runs `python script B T steps` with THREADS=threads and parses its "step_ms X tokens_per_s Y" line.
PeerBenchResult run_peer_bench(const std::string& python, const std::string& script, const TrainStepBenchOptions& options);

/// The peer script: $ROUTELAB_PYREF, else ../shared/tools/pyref_gpt_step.py next to the source tree.
std::string default_peer_script();

}  // namespace routelab
