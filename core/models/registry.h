// The explicit architecture registry: id -> display name, option schema (with defaults), cross-field check
// and factory. Adding an architecture = one file pair in models/ + one entry in registry.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/options.h"

namespace routelab {

class LanguageModel;
class SequenceClassifier;

/// What the data decides about a model: vocabulary, the longest context it must handle and, for
/// classifiers, the number of classes.
struct ModelContext {
  long long vocab_size = 0;
  long long context = 0;
  long long num_classes = 0;
};

struct ArchitectureEntry {
  std::string id;             ///< e.g. "dense"
  std::string display_name;   ///< e.g. "Dense Transformer"
  std::string source;         ///< the seed or paper it follows
  std::string description;
  OptionSchema options;       ///< every model.* option except "arch"
  /// Cross-field checks on the resolved model section; throws ConfigError naming `path.key`.
  std::function<void(const nlohmann::json& model, const std::string& path)> check;
  std::function<std::shared_ptr<LanguageModel>(const nlohmann::json& model, const ModelContext& ctx)> create;
  /// "lm" (create) or "classification" (create_classifier); the trainer picks data and loop from it.
  std::string task = "lm";
  std::function<std::shared_ptr<SequenceClassifier>(const nlohmann::json& model, const ModelContext& ctx)>
      create_classifier = nullptr;
  /// KV-cache entries per sequence that one of its routed layers (trace kind = id) holds after a prompt pass of
  /// `seq` tokens, from the layer's stored evaluation record (routed_fraction, stats). Null: every token, as a
  /// dense layer. The cost-length figure, Figure 6 and the Compare view price memory with it (layer_kv_entries).
  std::function<double(const nlohmann::json& layer, double seq)> kv_entries = nullptr;
};

/// A kv_entries rule: the layer caches the tokens on its attention path, routed_fraction x seq (every token when
/// the fraction is missing or not finite).
double kv_entries_of_routed_tokens(const nlohmann::json& layer, double seq);

/// Every registered architecture, sorted by id.
const std::vector<ArchitectureEntry>& architectures();
/// Throws ConfigError("unsupported architecture: 'x'") for an unknown id.
const ArchitectureEntry& architecture(const std::string& id);
/// KV entries per sequence of one stored evaluation layer record ({kind, routed, routed_fraction, stats}) after a
/// prompt pass of `seq` tokens: every token for an unrouted layer or a kind without a registered rule, else the
/// rule of the architecture whose id is the layer's kind.
double layer_kv_entries(const nlohmann::json& layer, double seq);
/// Builds a language model; a classification architecture is a ConfigError naming model.arch.
std::shared_ptr<LanguageModel> create_model(const nlohmann::json& model, const ModelContext& ctx);
/// Builds a sequence classifier; a language-model architecture is a ConfigError naming model.arch.
std::shared_ptr<SequenceClassifier> create_classifier(const nlohmann::json& model, const ModelContext& ctx);

}  // namespace routelab
