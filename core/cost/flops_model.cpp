// The FLOPs model: the registry entry of each architecture prices its own forward (ArchitectureEntry::price_flops,
// built with core/cost/flops_pricing.h in the architecture's file); this file checks the query, fills in the
// model's defaults and sums.
#include "core/cost/flops_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>

#include "core/config/options.h"
#include "core/models/registry.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

/// The registry entry of an architecture with a FLOPs model, or a ConfigError listing those that have one.
const ArchitectureEntry& priced_entry(const std::string& id) {
  for (const auto& e : architectures())
    if (e.id == id && e.price_flops) return e;
  std::string known;
  for (const auto& a : flops_model_architectures()) known += (known.empty() ? "" : ", ") + a;
  throw ConfigError("flops model: unsupported architecture '" + id + "' (known: " + known + ")");
}

}  // namespace

double FlopsEstimate::layer_flops() const {
  double f = 0;
  for (const auto& l : layers) f += l.flops;
  return f;
}

double FlopsEstimate::dense_layer_flops() const {
  double f = 0;
  for (const auto& l : layers) f += l.dense_flops;
  return f;
}

double FlopsEstimate::layer_ratio() const {
  const double d = dense_layer_flops();
  return d > 0 ? layer_flops() / d : 1.0;
}

double FlopsEstimate::total_ratio() const {
  const double d = dense_total_flops();
  return d > 0 ? total_flops() / d : 1.0;
}

std::vector<std::pair<std::string, double>> FlopsEstimate::parts_total() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& l : layers)
    for (const auto& [name, f] : l.parts) {
      auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == name; });
      if (it == out.end())
        out.emplace_back(name, f);
      else
        it->second += f;
    }
  return out;
}

nlohmann::json FlopsEstimate::to_json() const {
  nlohmann::json layers_json = nlohmann::json::array();
  for (const auto& l : layers) {
    nlohmann::json parts = nlohmann::json::object();
    for (const auto& [k, v] : l.parts) parts[k] = v;
    layers_json.push_back({{"layer", l.layer}, {"kind", l.kind}, {"routed", l.routed}, {"fraction", l.fraction},
                           {"flops", l.flops}, {"dense_flops", l.dense_flops}, {"parts", parts}});
  }
  return {{"arch", arch},
          {"seq", seq},
          {"batch", batch},
          {"convention", flops_convention()},
          {"layer_flops", layer_flops()},
          {"dense_layer_flops", dense_layer_flops()},
          {"embedding_flops", embedding_flops},
          {"head_flops", head_flops},
          {"total_flops", total_flops()},
          {"dense_total_flops", dense_total_flops()},
          {"layer_ratio", layer_ratio()},
          {"total_ratio", total_ratio()},
          {"layers", layers_json},
          {"notes", notes}};
}

std::string flops_convention() {
  return "forward only; 2 FLOPs per multiply-add of every matrix product the eval-mode forward executes; attention "
         "scores and weighted values over the full square of the tokens that attend (the causal half is counted, "
         "as dense kernels compute it); norms, softmax, activations, gathers and scatters are not counted; embedding "
         "lookups are 0";
}

FlopsEstimate estimate_flops(const nlohmann::json& model, std::int64_t vocab_size, const FlopsQuery& query) {
  if (!model.is_object() || !model.contains("arch") || !model.at("arch").is_string())
    throw ConfigError("flops model: the model section has no 'arch'");
  const auto arch = model.at("arch").get<std::string>();
  const auto& reg = priced_entry(arch);  // a clear error for any id without a FLOPs model
  if (query.seq < 1) throw ConfigError("flops model: sequence length " + std::to_string(query.seq) + " must be at least 1");
  if (query.batch < 1) throw ConfigError("flops model: batch " + std::to_string(query.batch) + " must be at least 1");
  if (vocab_size < 1) throw ConfigError("flops model: vocabulary size " + std::to_string(vocab_size) + " must be at least 1");
  FlopsInput in;
  in.arch = arch;
  in.model = schema_defaults(reg.options);
  for (const auto& [k, v] : model.items()) in.model[k] = v;
  in.model["arch"] = arch;
  reg.check(in.model, "model");
  in.query = query;
  in.vocab = static_cast<double>(vocab_size);
  auto est = reg.price_flops(in);
  est.notes.insert(est.notes.begin(), "routed fraction: " + reg.routed_fraction_meaning);
  return est;
}

std::vector<std::string> flops_model_architectures() {
  std::vector<std::string> ids;
  for (const auto& e : architectures())
    if (e.price_flops) ids.push_back(e.id);
  return ids;
}

std::string routed_fraction_meaning(const std::string& arch) { return priced_entry(arch).routed_fraction_meaning; }

std::vector<double> fractions_from_trace(const std::string& arch, const std::vector<LayerRouting>& layers) {
  const auto& stat = priced_entry(arch).priced_share_stat;
  std::vector<double> out;
  for (const auto& l : layers) {
    const auto it = stat.empty() ? l.stats.end() : l.stats.find(stat);
    out.push_back(it != l.stats.end() ? it->second : l.routed_fraction);
  }
  return out;
}

}  // namespace routelab
