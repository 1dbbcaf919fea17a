// Sparse execution speed (issue 6): the eval-mode forward (or, with `train`, the training step) of a dense model
// against the routed architectures whose
// routers a benchmark can force (ArchitectureEntry::force_routed_share: DTRNet, MoD, D-LLM, TSA in sparse inference)
// of equal shape, routers forced to target fractions, timed interleaved; the measured time
// ratio next to the FLOPs ratio of the very forward timed (from its trace), and where they disagree by more than
// a threshold at long sequences, a breakdown of where the time goes. No Torch in this header.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bench/part_profile.h"

namespace routelab {

struct ForwardBenchOptions {
  std::vector<std::int64_t> lengths{512, 1024, 2048, 4096, 8192};
  std::vector<double> fractions{0.1, 0.3, 0.7};  ///< routed fraction each router is forced to
  /// compared with the dense model; empty: every architecture with a force_routed_share hook
  std::vector<std::string> archs;
  std::int64_t batch = 1;
  /// shape of every model (llama style): d 512, 8 layers, 8 heads; each architecture keeps its default pattern
  /// of routed layers (DTRNet bilayer, MoD alternate, D-LLM after-2, TSA every block after the stem)
  std::int64_t n_embd = 512, n_layer = 8, n_head = 8, n_kv_head = 0, vocab = 256;
  int warmup = 1;  ///< untimed forwards of each model per (length, fraction)
  int reps = 3;    ///< timed forwards of each model per (length, fraction), interleaved; the median is reported
  int threads = 0;  ///< 0: all cores
  std::string device = "cpu";  ///< cpu or cuda
  bool bf16 = false;           ///< every forward under bf16 autocast (as training's train.precision=bf16)
  /// CUDA: fp32 matmuls on TF32 tensor cores, as training does by default (train.tf32): the fp32 routers of a bf16
  /// run and every product of an fp32 one. Off: LibTorch's default, full fp32.
  bool tf32 = true;
  /// time training steps instead of eval-mode forwards: train_step (forward in training mode, loss, backward,
  /// clipping, AdamW) with the learning rate 0, so the forced routers stay where they were put. Routing follows each
  /// architecture's training rule (MoD: the top-k at the forced capacity; D-LLM and TSA compute every block in
  /// training, as their papers train).
  bool train = false;
  /// on a GPU: the steps (with `train`: ArchitectureEntry::cuda_graph_step, as train.cuda_graph trains) or the eval
  /// forwards (ArchitectureEntry::cuda_graph_forward, CudaGraphForward) of dense and of every architecture that can
  /// be captured at this precision, captured as CUDA graphs and replayed; the others stay eager (each row says which)
  bool cuda_graph = false;
  /// bias calibration passes (each: one traced forward, then every router's bias set from its own scores)
  int calibration_passes = 2;
  /// a breakdown is printed where time ratio / FLOPs ratio exceeds this at a length >= breakdown_min_seq
  double breakdown_threshold = 1.25;
  std::int64_t breakdown_min_seq = 2048;
  /// with breakdowns: also this many kernels of each model's call and of dense's, the longest (GPU kernel
  /// breakdowns), or the top-level ops the model dispatches most beyond dense's count (host breakdowns)
  int kernels = 0;
  /// smoke-test scale: lengths 128, 256, d 128, 4 layers, 4 heads, 1 timed rep, breakdowns at every length
  bool quick = false;
};

struct ForwardBenchRow {
  std::int64_t seq = 0;
  double target = 0;          ///< the fraction asked for
  std::string arch;
  double fraction = 0;        ///< measured: mean routed fraction over the routed layers in the timed forward's trace
  double dense_ms = 0, ms = 0;  ///< medians
  double time_ratio = 0;      ///< ms / dense_ms
  double flops_ratio = 0;     ///< sum LayerTrace::flops / sum dense_flops of the timed forward
  double quotient = 0;        ///< time_ratio / flops_ratio (1 = time follows FLOPs)
  bool graph = false, dense_graph = false;  ///< the model's / dense's step timed as CUDA graph replays
  /// graph: how often the step was captured by the end of the timed calls (more than once: its routing outgrew, or
  /// fell well below, the shapes captured: DTRNet's sized rows)
  int captures = 0;
  /// An eval forward declared capturable whose capture failed on this device: why (it then ran eagerly).
  std::string graph_note;
  /// On a GPU, what the caching allocator did during this model's timed calls and dense's (allocator_events): blocks
  /// taken from or returned to the device and allocations retried after emptying the cache. Nonzero counts mean
  /// the timed calls waited for the device beyond their own work (the bench holds every model's memory at once).
  std::int64_t device_allocs = 0, alloc_retries = 0, dense_device_allocs = 0, dense_alloc_retries = 0;
  /// Where the device's memory is tracked (a GPU; -1 elsewhere): the most one timed call held above what was
  /// allocated before it (activations, workspaces), and what was allocated before it (every model's weights,
  /// gradients and optimizer state the bench holds, and a CUDA graph's pool, taken at its capture), in MB; dense's
  /// beside
  double step_peak_mb = -1, held_mb = -1, dense_step_peak_mb = -1, dense_held_mb = -1;
  /// Where one call's time goes (a breakdown): op or kernel class -> ms, what the call launches (GPU kernels, memory
  /// copies and fills where ForwardBenchResult::kernel_breakdowns, else top-level ops on the host; medians over the
  /// profiled calls) and, with ForwardBenchOptions::kernels, its longest kernels on a GPU (longest first) or, on the
  /// host, every top-level op by name (the last profiled call's calls and ms).
  using Kernel = CallProfile::Kernel;
  using Profile = CallProfile;
  /// where quotient > threshold at a long sequence: this model's call and dense's (classes_ms empty otherwise)
  Profile profile, dense_profile;
};

struct ForwardBenchResult {
  ForwardBenchOptions options;  ///< as run (quick applied)
  int threads = 0;
  std::string device;
  /// How compacted sequences were attended: "varlen flash" (a GPU in half precision), "padded" (to the longest
  /// sequence), "unpadded CPU kernel" (CPU fp32).
  std::string compacted_attention;
  /// Breakdowns are GPU kernel time by class (a CUDA device, LibTorch 2.x), else host time by op class.
  bool kernel_breakdowns = false;
  std::vector<ForwardBenchRow> rows;
  std::string to_table() const;
  nlohmann::json to_json() const;
};

/// Throws ConfigError for a bad option (unknown arch or one without a forcible router, fraction outside [0, 1],
/// cuda without a GPU).
ForwardBenchResult bench_forward(const ForwardBenchOptions& options);

}  // namespace routelab
