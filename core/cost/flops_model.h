// The FLOPs model: per architecture and per layer, the forward FLOPs an eval-mode forward executes as a function of
// the sequence length, the batch and the routed fraction(s), broken down by component, next to a dense model of the
// same shape. Built from the per-piece formulas of flops.h, so it prices exactly what the models put in LayerTrace
// (exceptions are listed in the estimate's notes). No Torch in this header.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run/evaluation_record.h"

namespace routelab {

/// What to price.
struct FlopsQuery {
  std::int64_t seq = 1024;  ///< T
  std::int64_t batch = 1;
  /// Routed fraction per layer (n_layer values), or one value for every routed layer, or empty for the
  /// architecture's default (see routed_fraction_meaning()). What a fraction means depends on the architecture:
  /// DTRNet: share of tokens sent to attention; MoD: share selected by the router/predictor; D-LLM: share that
  /// executes the block; TSA: share that runs the FFN (p <= 0.5, sparse inference); early exit: share still active;
  /// Radial: executions of the layer per token (may exceed 1 with reuse; their sum is the mean depth); DRR: unused.
  /// Values of layers that do not route are ignored.
  std::vector<double> fractions;
};

struct LayerFlops {
  int layer = 0;
  std::string kind = "dense";  ///< as LayerTrace::kind
  bool routed = false;
  double fraction = 1.0;       ///< the routed fraction priced (1 for a dense layer)
  std::vector<std::pair<std::string, double>> parts;  ///< component -> FLOPs, summing to `flops`
  double flops = 0;
  double dense_flops = 0;      ///< a dense layer of the same shape on the same input
};

struct FlopsEstimate {
  std::string arch;
  std::int64_t seq = 0, batch = 0;
  std::vector<LayerFlops> layers;
  double embedding_flops = 0;  ///< token (and learned position) lookups: no multiply-adds, listed as 0
  double head_flops = 0;       ///< the final LM head, d x V over every token (the same in the dense model)
  double kv_width = 0;         ///< values one token's cache entry holds in one layer: its key and value, 2 d_kv
  std::vector<std::string> notes;  ///< what the code does that the numbers reflect (compaction, masking, ...)

  double layer_flops() const;
  double dense_layer_flops() const;
  double total_flops() const { return layer_flops() + embedding_flops + head_flops; }
  double dense_total_flops() const { return dense_layer_flops() + embedding_flops + head_flops; }
  /// Layers only: what the trainer's flops_ratio (sum LayerTrace::flops / dense_flops) reports.
  double layer_ratio() const;
  /// Whole forward, LM head included.
  double total_ratio() const;
  /// Component -> FLOPs summed over the layers.
  std::vector<std::pair<std::string, double>> parts_total() const;
  nlohmann::json to_json() const;
};

/// The counting convention, as printed with every estimate.
std::string flops_convention();

/// Prices `model` (a model config section: "arch" plus the registry's options; missing options take their
/// defaults, then the architecture's cross-field check runs) for a vocabulary of `vocab_size` tokens. Throws
/// ConfigError for an architecture without a FLOPs model ("flops model: unsupported architecture 'x' (known:
/// ...)"), a fraction list of the wrong length or a fraction outside its range.
FlopsEstimate estimate_flops(const nlohmann::json& model, std::int64_t vocab_size, const FlopsQuery& query);

/// Architecture ids with a FLOPs model, sorted.
std::vector<std::string> flops_model_architectures();
/// One line per architecture: what its routed fraction means and its default.
std::string routed_fraction_meaning(const std::string& arch);

/// Per-layer fractions in the form estimate_flops takes: the stat the architecture's registry entry names
/// (ArchitectureEntry::priced_share_stat; TSA's "active_share") where a layer has it, else its routed fraction.
/// ConfigError for an architecture without a FLOPs model.
std::vector<double> fractions_from_trace(const std::string& arch, const std::vector<LayerRouting>& layers);

}  // namespace routelab
