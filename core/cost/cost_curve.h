// A run's cost against sequence length, priced by its architecture's registry entry from one stored evaluation:
// forward FLOPs of the layers (estimate_flops at the fractions the evaluation measured) and KV-cache bytes after
// a prompt pass (layer_kv_entries of each stored layer record), each next to a dense model of the same shape. The
// cost-length figure and the run dashboard's cost tab draw this one curve. No Torch in this header.
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run/evaluation_record.h"

namespace routelab {

struct CostPoint {
  std::int64_t seq = 0;
  double flops = 0, dense_flops = 0;        ///< forward FLOPs of every layer, one sequence (no LM head)
  double kv_bytes = 0, dense_kv_bytes = 0;  ///< KV cache of every layer, one sequence
};

/// K and V of one token in one layer of `model` (a complete model section), in bytes of `value_bytes` each, as its
/// architecture's FLOPs model states the width (FlopsEstimate::kv_width). ConfigError when it cannot be priced.
double kv_entry_bytes(const nlohmann::json& model, double value_bytes);

/// The curve at `lengths` for `model` (a complete model section) from an evaluation's per-layer records.
/// ConfigError when there are none, the architecture has no FLOPs model, the section no Transformer shape, or the
/// records do not fit the model (another layer count).
std::vector<CostPoint> priced_cost_curve(const nlohmann::json& model, const std::vector<LayerRouting>& layers,
                                         double value_bytes, const std::vector<std::int64_t>& lengths);

/// Powers of two from 64 to max(8192, 4 x context): the lengths both views draw by default.
std::vector<std::int64_t> default_cost_lengths(std::int64_t context);

}  // namespace routelab
