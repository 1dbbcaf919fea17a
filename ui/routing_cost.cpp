// Cost adapter: the layer shape comes from core (transformer_options_from_json + layer_shape), the prices from
// core/cost/flops.h; only the per-layer token shares are decided here.
#include "ui/routing_cost.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/cost/flops.h"
#include "core/models/dense_transformer.h"

namespace routelab {

CostShape costShapeFromConfig(const std::string& configJson) {
  CostShape shape;
  try {
    const auto doc = nlohmann::json::parse(configJson);
    const auto& model = doc.at("model");
    const auto context = doc.at("data").at("context").get<std::int64_t>();
    const auto options = transformer_options_from_json(model, /*vocab_size=*/256, context);
    const LayerShape s = layer_shape(options);
    shape.nLayer = options.n_layer();
    shape.d = static_cast<double>(s.d);
    shape.dKv = static_cast<double>(s.d_kv);
    shape.dFf = static_cast<double>(s.d_ff);
    shape.gatedMlp = s.gated_mlp;
    shape.context = context;
    const auto& train = doc.at("train");
    shape.bytesPerValue = train.contains("precision") && train.at("precision") == "bf16" ? 2 : 4;
    shape.valid = shape.nLayer > 0 && shape.d > 0;
    if (!shape.valid) shape.error = QStringLiteral("the config has no Transformer layer shape");
  } catch (const std::exception& e) {
    shape.error = QStringLiteral("no Transformer layer shape in the config (%1)").arg(QString::fromUtf8(e.what()));
  }
  return shape;
}

LayerParticipation participationAt(const EvalSnapshot& eval, const RoutingHistory& history) {
  const int layers = static_cast<int>(eval.routedFraction.size());
  LayerParticipation p;
  p.attn.fill(1.0, layers);
  p.mlp.fill(1.0, layers);
  // The last logged training step at or before the evaluation (the first one for the step-0 evaluation).
  qsizetype column = -1;
  for (qsizetype i = 0; i < history.steps.size(); ++i)
    if (history.steps[i] <= static_cast<double>(eval.step) || column < 0) column = i;
  for (int l = 0; l < layers; ++l) {
    if (!eval.routed.value(l, false)) continue;
    const double f = eval.routedFraction[l];
    if (column < 0) {
      p.attn[l] = p.mlp[l] = f;  // nothing logged yet: assume the whole block follows the routing
      continue;
    }
    const double r = history.fraction[column].value(l, 1.0);
    auto scale = [&](double share) {
      if (!std::isfinite(share)) return f;
      if (std::abs(share - r) < 1e-9) return f;  // this sub-layer ran exactly the routed tokens
      if (share >= 1.0 - 1e-9) return 1.0;       // it ran every token
      return r > 0 ? share * f / r : share;
    };
    p.attn[l] = scale(history.attnShare[column].value(l, std::nan("")));
    p.mlp[l] = scale(history.mlpShare[column].value(l, std::nan("")));
  }
  return p;
}

CostCurves costCurves(const CostShape& shape, const LayerParticipation& participation, double measuredFlopsRatio) {
  CostCurves c;
  if (!shape.valid) return c;
  LayerShape s;
  s.d = static_cast<std::int64_t>(shape.d);
  s.d_kv = static_cast<std::int64_t>(shape.dKv);
  s.d_ff = static_cast<std::int64_t>(shape.dFf);
  s.gated_mlp = shape.gatedMlp;
  const double kvBytesPerToken = 2.0 * shape.dKv * shape.bytesPerValue;  // K and V
  const double mib = 1024.0 * 1024.0;
  const double longest = std::max<double>(8192, 4.0 * static_cast<double>(shape.context));
  for (double T = 64; T <= longest; T *= 2) {
    double dense = 0, routed = 0, kvDense = 0, kvRouted = 0;
    for (qint64 l = 0; l < shape.nLayer; ++l) {
      const double a = participation.attn.value(l, 1.0), m = participation.mlp.value(l, 1.0);
      dense += dense_layer_flops(1, T, s);
      // Attention runs over the a*T routed tokens only: O((aT)^2), as the compacted kernels do.
      routed += qkv_flops(a * T, s) + attention_core_flops(a * T * a * T, s) + out_proj_flops(a * T, s) +
                mlp_flops(m * T, s);
      kvDense += T * kvBytesPerToken;
      kvRouted += a * T * kvBytesPerToken;
    }
    c.seqLen.push_back(T);
    c.denseFlops.push_back(dense);
    c.routedFlops.push_back(routed);
    c.denseKvMiB.push_back(kvDense / mib);
    c.routedKvMiB.push_back(kvRouted / mib);
  }
  if (shape.context > 0 && std::isfinite(measuredFlopsRatio)) {
    c.measuredSeqLen = static_cast<double>(shape.context);
    c.measuredFlops = measuredFlopsRatio * static_cast<double>(shape.nLayer) *
                      dense_layer_flops(1, static_cast<double>(shape.context), s);
  }
  return c;
}

}  // namespace routelab
