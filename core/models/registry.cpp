// The hand-written, sorted architecture registry (no static self-registration: the linker would drop it).
#include "core/models/registry.h"

#include <algorithm>
#include <cmath>

#include "core/models/dense_transformer.h"
#include "core/models/dllm.h"
#include "core/models/drr.h"
#include "core/models/dtrnet.h"
#include "core/models/early_exit.h"
#include "core/models/mod.h"
#include "core/models/radial.h"
#include "core/models/tagat.h"
#include "core/models/tsa.h"
#include "core/util/json_fields.h"
#include "core/models/vanilla_classifier.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

std::vector<ArchitectureEntry> make_registry() {
  std::vector<ArchitectureEntry> entries;
  entries.push_back({
      "dense",
      "Dense Transformer",
      "baseline of seeds 000 (SmolLM/Llama style) and 003 (GPT-2 style)",
      "Decoder-only pre-norm Transformer: every token runs every attention and MLP sub-layer.",
      transformer_option_schema(),
      check_transformer_options,
      [](const nlohmann::json& m, const ModelContext& ctx) -> std::shared_ptr<LanguageModel> {
        return std::make_shared<DenseTransformer>(transformer_options_from_json(m, ctx.vocab_size, ctx.context));
      },
  });
  entries.push_back(dllm_architecture());
  entries.push_back(drr_architecture());
  entries.push_back(dtrnet_architecture());
  entries.push_back(early_exit_architecture());
  entries.push_back(mod_architecture());
  entries.push_back(radial_architecture());
  entries.push_back(tagat_architecture());
  entries.push_back(tsa_architecture());
  entries.push_back(vanilla_classifier_architecture());
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  // Every entry answers both factories: the wrong one for its task is a clear ConfigError, never an empty call.
  for (auto& e : entries) {
    if (!e.create)
      e.create = [id = e.id](const nlohmann::json&, const ModelContext&) -> std::shared_ptr<LanguageModel> {
        throw ConfigError("model.arch: '" + id + "' is a classification architecture, not a language model (use it "
                          "with a classification data.source: entailment or pairs)");
      };
    if (!e.create_classifier)
      e.create_classifier = [id = e.id](const nlohmann::json&, const ModelContext&) -> std::shared_ptr<SequenceClassifier> {
        throw ConfigError("model.arch: '" + id + "' is a language model, not a sequence classifier (use tagat or "
                          "vanilla-classifier for classification data)");
      };
  }
  return entries;
}

}  // namespace

double kv_entries_of_routed_tokens(const nlohmann::json& layer, double seq) {
  const double f = json_number(layer, "routed_fraction", 1.0);
  return (std::isfinite(f) ? f : 1.0) * seq;
}

double layer_kv_entries(const nlohmann::json& layer, double seq) {
  const auto kind = layer.find("kind");
  if (!json_flag(layer, "routed", false) || kind == layer.end() || !kind->is_string()) return seq;
  for (const auto& e : architectures())
    if (e.id == kind->get<std::string>()) return e.kv_entries ? e.kv_entries(layer, seq) : seq;
  return seq;
}

const std::vector<ArchitectureEntry>& architectures() {
  static const std::vector<ArchitectureEntry> entries = make_registry();
  return entries;
}

const ArchitectureEntry& architecture(const std::string& id) {
  for (const auto& e : architectures())
    if (e.id == id) return e;
  throw ConfigError("unsupported architecture: '" + id + "'");
}

std::shared_ptr<LanguageModel> create_model(const nlohmann::json& model, const ModelContext& ctx) {
  return architecture(model.at("arch").get<std::string>()).create(model, ctx);
}

std::shared_ptr<SequenceClassifier> create_classifier(const nlohmann::json& model, const ModelContext& ctx) {
  return architecture(model.at("arch").get<std::string>()).create_classifier(model, ctx);
}

}  // namespace routelab
