// The priced cost curve (cost_curve.h): every number comes from the architecture's registry entry (its FLOPs
// model and its KV rule), none from a rule of this file.
#include "core/cost/cost_curve.h"

#include <algorithm>
#include <string>

#include "core/cost/flops_model.h"
#include "core/models/registry.h"
#include "core/util/errors.h"

namespace routelab {

double kv_entry_bytes(const nlohmann::json& model, double value_bytes) {
  FlopsQuery q;  // the shape alone: the architecture's FLOPs model states the width of a cache entry
  q.seq = 1;
  const auto width = estimate_flops(model, 256, q).kv_width;
  if (!(width > 0)) throw ConfigError("model: the " + model.value("arch", std::string()) + " FLOPs model states no KV width");
  return width * value_bytes;
}

std::vector<CostPoint> priced_cost_curve(const nlohmann::json& model, const std::vector<LayerRouting>& layers,
                                         double value_bytes, const std::vector<std::int64_t>& lengths) {
  if (layers.empty()) throw ConfigError("cost curve: the evaluation has no per-layer records");
  const auto arch = model.value("arch", std::string());
  const auto fractions = fractions_from_trace(arch, layers);
  const double entry = kv_entry_bytes(model, value_bytes);
  std::vector<CostPoint> curve;
  for (const auto t : lengths) {
    FlopsQuery q;
    q.seq = t;
    q.fractions = fractions;
    const auto est = estimate_flops(model, 256, q);  // layers only: the vocabulary prices the head alone
    if (est.layers.size() != layers.size())
      throw ConfigError("cost curve: the evaluation stores " + std::to_string(layers.size()) + " layers, the " + arch +
                        " model has " + std::to_string(est.layers.size()));
    CostPoint p;
    p.seq = t;
    p.flops = est.layer_flops();
    p.dense_flops = est.dense_layer_flops();
    for (const auto& l : layers) p.kv_bytes += layer_kv_entries(l, static_cast<double>(t)) * entry;
    p.dense_kv_bytes = static_cast<double>(layers.size()) * static_cast<double>(t) * entry;
    curve.push_back(p);
  }
  return curve;
}

std::vector<std::int64_t> default_cost_lengths(std::int64_t context) {
  std::vector<std::int64_t> out;
  const auto limit = std::max<std::int64_t>(8192, 4 * context);
  for (std::int64_t t = 64; t <= limit; t *= 2) out.push_back(t);
  return out;
}

}  // namespace routelab
