// What an architecture's speed options buy at inference (TSA §3.6, App. E Table 8, for TSA's sparse
// execution): the eval-mode forward of a dense model, of the architecture as configured and of the same weights
// with its registered speed options (ArchitectureEntry::speed_options), the routers forced to target shares by the
// architecture's own calibration hook, timed interleaved and priced from their traces.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace routelab {

struct SpeedBenchOptions {
  /// an architecture with speed options and a benchmark hook; empty: the first registered one (ignored when
  /// `checkpoint` is given)
  std::string arch;
  /// the paper's bench batch and sequence (TSA §3.6: batch 64, seq 256)
  std::int64_t batch = 64, seq = 256;
  /// the char-LM shape of TSA §3.2 (GPT-2 style where the architecture has a style); ignored with `checkpoint`
  std::int64_t n_embd = 256, n_layer = 6, n_head = 8, d_ff = 1024, vocab = 65;
  int warmup = 2;  ///< untimed forwards of each model per share
  int reps = 5;    ///< timed forwards of each model per share, interleaved (the median is reported)
  /// shares the routers are forced to (TSA's operating points 0.726 and 0.833 included)
  std::vector<double> fractions{1.0, 0.833, 0.726, 0.5};
  int threads = 0;  ///< 0: all cores
  /// a run's checkpoint: its config gives the architecture and shape, its weights the routers (empty: random)
  std::string checkpoint;
};

struct SpeedBenchRow {
  double target = 0;  ///< share asked for
  double share = 0;   ///< measured with the speed options: mean over routed layers of the share the FLOPs model prices
  double dense_ms = 0, base_ms = 0, fast_ms = 0;        ///< median eval-mode forward: dense, as configured, fast
  double base_flops_ratio = 0, fast_flops_ratio = 0;    ///< layer FLOPs from the traces / the dense model's
};

struct SpeedBenchResult {
  SpeedBenchOptions options;  ///< as run: the checkpoint's architecture and shape, seq clamped to its max_seq_len
  int threads = 0;
  std::string model;          ///< the model's description
  std::string speed_options;  ///< the options of the fast forward, as JSON
  std::vector<SpeedBenchRow> rows;
  /// One line per target share: share measured, ms, speed vs dense (dense ms / ms: above 1 is faster), FLOPs ratios.
  std::string to_table() const;
};

/// For each target share: forces the fast model's routers with the architecture's benchmark hook (three
/// calibration passes), copies its weights to the model as configured, then times the three models. Throws
/// ConfigError / CheckpointError for a bad option or checkpoint, or an architecture without speed options or hook.
SpeedBenchResult bench_speed_options(const SpeedBenchOptions& options);

}  // namespace routelab
