// Token traces of any text through a stored run: encoded with the run's tokenizer, then traced by the trainer's
// probe functions (core/train/token_probe.h), so what the inspector shows for the probe text is byte for byte what
// the run stored.
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

TokenTrace trace_text(LoadedRun& run, const std::string& text, const TraceTextOptions& options) {
  const auto where = run_label(run.run_id, run.db_path);
  if (text.empty()) throw DataError(where + ": the text to trace is empty");
  const auto& tokenizer = run.tokenizer();
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
  const auto context = run.context_length;
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

TraceableRun open_traceable(const std::string& db_path, std::int64_t run_id, std::int64_t step,
                            const std::vector<std::string>& sets) {
  TraceableRun run;
  run.run_id = run_id;
  StoredRun stored = read_stored_run(db_path, run_id, {}, step);
  if (architecture(stored.arch).task != Task::Classification) {
    // Language models: the analysis loader (config, stored tokenizer, weights): text given to it needs no dataset.
    run.lm = std::make_unique<LoadedRun>(load_run(stored.db_path, run_id, sets, step, RunData::Tokenizer));
    run.task = Task::LanguageModel;
    run.name = run.lm->name;
    run.arch = run.lm->config.arch();
    run.step = run.lm->step;
    run.device = run.lm->device;
    run.num_layers = run.lm->config.model().value("n_layer", std::int64_t{0});
    return run;
  }
  auto loaded = load_classifier_run(stored.db_path, run_id, sets, step);
  run.task = Task::Classification;
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
