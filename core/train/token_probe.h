// The trainer's probe: one forward pass with tracing over given tokens, turned into the probe document (the
// tokens, each layer's gate and decision, the model's per-token data, the log-probability of each actual next
// token and the top-k next tokens; for classifiers the experts per token and the class probabilities). The token
// inspector (core/analysis/token_trace.h) traces any text through the same functions, so what it shows for the
// probe text is byte for byte what the run stored.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/run/evaluation_record.h"

namespace routelab {

class LanguageModel;
class SequenceClassifier;
class Tokenizer;
struct ClassBatch;

struct TokenPrediction {
  std::int64_t id = 0;
  std::string text;  ///< Tokenizer::token_text
  double prob = 0;
};

struct TokenTrace {
  Task task = Task::LanguageModel;
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

}  // namespace routelab
