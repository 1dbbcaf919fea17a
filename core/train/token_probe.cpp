// The trainer's probe (token_probe.h): one traced forward over the caller's tokens, turned into the probe document.
#include "core/train/token_probe.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/data/classification.h"
#include "core/data/tokenizer.h"
#include "core/models/classifier.h"
#include "core/models/language_model.h"
#include "core/train/evaluation.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

/// One layer of a trace as the probe stores it; per-token gate/decision of sequence 0.
nlohmann::json layer_json(const LayerTrace& layer, bool with_stats) {
  nlohmann::json l = {{"layer", layer.layer}, {"kind", layer.kind}, {"routed", layer.routed}};
  if (layer.gate.defined()) {
    const auto g = layer.gate[0].to(torch::kFloat).cpu().contiguous();
    l["gate"] = std::vector<float>(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
  }
  if (layer.decision.defined()) {
    const auto d = layer.decision[0].to(torch::kInt).cpu().contiguous();
    l["decision"] = std::vector<int>(d.data_ptr<int>(), d.data_ptr<int>() + d.numel());
  }
  if (with_stats)
    for (const auto& [key, value] : layer.stats) l["stats"][key] = value;
  return l;
}

}  // namespace

nlohmann::json TokenTrace::to_json() const {
  nlohmann::json doc;
  if (task == Task::Classification) {
    doc["task"] = to_string(task);
    doc["tokens"] = tokens;
    doc["labels"] = labels;
    doc["class_probs"] = class_probs;
    doc["predicted"] = predicted;
  } else {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      doc["tokens"].push_back(tokens[i]);
      // The unknown next token after the last is null, which the dashboard reads as none.
      if (std::isnan(next_logprob[i])) doc["next_logprob"].push_back(nullptr);
      else doc["next_logprob"].push_back(next_logprob[i]);
    }
  }
  doc["layers"] = layers;
  if (!token_data.is_null()) doc["token_data"] = token_data;
  if (k > 0) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& position : top_k) {
      nlohmann::json row = nlohmann::json::array();
      for (const auto& p : position) row.push_back({{"id", p.id}, {"text", p.text}, {"p", p.prob}});
      all.push_back(std::move(row));
    }
    doc["top_k"] = std::move(all);
  }
  if (dropped_tokens > 0) doc["dropped_tokens"] = dropped_tokens;
  return doc;
}

TokenTrace trace_ids(LanguageModel& model, const Tokenizer& tokenizer, const std::vector<std::int64_t>& ids,
                     std::optional<std::int64_t> next_after_last, int top_k, std::int64_t context,
                     const torch::Device& device) {
  if (ids.empty()) throw ConfigError("token trace: no tokens to trace");
  const auto n = static_cast<std::int64_t>(ids.size());
  if (context > 0 && n > context)
    throw ConfigError("token trace: " + std::to_string(n) + " tokens exceed the model's context of " +
                      std::to_string(context));
  torch::NoGradGuard no_grad;
  TokenTrace trace;
  trace.ids = ids;
  trace.context = context;
  trace.k = std::max(0, top_k);
  const auto input = torch::tensor(ids, torch::kLong).unsqueeze(0).to(device);  // (1, n)
  const auto out = model.forward(input, /*trace=*/true);
  const auto logp = torch::log_softmax(out.logits.to(torch::kFloat)[0], -1).cpu();  // (n, V)
  for (std::int64_t i = 0; i < n; ++i) {
    trace.tokens.push_back(tokenizer.token_text(ids[static_cast<std::size_t>(i)]));
    const bool last = i + 1 == n;
    if (!last) {
      trace.next_logprob.push_back(logp[i][ids[static_cast<std::size_t>(i + 1)]].item<double>());
    } else if (next_after_last) {
      trace.next_logprob.push_back(logp[i][*next_after_last].item<double>());
    } else {
      trace.next_logprob.push_back(std::numeric_limits<double>::quiet_NaN());
    }
  }
  if (trace.k > 0) {
    const auto k = std::min<std::int64_t>(trace.k, logp.size(-1));
    const auto best = logp.topk(k, -1, /*largest=*/true, /*sorted=*/true);  // values, indices: (n, k)
    const auto values = std::get<0>(best).exp().contiguous(), indices = std::get<1>(best).contiguous();
    const auto* v = values.data_ptr<float>();
    const auto* x = indices.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      std::vector<TokenPrediction> row;
      for (std::int64_t j = 0; j < k; ++j) {
        const auto id = x[i * k + j];
        row.push_back({id, tokenizer.token_text(id), static_cast<double>(v[i * k + j])});
      }
      trace.top_k.push_back(std::move(row));
    }
  }
  for (const auto& layer : out.trace) trace.layers.push_back(layer_json(layer, /*with_stats=*/false));
  for (const auto& [key, tensor] : out.token_data) trace.token_data[key] = tensor_to_json(tensor[0]);
  return trace;
}

TokenTrace trace_pair(SequenceClassifier& model, const ClassBatch& example, const std::vector<std::string>& tokens,
                      const std::vector<std::string>& labels) {
  torch::NoGradGuard no_grad;
  const auto out = model.forward(example.input, example.mask, example.segment, /*trace=*/true);
  const auto probs = torch::softmax(out.logits.to(torch::kFloat)[0], -1).cpu().contiguous();  // (C)
  const auto real = example.mask[0].sum().item<std::int64_t>();
  TokenTrace trace;
  trace.task = Task::Classification;
  trace.tokens = tokens;
  trace.labels = labels;
  trace.context = example.input.size(1);
  const auto input = example.input[0].to(torch::kCPU).contiguous();
  trace.ids.assign(input.data_ptr<std::int64_t>(), input.data_ptr<std::int64_t>() + real);
  trace.class_probs.assign(probs.data_ptr<float>(), probs.data_ptr<float>() + probs.numel());
  trace.predicted = probs.argmax().item<std::int64_t>();
  for (const auto& layer : out.trace) trace.layers.push_back(layer_json(layer, /*with_stats=*/true));
  // Per-token values of the real tokens only (the token texts exclude the padding too).
  const auto n = std::min<std::int64_t>(real, static_cast<std::int64_t>(tokens.size()));
  for (const auto& [key, tensor] : out.token_data)
    trace.token_data[key] = tensor_to_json(tensor[0].narrow(0, 0, n).to(torch::kCPU));
  return trace;
}

}  // namespace routelab
