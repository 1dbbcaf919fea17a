// Per-token trace of any text through a stored run (issue 7, the token inspector): the tokens, each layer's gate
// and decision, the model's per-token data, the log-probability of each actual next token and the top-k next
// tokens per position; for classifiers the experts per token and the class probabilities. The trainer's probe
// is the same code path (trace_ids / trace_pair), so the inspector and the stored probe JSON agree exactly.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/analysis/run_analysis.h"

namespace routelab {

class LanguageModel;
class PairTokenizer;
class SequenceClassifier;
class Tokenizer;
struct ClassBatch;

struct TokenPrediction {
  std::int64_t id = 0;
  std::string text;  ///< Tokenizer::token_text
  double prob = 0;
};

struct TokenTrace {
  std::string task = "lm";                 ///< "lm" or "classification"
  std::vector<std::string> tokens;         ///< what the model read, as token_text
  std::vector<std::int64_t> ids;
  /// lm: log p(actual next token) per position; NaN at the last position when the text gives no next token.
  std::vector<double> next_logprob;
  std::vector<std::vector<TokenPrediction>> top_k;  ///< lm: per position, most likely first (empty for k = 0)
  int k = 0;
  /// [{layer, kind, routed, gate?: per token, decision?: per token, stats?}] (the probe's "layers").
  nlohmann::json layers = nlohmann::json::array();
  nlohmann::json token_data;               ///< {name: per-token values}; null when the model reports none
  std::int64_t dropped_tokens = 0;         ///< tokens cut from the front because the text exceeds the context
  std::int64_t context = 0;                ///< the most tokens the model reads
  // classification
  std::vector<std::string> labels;
  std::vector<double> class_probs;
  std::int64_t predicted = -1;

  /// The probe document: {"tokens", "next_logprob", "layers", "token_data"} (lm) or {"task": "classification",
  /// "tokens", "labels", "class_probs", "predicted", "layers", "token_data"}, plus "top_k": [[{"id", "text",
  /// "p"}]] when k > 0 and "dropped_tokens" when text was cut.
  nlohmann::json to_json() const;
};

/// The shared core: runs `ids` (at most the model's context) through `model` with tracing, under NoGrad, in the
/// model's current mode (the callers put it in eval mode). `next_after_last`: the token that follows the last
/// one when known (the trainer's probe reads all but the last token of its text); otherwise the last position's
/// next_logprob is NaN. Throws ConfigError for empty input or more ids than the context.
TokenTrace trace_ids(LanguageModel& model, const Tokenizer& tokenizer, const std::vector<std::int64_t>& ids,
                     std::optional<std::int64_t> next_after_last, int top_k, std::int64_t context,
                     const torch::Device& device);

/// The same for one padded classification example (batch of one) whose real tokens read as `tokens`.
TokenTrace trace_pair(SequenceClassifier& model, const ClassBatch& example, const std::vector<std::string>& tokens,
                      const std::vector<std::string>& labels);

struct TraceTextOptions {
  int top_k = 5;
  /// The text's last token is only the target of the position before it (the probe's convention): the model
  /// reads all but the last token and every position has a known next token.
  bool last_token_is_target = false;
};

/// Encodes `text` with the run's tokenizer and traces it. Text longer than the context keeps its last
/// `context` tokens (dropped_tokens says how many went). Empty text, text that encodes to no token (or to one
/// with last_token_is_target) and text the tokenizer rejects are DataErrors naming the run.
TokenTrace trace_text(LoadedRun& run, const std::string& text, const TraceTextOptions& options);
inline TokenTrace trace_text(LoadedRun& run, const std::string& text, int top_k) {
  return trace_text(run, text, TraceTextOptions{top_k, false});
}

/// A stored run opened for tracing: a language model (through load_run) or a sequence classifier with its
/// pair tokenizer and label names.
struct TraceableRun {
  std::int64_t run_id = 0;
  std::int64_t step = 0;
  std::string name, arch, task;  ///< task: "lm" or "classification"
  std::int64_t num_layers = 0;
  std::unique_ptr<LoadedRun> lm;
  std::shared_ptr<SequenceClassifier> classifier;
  std::shared_ptr<PairTokenizer> pair_tokenizer;
  std::vector<std::string> labels;
  std::int64_t max_length = 0;
  torch::Device device = torch::kCPU;
};

/// Opens run `run_id` of `db_path` at the checkpoint of `step` (0 = latest). Errors as load_run.
TraceableRun open_traceable(const std::string& db_path, std::int64_t run_id, std::int64_t step = 0);

/// Traces `text` through either kind of run. A classifier reads a sentence pair: the premise and the hypothesis
/// separated by the first line break, tab or " ||| " (a single sentence is read as the premise with an empty
/// hypothesis); longer pairs are truncated as in training.
TokenTrace trace_text(TraceableRun& run, const std::string& text, int top_k);

}  // namespace routelab
