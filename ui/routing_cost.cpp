// Cost adapter: every number comes from core (cost_curve.h prices with the registry entry); this file only reads
// the config and converts to Qt containers.
#include "ui/routing_cost.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/cost/cost_curve.h"
#include "core/models/registry.h"

namespace routelab {

CostModel costModelFromConfig(const std::string& configJson) {
  CostModel m;
  try {
    const auto doc = nlohmann::json::parse(configJson);
    auto model = schema_defaults(architecture(doc.at("model").at("arch").get<std::string>()).options);
    for (const auto& [key, value] : doc.at("model").items()) model[key] = value;
    const auto& train = doc.at("train");
    m.bytesPerValue = train.contains("precision") && train.at("precision") == "bf16" ? 2 : 4;
    m.context = doc.at("data").at("context").get<std::int64_t>();
    m.nLayer = model.at("n_layer").get<std::int64_t>();
    kv_entry_bytes(model, m.bytesPerValue);  // a Transformer shape, or the reason
    m.modelJson = model.dump();
    m.valid = m.nLayer > 0;
    if (!m.valid) m.error = QStringLiteral("the config has no Transformer layers");
  } catch (const std::exception& e) {
    m.error = QStringLiteral("no Transformer layer shape in the config (%1)").arg(QString::fromUtf8(e.what()));
  }
  return m;
}

CostCurves costCurves(const CostModel& model, const EvalSnapshot* eval) {
  CostCurves c;
  if (!model.valid) return c;
  const auto section = nlohmann::json::parse(model.modelJson);
  const auto lengths = default_cost_lengths(model.context);
  const double mib = 1024.0 * 1024.0;
  // Unrouted records price the dense model: every layer every token (the dense figures of any curve are the same).
  std::vector<LayerRouting> dense_layers(static_cast<std::size_t>(std::max<qint64>(0, model.nLayer)));
  for (std::size_t l = 0; l < dense_layers.size(); ++l) dense_layers[l].layer = static_cast<int>(l);
  const std::vector<LayerRouting> layers = eval ? eval->layers : std::vector<LayerRouting>{};
  std::vector<CostPoint> curve;
  bool routed = false;
  try {
    if (!layers.empty()) {
      // The curve's lengths and, last, the run's context, priced in one pass.
      auto points = lengths;
      points.push_back(std::max<qint64>(1, model.context));
      curve = priced_cost_curve(section, layers, model.bytesPerValue, points);
      routed = true;
      const auto at = curve.back();
      curve.pop_back();
      c.contextRatio = at.dense_flops > 0 ? at.flops / at.dense_flops : 1.0;
      c.contextDenseFlops = at.dense_flops;
    }
  } catch (const std::exception& e) {
    c.error = QString::fromUtf8(e.what());
  }
  if (!routed) {
    try {
      curve = priced_cost_curve(section, dense_layers, model.bytesPerValue, lengths);
    } catch (const std::exception& e) {
      c.error = QString::fromUtf8(e.what());
      return c;
    }
  }
  for (const auto& p : curve) {
    c.seqLen.push_back(static_cast<double>(p.seq));
    c.denseFlops.push_back(p.dense_flops);
    c.denseKvMiB.push_back(p.dense_kv_bytes / mib);
    if (!routed) continue;
    c.routedFlops.push_back(p.flops);
    c.routedKvMiB.push_back(p.kv_bytes / mib);
  }
  return c;
}

}  // namespace routelab
