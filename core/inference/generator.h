// Autoregressive generation and scoring over the incremental decode API (LanguageModel::begin_decode / decode):
// sampling (greedy, temperature, top-k, top-p, seeded), stop ids and strings, a context and cache-memory check
// before anything is allocated, and per-position scoring with the routing of every layer.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace routelab {

class LanguageModel;
class Tokenizer;

struct SamplingOptions {
  bool greedy = false;       ///< argmax (the other options are ignored)
  double temperature = 1.0;  ///< > 0; logits are divided by it
  std::int64_t top_k = 0;    ///< keep the k most likely tokens (0: all)
  double top_p = 1.0;        ///< nucleus: the smallest set whose probability reaches top_p, in (0, 1]
  std::uint64_t seed = 0;    ///< the host RNG (mt19937_64) that draws every token: same seed, same text
};

struct GenerateOptions {
  SamplingOptions sampling;
  std::int64_t max_new_tokens = 128;
  std::vector<std::string> stop_strings;  ///< a sequence stops once its new text contains one (cut before it)
  std::vector<std::int64_t> stop_ids;     ///< a sequence stops after emitting one of these ids (kept in new_ids)
  /// The KV cache may hold at most this many bytes at prompt + max_new_tokens (estimated before decoding, every
  /// routed token counted); 0 = no limit. 1 GiB by default.
  std::int64_t max_cache_bytes = std::int64_t{1} << 30;
};

struct GenerationResult {
  std::string arch;
  std::vector<std::vector<std::int64_t>> prompt_ids;  ///< per sequence
  std::vector<std::vector<std::int64_t>> new_ids;     ///< per sequence, up to and including a stop id
  std::vector<std::string> text;                      ///< decoded new text (with a tokenizer), cut at a stop string
  std::vector<std::string> stop_reason;               ///< "max_new_tokens", "stop_id" or "stop_string"
  double prefill_seconds = 0, decode_seconds = 0;
  std::int64_t decode_steps = 0;
  std::int64_t cache_estimate_bytes = 0;   ///< the upper bound checked against max_cache_bytes
  std::int64_t cache_live_bytes = 0;       ///< keys/values the caches hold at the end
  std::int64_t cache_allocated_bytes = 0;  ///< their buffers (capacity and padding) and entry tags
  nlohmann::json to_json() const;
};

/// Generates for a batch of prompts of equal length (one row each; decoding advances all rows together). Throws
/// ConfigError when prompt + max_new_tokens exceeds the model's context, when the estimated cache exceeds
/// max_cache_bytes, or for an invalid sampling option; the model must support decoding.
GenerationResult generate(LanguageModel& model, const std::vector<std::vector<std::int64_t>>& prompts,
                          const GenerateOptions& options, const Tokenizer* tokenizer = nullptr);
/// One prompt from a string through the run's tokenizer.
GenerationResult generate_text(LanguageModel& model, const Tokenizer& tokenizer, const std::string& prompt,
                               const GenerateOptions& options);

/// One layer's routing of one token under the inference rules.
struct ScoredLayer {
  int layer = 0;
  std::string kind;
  bool routed = false;
  bool decision = true;  ///< took the routed (expensive) path; true for dense layers
  double gate = 1.0;     ///< the layer's gate value for the token; 1 for dense layers
};

struct ScoredToken {
  std::int64_t position = 0;
  std::int64_t token = 0;
  std::string text;
  double logprob = 0;  ///< log p(token | earlier tokens); NaN at position 0
  std::vector<std::pair<std::int64_t, double>> top;  ///< the most likely next tokens after this one: (id, log p)
  std::vector<ScoredLayer> layers;
  std::map<std::string, double> extras;  ///< per-token data (early exit's exit_layer, Radial's depth)
};

struct ScoreResult {
  std::string arch;
  std::vector<ScoredToken> tokens;
  double mean_logprob = 0;  ///< over positions 1 ... T-1
  std::int64_t cache_live_bytes = 0;
  nlohmann::json to_json(const Tokenizer* tokenizer = nullptr) const;
};

/// Feeds `ids` through one prefill decode call and reports, per position, the token, its log-probability, the
/// `top` most likely next tokens and each layer's routing decision and gate.
ScoreResult score(LanguageModel& model, const std::vector<std::int64_t>& ids, std::int64_t top = 5,
                  const Tokenizer* tokenizer = nullptr);

}  // namespace routelab
