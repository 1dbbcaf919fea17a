// A stored probe as typed values: the per-token routing of the run's fixed probe text (or example) at one
// evaluation, as the trainer's probe and the token inspector write it (core/train/token_probe.h), parsed and
// validated once (Torch-free). The reader of every probe the dashboard and the figures show.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run/evaluation_record.h"

namespace routelab {

struct ProbeRow;
class RunStore;

/// One layer of the probe: its per-token gate and hard decision where it reports them.
struct ProbeLayer {
  int layer = 0;
  std::string kind = "dense";
  bool routed = false;
  std::vector<double> gate;      ///< per token; empty when the layer reports none
  std::vector<double> decision;  ///< per token, 0/1; empty when none
  std::map<std::string, double> stats;
};

/// One per-token quantity of the model (its token_data), for the probed sequence: (T), (T, K), (T, L, N), ...
struct TokenSeries {
  std::string name;
  std::vector<int> shape;                   ///< per-token dimensions: {} for (T), {L, N} for (T, L, N)
  std::vector<std::vector<double>> values;  ///< [token][per-token values, row-major over shape]
  bool integral = false;                    ///< every value stored as an integer or a flag (ids, layers)

  std::size_t tokens() const { return values.size(); }
  /// The value of `token` at per-token `index` (row-major); NaN outside the stored values.
  double at(std::size_t token, std::size_t index = 0) const;
};

struct ProbePrediction {
  std::int64_t id = 0;
  std::string text;
  double prob = 0;
};

struct ProbeRecord {
  std::int64_t step = 0;
  Task task = Task::LanguageModel;
  std::vector<std::string> tokens;       ///< what the model read, as token text
  std::vector<double> next_logprob;      ///< language models: log p(actual next token); NaN where unknown
  std::vector<ProbeLayer> layers;
  std::vector<TokenSeries> token_data;
  std::vector<std::vector<ProbePrediction>> top_k;  ///< per position, most likely first (traces with k > 0)
  std::int64_t dropped_tokens = 0;                  ///< cut from the front of a text longer than the context
  // Classification.
  std::vector<std::string> labels;
  std::vector<double> class_probs;
  int predicted = -1;
  int label = -1;          ///< the probe example's gold label (-1: a typed text)
  std::string label_name;  ///< its name

  /// The token series called `name`, or null.
  const TokenSeries* series(const std::string& name) const;
};

/// Parses a probe document; `where` starts the DataError of a malformed one ("probe at step 200") naming the key
/// path ("layers[1].gate[3]: expected a number").
ProbeRecord read_probe(const nlohmann::json& doc, std::int64_t step, const std::string& where);
/// A stored probe row; its errors name the step.
ProbeRecord read_probe(const ProbeRow& row);
/// Every probe of a stored run, in step order; an unreadable one is a DataError naming the store and run, or,
/// where `unreadable` is given, skipped with that message appended.
std::vector<ProbeRecord> read_probes(const RunStore& store, std::int64_t run_id,
                                     std::vector<std::string>* unreadable = nullptr);

}  // namespace routelab
