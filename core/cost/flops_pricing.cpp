// The building blocks of the architectures' FLOPs pricing functions (flops_pricing.h).
#include "core/cost/flops_pricing.h"

#include "core/util/errors.h"

namespace routelab {

FlopsBuilder::FlopsBuilder(const FlopsInput& in, const LayerShape& s, double head_out) {
  est.arch = in.arch;
  est.seq = in.query.seq;
  est.batch = in.query.batch;
  B = static_cast<double>(in.query.batch);
  T = static_cast<double>(in.query.seq);
  N = B * T;
  est.head_flops = linear_flops(N, static_cast<double>(s.d), head_out);
  est.kv_width = 2.0 * static_cast<double>(s.d_kv);
}

LayerFlops& FlopsBuilder::add(int layer, const std::string& kind, bool routed, double fraction, const LayerShape& s) {
  LayerFlops l;
  l.layer = layer;
  l.kind = kind;
  l.routed = routed;
  l.fraction = fraction;
  l.dense_flops = dense_layer_flops(B, T, s);
  est.layers.push_back(std::move(l));
  return est.layers.back();
}

void FlopsBuilder::dense(int layer, const LayerShape& s) { block(add(layer, "dense", false, 1.0, s), N, B * T * T, s); }

void FlopsBuilder::block(LayerFlops& l, double rows, double sum_sq, const LayerShape& s) {
  part(l, "attn_qkv", qkv_flops(rows, s));
  part(l, "attn_core", attention_core_flops(sum_sq, s));
  part(l, "attn_out", out_proj_flops(rows, s));
  part(l, "mlp", mlp_flops(rows, s));
}

void FlopsBuilder::part(LayerFlops& l, const std::string& name, double flops) {
  if (flops == 0) return;
  l.flops += flops;
  for (auto& [k, v] : l.parts)
    if (k == name) {
      v += flops;
      return;
    }
  l.parts.emplace_back(name, flops);
}

std::vector<double> layer_fractions(const FlopsInput& in, const std::vector<bool>& routed, double fallback, double lo,
                                    double hi) {
  const auto L = routed.size();
  const auto& f = in.query.fractions;
  std::vector<double> out(L, 1.0);
  if (!f.empty() && f.size() != 1 && f.size() != L)
    throw ConfigError("flops fractions: " + std::to_string(f.size()) + " values for a " + std::to_string(L) +
                      "-layer " + in.arch + " model (give one for all layers or one per layer)");
  for (std::size_t i = 0; i < L; ++i) {
    if (!routed[i]) continue;
    const double v = f.empty() ? fallback : f.size() == 1 ? f[0] : f[i];
    if (!(v >= lo && v <= hi))
      throw ConfigError("flops fractions: layer " + std::to_string(i) + " fraction " + std::to_string(v) +
                        " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "] for " + in.arch);
    out[i] = v;
  }
  return out;
}

}  // namespace routelab
