// The explicit architecture registry: everything the workbench knows about an architecture (display name, colour,
// option schema with defaults, cross-field check, factory, FLOPs pricing, KV rule, what its routed share means),
// stated in the architecture's own files. Adding an architecture = one file pair in models/ + one line in
// registry.cpp; the rest of the code asks the entry and never switches on an id.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/options.h"
#include "core/cost/flops_pricing.h"
#include "core/run/evaluation_record.h"

namespace at {
class Tensor;
}

namespace routelab {

class LanguageModel;
class SequenceClassifier;

/// The id of the dense baseline every cost ratio and speed comparison is taken against (and a config's default
/// architecture).
inline constexpr const char* kBaselineArchitecture = "dense";

/// An architecture's parameters and forward FLOPs (one sequence) against the plain stack of the same shape.
struct ArchitectureOverhead {
  std::int64_t seq = 0;          ///< sequence length the FLOPs are priced at
  double base_params = 0;        ///< plain model: embeddings, layers, final norm (and the head when untied)
  double arch_params = 0;        ///< the architecture: the same plus its routing modules
  double base_stack_params = 0;  ///< plain layers only
  double arch_stack_params = 0;  ///< the architecture's layers and what they share
  double base_flops = 0;         ///< forward FLOPs of one sequence, layers and LM head
  double arch_flops = 0;
  double base_stack_flops = 0;   ///< layers only
  double arch_stack_flops = 0;

  double param_overhead() const { return arch_params / base_params - 1.0; }
  double stack_param_overhead() const { return arch_stack_params / base_stack_params - 1.0; }
  double flops_overhead() const { return arch_flops / base_flops - 1.0; }
  double stack_flops_overhead() const { return arch_stack_flops / base_stack_flops - 1.0; }
};

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
  /// Language model (create) or classification (create_classifier); the trainer picks data and loop from it.
  Task task = Task::LanguageModel;
  std::function<std::shared_ptr<SequenceClassifier>(const nlohmann::json& model, const ModelContext& ctx)>
      create_classifier = nullptr;
  /// The resolved model section as the architecture's options structs hold it: read into them and written back
  /// through their OptionTables (core/config/option_table.h, read_back), whose structs also state the schema's
  /// defaults. The conformance suite checks with it that every option of the schema reaches the model.
  std::function<nlohmann::json(const nlohmann::json& model)> read_back_options = nullptr;
  /// KV-cache entries per sequence that one of its routed layers (trace kind = id) holds after a prompt pass of
  /// `seq` tokens, from the layer's stored evaluation record (routed_fraction, stats). Null: every token, as a
  /// dense layer. The cost-length figure, Figure 6 and the Compare view price memory with it (layer_kv_entries).
  std::function<double(const LayerRouting& layer, double seq)> kv_entries = nullptr;
  /// FLOPs of the eval-mode forward, priced as executed (core/cost/flops_pricing.h). Null: no FLOPs model, which
  /// estimate_flops refuses by name (classifiers); every language model has one (the conformance suite checks).
  std::function<FlopsEstimate(const FlopsInput&)> price_flops = nullptr;
  /// What a routed fraction given to price_flops means, and its default (printed with every estimate).
  std::string routed_fraction_meaning = {};
  /// The per-layer trace stat holding the fraction price_flops takes (TSA: "active_share", the share that runs the
  /// FFN); empty: the layer's routed_fraction.
  std::string priced_share_stat = {};
  /// Palette index (core/report/figure/figure.h) every figure draws the architecture in; distinct among the language
  /// models and among the classifiers.
  int color = 0;
  /// One calibration pass of a speed benchmark (bench forward): sets the routers of `model` (this architecture's,
  /// eval mode) so that `fraction` of the tokens of `tokens` (B, T) take the routed path, from the scores of one
  /// forward; repeated passes converge where a layer's input moves with the decisions before it. Where training
  /// decides by another rule (MoD's top-k at a capacity), that rule is set to the same share too, so a training step
  /// of the forced model (bench forward --train) routes it. Null: the architecture has no router a benchmark can
  /// force.
  std::function<void(LanguageModel& model, const at::Tensor& tokens, double fraction)> force_routed_share = nullptr;
  /// The option weighing its compute regulariser (TSA: depth_coeff): the x of a sweep over it (TSA Figure 3).
  std::string regulariser_option = {};
  /// An eval-only option whose values trade depth for quality on a trained checkpoint, each re-evaluated (early
  /// exit: its confidence threshold; TSA Figure 3's baseline curve). Empty option: none.
  struct EvalSweep {
    std::string option;
    std::vector<double> values;
  } eval_sweep = {};
  /// What a probe's per-token gate value means: the colour-bar label of a token map.
  std::string gate_meaning = "gate";
  /// Its parameters and forward FLOPs against the plain stack of the same shape, from the shapes alone, for a
  /// resolved model section and the data's vocabulary and context (DRR's overhead figure). Null: not stated.
  std::function<ArchitectureOverhead(const nlohmann::json& model, std::int64_t vocab, std::int64_t context)> overhead =
      nullptr;
  /// Model options a speed benchmark sets so that the eval forward skips the work its routing saves (TSA:
  /// {"inference": "sparse"}); empty for an architecture whose eval forward always does.
  nlohmann::json speed_options = nlohmann::json::object();
  /// Whether its language-model training step can be captured once as a CUDA graph and replayed (train.cuda_graph):
  /// the same shapes every step, nothing read back to the host during the step, per-step host state (set_progress)
  /// reaching the step only through device tensors rewritten in place (a loss weight's schedule, say), and a trace
  /// (ModelOutput::trace, stats) taken once, at capture: its host fields a function of the batch's shape alone,
  /// whatever depends on the data a tensor the step computes (LayerTrace gate, decision, on_device under
  /// DeferredTraceReadback), which each replay rewrites and the graph step reads after it. Shapes
  /// sized from earlier forwards (DTRNet's routed rows) count as the same shapes when the forward flags a batch that
  /// outgrew them and says how to size them afresh (ModelOutput::overflow, check_shapes). The conformance suite
  /// checks the trace part on the CPU.
  bool cuda_graph_step = false;
  /// Where cuda_graph_step holds for some configurations only: why a step with this resolved model section and
  /// train section cannot be captured, naming the key, or "" where it can. Null: every configuration can.
  std::function<std::string(const nlohmann::json& model, const nlohmann::json& train)> cuda_graph_limits = nullptr;
  /// Whether its untraced eval-mode forward can be captured once as a CUDA graph and replayed (CudaGraphForward):
  /// the same shapes every call and nothing read back during it, once earlier forwards have sized what it sizes
  /// (under DeferredTraceReadback its routed counts are read after it: ModelOutput::overflow, check_shapes).
  /// cuda_graph_limits, given the precision in a train section, says where not. The conformance suite checks it on
  /// the CPU.
  bool cuda_graph_forward = false;
  /// Distillation (train.distill_from): starts `student`, a new model of this architecture, from the weights of a
  /// stored sequential model `teacher` (copy_matching_weights); ConfigError when the shapes do not correspond.
  /// Returns the prefixes of the student's own parts (trained even when train.distill_layers is false). Null: the
  /// architecture cannot start from a teacher (train.distill_from is refused by name).
  std::function<std::vector<std::string>(LanguageModel& student, const LanguageModel& teacher)> adopt_teacher =
      nullptr;
};

/// A kv_entries rule: the layer caches the tokens on its attention path, routed_fraction x seq (every token when
/// the fraction is missing or not finite).
double kv_entries_of_routed_tokens(const LayerRouting& layer, double seq);

/// Every registered architecture, sorted by id.
const std::vector<ArchitectureEntry>& architectures();

/// Registers an architecture beyond the built-in ones for the lifetime of this object, then removes it: how a
/// test registers an architecture defined in its own file (the conformance suite's example). Throws
/// std::logic_error for an id already registered. Not synchronised: create and destroy it while no other thread
/// reads the registry, and hold no reference to an entry across either.
class ScopedArchitecture {
 public:
  explicit ScopedArchitecture(ArchitectureEntry entry);
  ~ScopedArchitecture();
  ScopedArchitecture(const ScopedArchitecture&) = delete;
  ScopedArchitecture& operator=(const ScopedArchitecture&) = delete;

 private:
  std::string id_;
};

/// Ids of the registered architectures of `task`, sorted.
std::vector<std::string> architecture_ids(Task task);
/// The ids of the registered architectures that `can`, comma-separated (for errors that list the alternatives).
std::string architectures_with(const std::function<bool(const ArchitectureEntry&)>& can);
/// Throws ConfigError("unsupported architecture: 'x' is not a registered architecture (dense, ...)") for an unknown
/// id.
const ArchitectureEntry& architecture(const std::string& id);
/// KV entries per sequence of one stored evaluation layer record ({kind, routed, routed_fraction, stats}) after a
/// prompt pass of `seq` tokens: every token for an unrouted layer or a kind without a registered rule, else the
/// rule of the architecture whose id is the layer's kind.
double layer_kv_entries(const LayerRouting& layer, double seq);
/// Why a training step of `entry` with this resolved model section and train section (its "precision" and
/// "deterministic" at least) cannot be captured as a CUDA graph (ArchitectureEntry::cuda_graph_step, then
/// cuda_graph_limits), or "" where it can.
std::string why_no_cuda_graph(const ArchitectureEntry& entry, const nlohmann::json& model, const nlohmann::json& train);
/// Why an untraced eval-mode forward of `entry` with this resolved model section at `precision` ("fp32" or "bf16")
/// cannot be captured as a CUDA graph (ArchitectureEntry::cuda_graph_forward, then cuda_graph_limits), or "".
std::string why_no_cuda_graph_forward(const ArchitectureEntry& entry, const nlohmann::json& model,
                                      const std::string& precision);
/// Builds a language model; a classification architecture is a ConfigError naming model.arch.
std::shared_ptr<LanguageModel> create_model(const nlohmann::json& model, const ModelContext& ctx);
/// Builds a sequence classifier; a language-model architecture is a ConfigError naming model.arch.
std::shared_ptr<SequenceClassifier> create_classifier(const nlohmann::json& model, const ModelContext& ctx);

}  // namespace routelab
