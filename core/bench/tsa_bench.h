// TSA inference wall-clock bench (seed 003 §3.6, App. E Table 8): the eval-mode forward of a dense model, TSA
// soft and TSA sparse of equal shape, with the routers forced to target active fractions, timed interleaved.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace routelab {

struct TsaBenchOptions {
  /// the paper's bench batch and sequence (§3.6: batch 64, seq 256)
  std::int64_t batch = 64, seq = 256;
  /// the char-LM shape of §3.2 (GPT-2 style); ignored when `checkpoint` is given
  std::int64_t n_embd = 256, n_layer = 6, n_head = 8, d_ff = 1024, vocab = 65;
  int warmup = 2;  ///< untimed forwards of each model per fraction
  int reps = 5;    ///< timed forwards of each model per fraction, interleaved (the median is reported)
  /// active fractions the routers are forced to (the paper's operating points 0.726 and 0.833 included)
  std::vector<double> fractions{1.0, 0.833, 0.726, 0.5};
  int threads = 0;  ///< 0: all cores
  /// a TSA run's checkpoint: its config gives the shape and its weights the routers (empty: random weights)
  std::string checkpoint;
};

struct TsaBenchRow {
  double target = 0;      ///< active fraction asked for
  double alpha = 0;       ///< measured: share of (token, routed block) pairs that ran the FFN in sparse mode
  double alpha_soft = 0;  ///< eq. 6 α of the same routers: mean(1 - p) (what soft mode computes with)
  double dense_ms = 0, soft_ms = 0, sparse_ms = 0;      ///< median eval-mode forward
  double soft_flops_ratio = 0, sparse_flops_ratio = 0;  ///< layer FLOPs from the traces / the dense model's
};

struct TsaBenchResult {
  TsaBenchOptions options;  ///< as run: the checkpoint's shape, the sequence clamped to its max_seq_len
  int threads = 0;
  std::string model;        ///< the TSA model's description
  std::vector<TsaBenchRow> rows;
  /// One line per target fraction: α measured, ms, speed vs dense (dense ms / ms: above 1 is faster), FLOPs ratios.
  std::string to_table() const;
};

/// For each target fraction: sets every router's output bias, in order, so that exactly that share of the
/// bench batch's tokens has p <= 0.5 at that router (threshold between sorted logits); then times the
/// models. Throws ConfigError / CheckpointError for a bad option or checkpoint.
TsaBenchResult bench_tsa_inference(const TsaBenchOptions& options);

}  // namespace routelab
