// The hand-written, sorted architecture registry (no static self-registration: the linker would drop it): one line
// per architecture, whose entry its own files fill in.
#include "core/models/registry.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/models/dense_transformer.h"
#include "core/models/dllm.h"
#include "core/models/drr.h"
#include "core/models/dtrnet.h"
#include "core/models/early_exit.h"
#include "core/models/mod.h"
#include "core/models/radial.h"
#include "core/models/tagat.h"
#include "core/models/tsa.h"
#include "core/models/vanilla_classifier.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

/// Every entry answers both factories: the wrong one for its task is a clear ConfigError, never an empty call.
void complete(ArchitectureEntry& e) {
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

std::vector<ArchitectureEntry> make_registry() {
  std::vector<ArchitectureEntry> entries;
  entries.push_back(dense_architecture());
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
  for (auto& e : entries) complete(e);
  return entries;
}

std::vector<ArchitectureEntry>& registry() {
  static std::vector<ArchitectureEntry> entries = make_registry();
  return entries;
}

}  // namespace

double kv_entries_of_routed_tokens(const LayerRouting& layer, double seq) {
  const double f = layer.routed_fraction;
  return (std::isfinite(f) ? f : 1.0) * seq;
}

double layer_kv_entries(const LayerRouting& layer, double seq) {
  if (!layer.routed) return seq;
  for (const auto& e : architectures())
    if (e.id == layer.kind) return e.kv_entries ? e.kv_entries(layer, seq) : seq;
  return seq;
}

std::string why_no_cuda_graph(const ArchitectureEntry& entry, const nlohmann::json& model,
                              const nlohmann::json& train) {
  if (!entry.cuda_graph_step)
    return "the training step of " + entry.display_name + " (model.arch=" + entry.id +
           ") cannot be captured as a CUDA graph (its shapes or host-side state change from step to step)";
  return entry.cuda_graph_limits ? entry.cuda_graph_limits(model, train) : std::string();
}

std::string why_no_cuda_graph_forward(const ArchitectureEntry& entry, const nlohmann::json& model,
                                      const std::string& precision) {
  if (!entry.cuda_graph_forward)
    return "the forward of " + entry.display_name + " (model.arch=" + entry.id +
           ") cannot be captured as a CUDA graph (its shapes depend on the data)";
  const nlohmann::json train = {{"precision", precision}, {"deterministic", false}};
  return entry.cuda_graph_limits ? entry.cuda_graph_limits(model, train) : std::string();
}

const std::vector<ArchitectureEntry>& architectures() { return registry(); }

ScopedArchitecture::ScopedArchitecture(ArchitectureEntry entry) : id_(entry.id) {
  auto& entries = registry();
  const auto at = std::lower_bound(entries.begin(), entries.end(), id_, [](const auto& e, const std::string& id) {
    return e.id < id;
  });
  if (at != entries.end() && at->id == id_) throw std::logic_error("architecture '" + id_ + "' is already registered");
  complete(entry);
  entries.insert(at, std::move(entry));
}

ScopedArchitecture::~ScopedArchitecture() {
  auto& entries = registry();
  entries.erase(std::remove_if(entries.begin(), entries.end(), [&](const auto& e) { return e.id == id_; }), entries.end());
}

std::vector<std::string> architecture_ids(Task task) {
  std::vector<std::string> ids;
  for (const auto& e : architectures())
    if (e.task == task) ids.push_back(e.id);
  return ids;
}

std::string architectures_with(const std::function<bool(const ArchitectureEntry&)>& can) {
  std::string ids;
  for (const auto& e : architectures())
    if (can(e)) ids += (ids.empty() ? "" : ", ") + e.id;
  return ids;
}

const ArchitectureEntry& architecture(const std::string& id) {
  for (const auto& e : architectures())
    if (e.id == id) return e;
  throw ConfigError("unsupported architecture: '" + id + "' is not a registered architecture (" +
                    architectures_with([](const ArchitectureEntry&) { return true; }) + ")");
}

std::shared_ptr<LanguageModel> create_model(const nlohmann::json& model, const ModelContext& ctx) {
  return architecture(model.at("arch").get<std::string>()).create(model, ctx);
}

std::shared_ptr<SequenceClassifier> create_classifier(const nlohmann::json& model, const ModelContext& ctx) {
  return architecture(model.at("arch").get<std::string>()).create_classifier(model, ctx);
}

}  // namespace routelab
