// A stored context-length curve (perplexity against evaluation length, beyond the trained context): what
// `routelab-cli context RUN --store` writes as an evaluation row of split "context:<scaling>x<factor>", and the one
// reader of it (Torch-free).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace routelab {

struct EvalRow;

struct ContextPoint {
  std::int64_t length = 0;
  double loss = 0, ppl = 0, bpc = 0;
  std::int64_t windows = 0;
};

struct ContextCurve {
  std::int64_t run_id = 0, step = 0, trained_context = 0;
  std::string name, arch, scaling;
  double factor = 1;
  std::vector<ContextPoint> points;
  nlohmann::json to_json() const;
  std::string to_table() const;
  std::string split_name() const;  ///< "context:yarnx4"
};

/// Whether an evaluation row holds a context-length curve (its split starts with "context:").
bool is_context_curve(const EvalRow& row);
/// The curve of such a row; a DataError naming the step, split and key when it cannot be read.
ContextCurve read_context_curve(const EvalRow& row);

}  // namespace routelab
