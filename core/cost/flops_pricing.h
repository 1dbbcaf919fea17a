// What an architecture's FLOPs pricing function (ArchitectureEntry::price_flops, in the architecture's own file)
// reads and builds its estimate with. Each function follows its model's eval-mode forward matrix product by matrix
// product, with the per-piece formulas of flops.h, and assumes the routed tokens of a layer are spread evenly over
// the sequences of the batch (exact for batch 1; with uneven sequences the compacted paths also pay for padding
// rows). No Torch in this header.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cost/flops.h"
#include "core/cost/flops_model.h"

namespace routelab {

/// What every pricing function reads.
struct FlopsInput {
  std::string arch;
  nlohmann::json model;  ///< complete, checked model section
  FlopsQuery query;
  double vocab = 0;
};

/// Builds an estimate layer by layer.
struct FlopsBuilder {
  FlopsEstimate est;
  double B = 0, T = 0, N = 0;  ///< batch, sequence, tokens

  /// Starts an estimate for `in`; the LM head maps width s.d to `head_out` outputs over every token.
  FlopsBuilder(const FlopsInput& in, const LayerShape& s, double head_out);
  /// Appends a layer of trace kind `kind` (its dense_flops: a dense layer of shape `s` on the same input).
  LayerFlops& add(int layer, const std::string& kind, bool routed, double fraction, const LayerShape& s);
  /// Appends a dense layer.
  void dense(int layer, const LayerShape& s);
  /// A pre-norm block over `rows` token rows whose attention spans `sum_sq` query-key pairs.
  static void block(LayerFlops& l, double rows, double sum_sq, const LayerShape& s);
  /// Adds `flops` to component `name` of `l` (a zero is not listed).
  static void part(LayerFlops& l, const std::string& name, double flops);
  /// A block run on the `fraction` of each sequence's tokens that a router selects, compacted (attention O(k^2)).
  void compacted_block(LayerFlops& l, double fraction, const LayerShape& s) const {
    block(l, B * fraction * T, B * fraction * T * fraction * T, s);
  }
  /// Every layer of a pattern: dense where `routed` is false, else a layer of trace kind `kind` at its fraction,
  /// completed by `price(layer, flops)`.
  template <class Price>
  void layers(const std::vector<bool>& routed, const std::vector<double>& fractions, const std::string& kind,
              const LayerShape& s, Price price) {
    for (std::size_t i = 0; i < routed.size(); ++i) {
      const int layer = static_cast<int>(i);
      if (routed[i])
        price(layer, add(layer, kind, true, fractions[i], s));
      else
        dense(layer, s);
    }
  }
};

/// Per-layer fractions from the query: n_layer values, one value for all, or `fallback` for every routed layer;
/// ConfigError for a list of the wrong length or a value outside [lo, hi]. Unrouted layers get 1.
std::vector<double> layer_fractions(const FlopsInput& in, const std::vector<bool>& routed, double fallback, double lo,
                                    double hi);

}  // namespace routelab
