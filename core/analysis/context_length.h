// Long-context evaluation (DTRNet "Length Extrapolation", Figure 3): a stored run's perplexity at sequence
// lengths beyond its training context, with RoPE context extension (linear interpolation or YaRN) chosen at
// evaluation. Each length is evaluated on the same number of validation tokens in strided windows: consecutive,
// non-overlapping windows of that length from the start of the split, every token scored once (synthetic tasks,
// which have no windows, use examples drawn with the trainer's fixed evaluation seed); the curve can be stored with
// the run (an evaluation row of split "context:<scaling>x<factor>").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run/context_curve.h"

namespace routelab {

struct ContextCurveOptions {
  std::vector<std::int64_t> lengths;     ///< evaluation lengths T
  std::string scaling = "none";          ///< none, linear or yarn (llama style only)
  double factor = 0;                     ///< rope_factor; 0 = longest length / training context (at least 1)
  std::int64_t tokens = 16384;           ///< validation tokens per length
  std::string split = "val";
  std::int64_t step = 0;                 ///< checkpoint step, 0 = latest
  std::vector<std::string> sets;         ///< further eval-only overrides
};

/// Evaluates the run at every length. Throws ConfigError for a length beyond what learned positions (GPT-2
/// style) allow, or for scaling on a model without RoPE; errors of load_run otherwise.
ContextCurve context_curve(const std::string& db_path, std::int64_t run_id, const ContextCurveOptions& options);

/// Stores the curve as an evaluation row of the run (loss and ppl of the longest length; every point in the
/// extra JSON). Nothing else of the run changes.
void store_context_curve(const std::string& db_path, const ContextCurve& curve);

}  // namespace routelab
