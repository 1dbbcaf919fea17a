// Token traces: one forward pass with tracing over the caller's tokens, turned into the probe document. The
// trainer's probe (probe_json, classification_probe_json) calls trace_ids / trace_pair, so what the inspector
// shows for the probe text is byte for byte what the run stored.
#include "core/analysis/token_trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "core/data/classification.h"
#include "core/data/tokenizer.h"
#include "core/data/word_tokenizer.h"
#include "core/models/classifier.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/store/run_store.h"
#include "core/train/checkpoint.h"
#include "core/train/evaluation.h"
#include "core/util/device.h"
#include "core/util/errors.h"
#include "core/util/paths.h"

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

std::string run_label(std::int64_t run_id, const std::string& db_path) {
  return db_path + ": run " + std::to_string(run_id);
}

/// "premise<newline>hypothesis", "premise<tab>hypothesis" or "premise ||| hypothesis"; the earliest separator
/// wins. No separator: the whole text is the premise.
std::pair<std::string, std::string> split_pair(const std::string& text) {
  std::size_t at = std::string::npos, width = 0;
  for (const std::string_view sep : {"\n", "\t", " ||| ", "|||"}) {
    const auto pos = text.find(sep);
    if (pos != std::string::npos && pos < at) at = pos, width = sep.size();
  }
  if (at == std::string::npos) return {text, std::string()};
  return {text.substr(0, at), text.substr(at + width)};
}

}  // namespace

nlohmann::json TokenTrace::to_json() const {
  nlohmann::json doc;
  if (task == "classification") {
    doc["task"] = "classification";
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
  trace.task = "classification";
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

TokenTrace trace_text(LoadedRun& run, const std::string& text, const TraceTextOptions& options) {
  const auto where = run_label(run.run_id, run.db_path);
  if (text.empty()) throw DataError(where + ": the text to trace is empty");
  const auto& tokenizer = run.dataset->tokenizer();
  std::vector<std::int64_t> ids;
  try {
    ids = tokenizer.encode(text);
  } catch (const DataError& e) {
    throw DataError(where + ": the " + tokenizer.kind() + " tokenizer cannot encode the text: " + e.what());
  }
  const std::size_t needed = options.last_token_is_target ? 2 : 1;
  if (ids.size() < needed)
    throw DataError(where + ": the text encodes to " + std::to_string(ids.size()) + " token(s); " +
                    std::to_string(needed) + " needed");
  const auto context = run.dataset->context();
  std::optional<std::int64_t> target;
  if (options.last_token_is_target) {
    target = ids.back();
    ids.pop_back();
  }
  std::int64_t dropped = 0;
  if (static_cast<std::int64_t>(ids.size()) > context) {
    dropped = static_cast<std::int64_t>(ids.size()) - context;
    ids.erase(ids.begin(), ids.begin() + dropped);
  }
  run.model->eval();
  auto trace = trace_ids(*run.model, tokenizer, ids, target, options.top_k, context, run.device);
  trace.dropped_tokens = dropped;
  return trace;
}

TraceableRun open_traceable(const std::string& db_path, std::int64_t run_id, std::int64_t step) {
  TraceableRun run;
  run.run_id = run_id;
  StoredRun stored = read_stored_run(db_path, run_id, {}, step);
  if (architecture(stored.arch).task != "classification") {
    // Language models: the analysis loader (config, dataset, weights) as every other analysis.
    run.lm = std::make_unique<LoadedRun>(load_run(stored.db_path, run_id, {}, step));
    run.task = "lm";
    run.name = run.lm->name;
    run.arch = run.lm->config.arch();
    run.step = run.lm->step;
    run.device = run.lm->device;
    run.num_layers = run.lm->config.model().value("n_layer", std::int64_t{0});
    return run;
  }
  auto loaded = load_classifier_run(stored.db_path, run_id, {}, step);
  run.task = "classification";
  run.name = loaded.name;
  run.arch = stored.arch;
  run.device = loaded.device;
  run.labels = loaded.data->label_names();
  run.max_length = loaded.data->max_length();
  run.pair_tokenizer = PairTokenizer::from_json(loaded.data->tokenizer_json());
  run.classifier = loaded.model;
  run.step = loaded.step;
  run.num_layers = run.classifier->num_layers();
  return run;
}

TokenTrace trace_text(TraceableRun& run, const std::string& text, int top_k) {
  if (run.lm) return trace_text(*run.lm, text, top_k);
  // A classifier predicts a label, not next tokens: top_k has nothing to rank.
  const auto where = "run " + std::to_string(run.run_id);
  if (!run.classifier || !run.pair_tokenizer) throw ConfigError(where + " is not open for tracing");
  const auto [premise, hypothesis] = split_pair(text);
  const auto& tok = *run.pair_tokenizer;
  std::vector<std::int64_t> a, b;
  try {
    a = tok.encode(premise);
    b = tok.encode(hypothesis);
  } catch (const DataError& e) {
    throw DataError(where + ": the " + tok.kind() + " tokenizer cannot encode the text: " + e.what());
  }
  if (a.empty() && b.empty()) throw DataError(where + ": the text to trace has no words");
  const auto words = static_cast<std::int64_t>(a.size() + b.size());
  const auto pair = encode_pair(tok, std::move(a), std::move(b), run.max_length);
  const auto T = run.max_length;
  ClassBatch example;
  example.input = torch::full({1, T}, tok.pad_id(), torch::kLong);  // (1, T)
  example.mask = torch::zeros({1, T}, torch::kBool);
  example.segment = torch::ones({1, T}, torch::kLong);
  example.label = torch::zeros({1}, torch::kLong);
  std::vector<std::string> tokens;
  for (std::size_t t = 0; t < pair.ids.size(); ++t) {
    const auto i = static_cast<std::int64_t>(t);
    example.input[0][i] = pair.ids[t];
    example.mask[0][i] = true;
    example.segment[0][i] = i < pair.first_length ? 0 : 1;
    tokens.push_back(tok.token_text(pair.ids[t]));
  }
  example.input = example.input.to(run.device);
  example.mask = example.mask.to(run.device);
  example.segment = example.segment.to(run.device);
  run.classifier->eval();
  auto trace = trace_pair(*run.classifier, example, tokens, run.labels);
  trace.dropped_tokens = words + 3 - static_cast<std::int64_t>(pair.ids.size());  // longest-first truncation
  return trace;
}

}  // namespace routelab
