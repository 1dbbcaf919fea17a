// Generation and scoring on the KV-cache decode path. Sampling runs on the host in double precision with one
// mt19937_64 per call, so a seed gives the same tokens whatever the device or LibTorch version.
#include "core/inference/generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include <torch/torch.h>

#include "core/data/tokenizer.h"
#include "core/inference/kv_cache.h"
#include "core/models/language_model.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check_sampling(const SamplingOptions& s) {
  if (s.greedy) return;
  if (!(s.temperature > 0)) throw ConfigError("--temperature: " + std::to_string(s.temperature) + " must be above 0");
  if (s.top_k < 0) throw ConfigError("--top-k: " + std::to_string(s.top_k) + " must be 0 (off) or positive");
  if (!(s.top_p > 0 && s.top_p <= 1)) throw ConfigError("--top-p: " + std::to_string(s.top_p) + " must be in (0, 1]");
}

/// Draws one token from logits (V) on the host: temperature, then top-k, then top-p, then the seeded RNG.
std::int64_t pick(const torch::Tensor& logits_row, const SamplingOptions& s, std::mt19937_64& rng) {
  const auto logits = logits_row.to(torch::kCPU, torch::kDouble).contiguous();
  const auto* z = logits.data_ptr<double>();
  const auto V = logits.numel();
  if (s.greedy) return static_cast<std::int64_t>(std::max_element(z, z + V) - z);  // first maximum, as argmax
  std::vector<std::int64_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return z[a] > z[b]; });
  auto keep = static_cast<std::size_t>(s.top_k > 0 ? std::min(s.top_k, V) : V);
  std::vector<double> p(keep);
  const double top = z[order[0]] / s.temperature;
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) total += p[i] = std::exp(z[order[i]] / s.temperature - top);
  if (s.top_p < 1.0) {
    double cumulative = 0;
    std::size_t n = 0;
    while (n < keep) {
      cumulative += p[n++] / total;
      if (cumulative >= s.top_p) break;
    }
    keep = n;
    p.resize(keep);
  }
  std::discrete_distribution<std::size_t> draw(p.begin(), p.end());
  return order[draw(rng)];
}

}  // namespace

nlohmann::json GenerationResult::to_json() const {
  nlohmann::json sequences = nlohmann::json::array();
  for (std::size_t b = 0; b < new_ids.size(); ++b) {
    nlohmann::json s = {{"prompt_ids", prompt_ids[b]}, {"new_ids", new_ids[b]}, {"stop_reason", stop_reason[b]}};
    if (b < text.size()) s["text"] = text[b];
    sequences.push_back(std::move(s));
  }
  const double tokens = static_cast<double>(decode_steps * static_cast<std::int64_t>(new_ids.size()));
  return {{"arch", arch},
          {"sequences", sequences},
          {"prefill_seconds", prefill_seconds},
          {"decode_seconds", decode_seconds},
          {"decode_steps", decode_steps},
          {"decode_tokens_per_second", decode_seconds > 0 ? tokens / decode_seconds : 0.0},
          {"cache_estimate_bytes", cache_estimate_bytes},
          {"cache_live_bytes", cache_live_bytes},
          {"cache_allocated_bytes", cache_allocated_bytes}};
}

GenerationResult generate(LanguageModel& model, const std::vector<std::vector<std::int64_t>>& prompts,
                          const GenerateOptions& options, const Tokenizer* tokenizer) {
  check_sampling(options.sampling);
  if (prompts.empty()) throw ConfigError("generate: no prompt");
  const auto B = static_cast<std::int64_t>(prompts.size());
  const auto T0 = static_cast<std::int64_t>(prompts.front().size());
  if (T0 == 0) throw ConfigError("generate: the prompt is empty (it must hold at least one token)");
  for (const auto& p : prompts)
    if (static_cast<std::int64_t>(p.size()) != T0)
      throw ConfigError("generate: the prompts of a batch must have the same length (" + std::to_string(T0) + " vs " +
                        std::to_string(p.size()) + " tokens)");
  if (options.max_new_tokens < 0) throw ConfigError("--max-new: must not be negative");
  const auto V = model.vocab_size();
  for (const auto& p : prompts)
    for (const auto id : p)
      if (id < 0 || id >= V) throw ConfigError("generate: token id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(V));

  model.eval();
  torch::NoGradGuard no_grad;
  auto state = model.begin_decode(B);
  const auto total = T0 + options.max_new_tokens;
  if (total > state->context_limit())
    throw ConfigError("generate: a prompt of " + std::to_string(T0) + " tokens plus " +
                      std::to_string(options.max_new_tokens) + " new tokens exceeds the " + model.arch_id() +
                      " model's context of " + std::to_string(state->context_limit()) + " tokens (model.max_seq_len)");
  GenerationResult result;
  result.arch = model.arch_id();
  result.cache_estimate_bytes = state->estimate_bytes(total);
  if (options.max_cache_bytes > 0 && result.cache_estimate_bytes > options.max_cache_bytes)
    throw ConfigError("generate: the KV cache for " + std::to_string(B) + " x " + std::to_string(total) +
                      " tokens may need " + std::to_string(result.cache_estimate_bytes) + " bytes, above the limit of " +
                      std::to_string(options.max_cache_bytes) + " (max_cache_bytes)");
  state->reserve(total);

  const auto device = model.parameters().empty() ? torch::Device(torch::kCPU) : model.parameters().front().device();
  const auto long_options = torch::TensorOptions().dtype(torch::kLong);
  auto prompt = torch::empty({B, T0}, long_options);
  for (std::int64_t b = 0; b < B; ++b)
    std::copy(prompts[b].begin(), prompts[b].end(), prompt[b].data_ptr<std::int64_t>());
  result.prompt_ids = prompts;
  result.new_ids.assign(static_cast<std::size_t>(B), {});
  result.stop_reason.assign(static_cast<std::size_t>(B), "max_new_tokens");
  if (tokenizer) result.text.assign(static_cast<std::size_t>(B), "");
  std::vector<bool> done(static_cast<std::size_t>(B), false);
  std::mt19937_64 rng(options.sampling.seed);

  auto t0 = std::chrono::steady_clock::now();
  auto logits = model.decode(*state, prompt.to(device)).select(1, T0 - 1);  // (B, V)
  result.prefill_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (std::int64_t step = 0; step < options.max_new_tokens; ++step) {
    auto next = torch::empty({B, 1}, long_options);
    auto next_ids = next.accessor<std::int64_t, 2>();
    for (std::int64_t b = 0; b < B; ++b) {
      const auto bu = static_cast<std::size_t>(b);
      // A finished row keeps decoding (the batch advances together) but its tokens are no longer recorded.
      const auto id = pick(logits[b], options.sampling, rng);
      next_ids[b][0] = id;
      if (done[bu]) continue;
      result.new_ids[bu].push_back(id);
      if (std::find(options.stop_ids.begin(), options.stop_ids.end(), id) != options.stop_ids.end()) {
        done[bu] = true;
        result.stop_reason[bu] = "stop_id";
      }
      if (tokenizer && !options.stop_strings.empty()) {
        const auto text = tokenizer->decode_after(prompts[bu], result.new_ids[bu]);
        for (const auto& stop : options.stop_strings) {
          const auto at = stop.empty() ? std::string::npos : text.find(stop);
          if (at == std::string::npos) continue;
          done[bu] = true;
          result.stop_reason[bu] = "stop_string";
          result.text[bu] = text.substr(0, at);
          break;
        }
      }
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    if (step + 1 == options.max_new_tokens) break;  // the last token needs no logits
    logits = model.decode(*state, next.to(device)).select(1, 0);
    ++result.decode_steps;
  }
  result.decode_seconds = seconds_since(t0);
  if (tokenizer)
    for (std::int64_t b = 0; b < B; ++b) {
      const auto bu = static_cast<std::size_t>(b);
      if (result.stop_reason[bu] != "stop_string")
        result.text[bu] = tokenizer->decode_after(prompts[bu], result.new_ids[bu]);
    }
  result.cache_live_bytes = state->live_bytes();
  result.cache_allocated_bytes = state->allocated_bytes();
  return result;
}

GenerationResult generate_text(LanguageModel& model, const Tokenizer& tokenizer, const std::string& prompt,
                               const GenerateOptions& options) {
  return generate(model, {tokenizer.encode(prompt)}, options, &tokenizer);
}

nlohmann::json ScoreResult::to_json(const Tokenizer* tokenizer) const {
  nlohmann::json positions = nlohmann::json::array();
  for (const auto& t : tokens) {
    nlohmann::json top_json = nlohmann::json::array();
    for (const auto& [id, lp] : t.top) {
      nlohmann::json entry = {{"token", id}, {"logprob", lp}};
      if (tokenizer) entry["text"] = tokenizer->token_text(id);
      top_json.push_back(std::move(entry));
    }
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& l : t.layers)
      layers.push_back({{"layer", l.layer}, {"kind", l.kind}, {"routed", l.routed}, {"decision", l.decision}, {"gate", l.gate}});
    nlohmann::json entry = {{"position", t.position}, {"token", t.token}, {"text", t.text},
                            {"logprob", std::isnan(t.logprob) ? nlohmann::json(nullptr) : nlohmann::json(t.logprob)},
                            {"top", top_json}, {"layers", layers}};
    if (!t.extras.empty()) entry["extras"] = t.extras;
    positions.push_back(std::move(entry));
  }
  return {{"arch", arch}, {"tokens", static_cast<std::int64_t>(tokens.size())}, {"mean_logprob", mean_logprob},
          {"cache_live_bytes", cache_live_bytes}, {"positions", positions}};
}

ScoreResult score(LanguageModel& model, const std::vector<std::int64_t>& ids, std::int64_t top, const Tokenizer* tokenizer) {
  if (ids.empty()) throw ConfigError("score: the text is empty (it must hold at least one token)");
  model.eval();
  torch::NoGradGuard no_grad;
  const auto T = static_cast<std::int64_t>(ids.size());
  const auto device = model.parameters().empty() ? torch::Device(torch::kCPU) : model.parameters().front().device();
  auto state = model.begin_decode(1);
  DecodeTrace trace;
  const auto input = torch::tensor(ids, torch::TensorOptions().dtype(torch::kLong)).view({1, T});
  const auto logprobs = torch::log_softmax(model.decode(*state, input.to(device), &trace).to(torch::kFloat), -1)
                            .select(0, 0).to(torch::kCPU);  // (T, V)
  const auto k = std::clamp<std::int64_t>(top, 0, model.vocab_size());
  ScoreResult result;
  result.arch = model.arch_id();
  result.cache_live_bytes = state->live_bytes();
  std::vector<torch::Tensor> gates, decisions;  // per layer (T) on the host
  for (const auto& l : trace.layers) {
    gates.push_back(l.gate.defined() ? l.gate.select(0, 0).to(torch::kCPU, torch::kDouble) : torch::Tensor());
    decisions.push_back(l.decision.defined() ? l.decision.select(0, 0).to(torch::kCPU) : torch::Tensor());
  }
  std::map<std::string, torch::Tensor> extras;
  for (const auto& [name, value] : trace.token_data) extras[name] = value.select(0, 0).to(torch::kCPU, torch::kDouble);
  torch::Tensor top_values, top_ids;
  if (k > 0) std::tie(top_values, top_ids) = logprobs.topk(k, -1);
  double sum = 0;
  for (std::int64_t t = 0; t < T; ++t) {
    ScoredToken s;
    s.position = t;
    s.token = ids[static_cast<std::size_t>(t)];
    s.text = tokenizer ? tokenizer->token_text(s.token) : std::to_string(s.token);
    s.logprob = t == 0 ? std::numeric_limits<double>::quiet_NaN() : logprobs[t - 1][s.token].item<double>();
    if (t > 0) sum += s.logprob;
    for (std::int64_t j = 0; j < k; ++j) s.top.emplace_back(top_ids[t][j].item<std::int64_t>(), top_values[t][j].item<double>());
    for (std::size_t l = 0; l < trace.layers.size(); ++l) {
      ScoredLayer layer;
      layer.layer = trace.layers[l].layer;
      layer.kind = trace.layers[l].kind;
      layer.routed = trace.layers[l].routed;
      if (decisions[l].defined()) layer.decision = decisions[l][t].item<bool>();
      if (gates[l].defined()) layer.gate = gates[l][t].item<double>();
      s.layers.push_back(std::move(layer));
    }
    for (const auto& [name, value] : extras) s.extras[name] = value[t].item<double>();
    result.tokens.push_back(std::move(s));
  }
  result.mean_logprob = T > 1 ? sum / static_cast<double>(T - 1) : 0.0;
  return result;
}

}  // namespace routelab
