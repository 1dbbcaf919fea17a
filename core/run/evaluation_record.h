// A stored evaluation as typed values: what the trainer and `eval` write into an evaluation row's extra document,
// parsed and validated once (Torch-free). The reader of every evaluation the CLI, the reports and the dashboard show.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace routelab {

struct EvalRow;
class RunStore;

enum class Task { LanguageModel, Classification };
std::string to_string(Task task);  ///< "lm", "classification" (the registry's words)
Task parse_task(const std::string& text);  ///< throws ConfigError on another word

/// One layer's inference-mode routing over an evaluation.
struct LayerRouting {
  int layer = 0;
  std::string kind = "dense";    ///< the layer's kind as its architecture names it ("dense", "routed", ...)
  bool routed = false;           ///< whether the layer routes tokens at all
  double routed_fraction = 1.0;  ///< share of tokens on the routed (expensive) path
  double flops = 0;              ///< FLOPs priced as executed over the evaluation (0 in stores older than pricing)
  double dense_flops = 0;        ///< the same layer run dense
  std::map<std::string, double> stats;
};

struct EvaluationRecord {
  std::int64_t step = 0;
  std::string split = "val";
  double loss = 0, ppl = 0, bpc = 0;  ///< ppl and bpc are NaN for classifiers
  Task task = Task::LanguageModel;
  std::optional<double> flops_ratio;  ///< priced FLOPs / dense FLOPs; none where the row has no pricing
  std::vector<LayerRouting> layers;
  std::map<std::string, double> stats;  ///< the model's evaluation stats (entropy, alpha, mean depth, ...)
  // Classification only.
  std::optional<double> accuracy, macro_f1;
  std::vector<double> f1;               ///< per class
  std::vector<std::string> labels;      ///< class names
  std::optional<std::int64_t> examples;

  std::vector<double> routed_fractions() const;
  std::vector<bool> routed_layers() const;
  bool any_routed() const;
  /// An evaluation stat, none when absent.
  std::optional<double> stat(const std::string& key) const;
};

/// Parses a stored evaluation. A document that is not JSON, or a key of the wrong type, is a DataError naming the
/// step and the key path ("evaluation at step 200: layers[1].routed_fraction: expected a number"); keys missing in
/// older stores take the defaults above.
EvaluationRecord read_evaluation(const EvalRow& row);

/// Every evaluation of a stored run, in step order (context-length curves, a document of their own, excepted:
/// core/run/context_curve.h). An unreadable one is a DataError naming the store and run, or,
/// where `unreadable` is given, skipped with that message appended (a view that shows what it can).
std::vector<EvaluationRecord> read_evaluations(const RunStore& store, std::int64_t run_id,
                                               std::vector<std::string>* unreadable = nullptr);

/// Per-layer records as an evaluation stores them (an array of {layer, kind, routed, routed_fraction, flops,
/// dense_flops, stats}); `where` starts the DataError of a malformed one ("evaluation at step 200").
std::vector<LayerRouting> read_layers(const nlohmann::json& layers, const std::string& where);
nlohmann::json layers_json(const std::vector<LayerRouting>& layers);

/// The extra document read_evaluation reads back (the writer's half of the same type).
nlohmann::json evaluation_extra_json(const EvaluationRecord& record);

}  // namespace routelab
