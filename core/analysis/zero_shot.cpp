// Zero-shot scoring: requests tokenized as the lm-evaluation-harness splits them, batched by length, scored in eval
// mode; an example's choices compared (acc, acc_norm), a cloze answer checked token by token, documents scored in
// rolling windows.
#include "core/analysis/zero_shot.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/data/tokenizer.h"
#include "core/models/language_model.h"
#include "core/train/evaluation.h"
#include "core/train/step.h"
#include "core/util/errors.h"
#include "core/util/interrupt.h"
#include "core/util/utf8.h"

namespace routelab {
namespace {

/// Token ids whose last `scored` are scored, each predicted from the ids before it.
struct TokenRequest {
  std::vector<std::int64_t> ids;
  std::int64_t scored = 0;
};

/// The harness's split of context and continuation into tokens. An empty context feeds the tokenizer's prefix token
/// before the continuation's tokens (a DataError naming `where` without one); a context of whitespace alone is one.
TokenRequest tokenize(const Tokenizer& tokenizer, TaskRequest request, const std::string& where) {
  if (request.context.empty()) {
    const auto prefix = tokenizer.prefix_id();
    if (prefix < 0)
      throw DataError(where + " has an empty context, and the " + tokenizer.kind() +
                      " tokenizer has no beginning- or end-of-sequence token to predict its first token from");
    auto ids = tokenizer.encode(request.continuation);
    const auto scored = static_cast<std::int64_t>(ids.size());
    ids.insert(ids.begin(), prefix);
    return {ids, scored};
  }
  const auto cut = python_strip(request.context, false, true).size();  // trailing whitespace joins the continuation
  if (cut == 0)
    throw DataError(where + " has a context of whitespace alone: its first token would have nothing to be predicted "
                            "from");
  request.continuation = request.context.substr(cut) + request.continuation;
  request.context.resize(cut);
  const auto context = tokenizer.encode(request.context);
  auto whole = tokenizer.encode(request.context + request.continuation);
  if (whole.size() <= context.size()) {  // the continuation merged away: score its own tokens after the context's
    whole = context;
    const auto own = tokenizer.encode(request.continuation);
    whole.insert(whole.end(), own.begin(), own.end());
  }
  return {whole, static_cast<std::int64_t>(whole.size() - context.size())};
}

/// Scores token requests in batches of similar lengths (longest first), each fed its last max_length + 1 ids at most.
std::vector<RequestScore> score_tokens(LanguageModel& model, const std::vector<TokenRequest>& requests,
                                       const ScoringOptions& options, InferenceRouting* routing) {
  std::vector<RequestScore> scores(requests.size());
  std::vector<std::size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return requests[a].ids.size() > requests[b].ids.size(); });
  torch::NoGradGuard no_grad;
  const EvalMode eval_mode(model);
  const auto batch = std::max<std::int64_t>(1, options.batch_size);
  for (std::size_t first = 0; first < order.size(); first += static_cast<std::size_t>(batch)) {
    interruption_point();
    const auto last = std::min(order.size(), first + static_cast<std::size_t>(batch));
    // Inputs: every id but the last; the targets are the ids after them. A request past max_length + 1 ids keeps
    // its last ones (the scored tokens are never cut unless they alone are longer).
    std::vector<std::int64_t> lengths;
    for (auto i = first; i < last; ++i)
      lengths.push_back(
          std::min<std::int64_t>(static_cast<std::int64_t>(requests[order[i]].ids.size()) - 1, options.max_length));
    const auto width = *std::max_element(lengths.begin(), lengths.end());
    const auto rows = static_cast<std::int64_t>(last - first);
    auto input = torch::zeros({rows, width}, torch::kLong), target = torch::zeros({rows, width}, torch::kLong);
    auto* in = input.data_ptr<std::int64_t>();
    auto* tg = target.data_ptr<std::int64_t>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto& ids = requests[order[first + static_cast<std::size_t>(r)]].ids;
      const auto n = lengths[static_cast<std::size_t>(r)];
      const auto start = static_cast<std::int64_t>(ids.size()) - 1 - n;
      std::copy(ids.begin() + start, ids.begin() + start + n, in + r * width);
      std::copy(ids.begin() + start + 1, ids.begin() + start + 1 + n, tg + r * width);
    }
    AutocastGuard autocast(options.bf16, options.device);
    const auto out = model.forward(input.to(options.device), /*trace=*/routing != nullptr);
    if (routing) routing->add(out.trace);
    // The scored positions only, a few thousand at a time: (rows, width, V) log-probabilities of a large vocabulary
    // would take gigabytes.
    std::vector<std::int64_t> flat;  // r * width + t of each scored position, request by request
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto& request = requests[order[first + static_cast<std::size_t>(r)]];
      auto& score = scores[order[first + static_cast<std::size_t>(r)]];
      const auto n = lengths[static_cast<std::size_t>(r)];
      score.tokens = std::min(request.scored, n);
      score.fed = n;
      score.truncated = n < static_cast<std::int64_t>(request.ids.size()) - 1;
      for (auto t = n - score.tokens; t < n; ++t) flat.push_back(r * width + t);
    }
    const auto logits = out.logits.reshape({rows * width, -1});
    const auto targets = target.reshape({rows * width});
    std::vector<float> picked(flat.size());
    std::vector<char> greedy(flat.size());
    constexpr std::size_t kChunk = 4096;
    for (std::size_t from = 0; from < flat.size(); from += kChunk) {
      const auto count = std::min(kChunk, flat.size() - from);
      const auto where = torch::from_blob(flat.data() + from, {static_cast<std::int64_t>(count)}, torch::kLong).clone();
      const auto logp = torch::log_softmax(logits.index_select(0, where.to(options.device)).to(torch::kFloat), -1);
      const auto wanted = targets.index_select(0, where).to(options.device);
      const auto lp = logp.gather(-1, wanted.unsqueeze(-1)).squeeze(-1).to(torch::kCPU).contiguous();
      const auto top = logp.argmax(-1).eq(wanted).to(torch::kCPU).contiguous();
      std::copy_n(lp.data_ptr<float>(), count, picked.begin() + static_cast<std::ptrdiff_t>(from));
      std::copy_n(top.data_ptr<bool>(), count, greedy.begin() + static_cast<std::ptrdiff_t>(from));
    }
    std::size_t at = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      auto& score = scores[order[first + static_cast<std::size_t>(r)]];
      for (std::int64_t t = 0; t < score.tokens; ++t, ++at) {
        score.loglikelihood += picked[at];
        score.greedy = score.greedy && greedy[at];
      }
    }
    if (options.progress) options.progress(static_cast<std::int64_t>(last), static_cast<std::int64_t>(order.size()));
  }
  return scores;
}

double stderr_of_mean(double p, std::int64_t n) {
  return n > 1 ? std::sqrt(p * (1 - p) / static_cast<double>(n - 1)) : NAN;
}

void check_length(std::int64_t max_length) {
  if (max_length < 1) throw ConfigError("max length: " + std::to_string(max_length) + " is below 1");
}

}  // namespace

std::vector<RequestScore> score_requests(LanguageModel& model, const Tokenizer& tokenizer,
                                         const std::vector<TaskRequest>& requests, const ScoringOptions& options) {
  check_length(options.max_length);
  std::vector<TokenRequest> tokens;
  for (const auto& r : requests) tokens.push_back(tokenize(tokenizer, r, "a zero-shot request"));
  return score_tokens(model, tokens, options, nullptr);
}

std::vector<RollingWindow> rolling_windows(std::int64_t ids, std::int64_t max_length) {
  check_length(max_length);
  std::vector<RollingWindow> windows;
  for (std::int64_t scored_to = 1; scored_to < ids;) {  // ids [1, scored_to) are scored
    const auto end = std::min(ids, scored_to + max_length);
    windows.push_back({std::max<std::int64_t>(0, end - 1 - max_length), end, end - scored_to});
    scored_to = end;
  }
  return windows;
}

TaskResult evaluate_task(LanguageModel& model, const Tokenizer& tokenizer, const ZeroShotTask& task,
                         const ScoringOptions& options) {
  check_length(options.max_length);
  const auto began = std::chrono::steady_clock::now();
  TaskResult result;
  result.name = task.name;
  result.format = task.format;
  result.shots = task.shots;
  result.path = task.path;
  result.kind = task.kind;
  result.examples = static_cast<std::int64_t>(task.examples.size());
  if (task.kind == TaskKind::Perplexity) result.prefix_token = tokenizer.prefix_id();
  std::vector<TokenRequest> requests;
  std::vector<std::size_t> first_request;  // of each example
  for (const auto& example : task.examples) {
    first_request.push_back(requests.size());
    if (task.kind == TaskKind::Perplexity) {
      auto ids = tokenizer.encode(example.requests.front().continuation);
      if (result.prefix_token >= 0) ids.insert(ids.begin(), result.prefix_token);
      for (const auto& w : rolling_windows(static_cast<std::int64_t>(ids.size()), options.max_length))
        requests.push_back({{ids.begin() + w.first, ids.begin() + w.end}, w.scored});
      continue;
    }
    const auto where = task.path + ": example " + std::to_string(first_request.size());
    for (const auto& r : example.requests) {
      requests.push_back(tokenize(tokenizer, r, where));
      if (requests.back().scored == 0)  // it would score 0, a certainty, and win every comparison
        throw DataError(where + " has a choice or answer of no tokens");
    }
  }
  if (requests.empty()) throw DataError(task.path + ": no token to score (documents of one token at most)");
  InferenceRouting routing;
  const auto scores = score_tokens(model, requests, options, &routing);
  result.requests = static_cast<std::int64_t>(requests.size());
  for (const auto& s : scores) {
    result.truncated += s.truncated;
    result.tokens += s.tokens;
  }
  result.flops_ratio = routing.flops_ratio();
  result.routed_fraction = routing.any_routed() ? routing.mean_routed_fraction() : 1.0;
  for (std::size_t e = 0; e < task.examples.size(); ++e) {
    const auto end = e + 1 < first_request.size() ? first_request[e + 1] : scores.size();
    ExampleScore sample;
    sample.label = task.examples[e].label;
    sample.requests.assign(scores.begin() + static_cast<std::ptrdiff_t>(first_request[e]),
                           scores.begin() + static_cast<std::ptrdiff_t>(end));
    result.samples.push_back(std::move(sample));
  }
  const auto n = result.examples;
  if (task.kind == TaskKind::Perplexity) {
    double ll = 0, words = 0, bytes = 0;
    for (const auto& s : scores) ll += s.loglikelihood;
    for (const auto& example : task.examples) words += example.words, bytes += example.bytes;
    result.word_perplexity = std::exp(-ll / words);
    result.byte_perplexity = std::exp(-ll / bytes);
    result.bits_per_byte = -ll / bytes / std::log(2.0);
  } else if (task.kind == TaskKind::Cloze) {
    double right = 0, ll = 0;
    for (const auto& s : scores) right += s.greedy, ll += s.loglikelihood;
    result.acc = right / static_cast<double>(n);
    result.acc_stderr = stderr_of_mean(result.acc, n);
    result.perplexity = std::exp(-ll / static_cast<double>(n));
  } else {
    double right = 0, right_norm = 0;
    bool shared_continuation = task.format == "winogrande";  // the same text after every choice: no acc_norm
    for (std::size_t e = 0; e < task.examples.size(); ++e) {
      const auto& example = task.examples[e];
      std::size_t best = 0, best_norm = 0;
      for (std::size_t c = 1; c < example.requests.size(); ++c) {
        const auto& s = scores[first_request[e] + c];
        if (s.loglikelihood > scores[first_request[e] + best].loglikelihood) best = c;
        if (s.loglikelihood / example.lengths[c] >
            scores[first_request[e] + best_norm].loglikelihood / example.lengths[best_norm])
          best_norm = c;
      }
      right += static_cast<std::int64_t>(best) == example.label;
      right_norm += static_cast<std::int64_t>(best_norm) == example.label;
      result.samples[e].pred = static_cast<std::int64_t>(best);
      if (!shared_continuation) result.samples[e].pred_norm = static_cast<std::int64_t>(best_norm);
    }
    result.acc = right / static_cast<double>(n);
    result.acc_stderr = stderr_of_mean(result.acc, n);
    if (!shared_continuation) {
      result.acc_norm = right_norm / static_cast<double>(n);
      result.acc_norm_stderr = stderr_of_mean(result.acc_norm, n);
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  return result;
}

std::vector<std::pair<std::string, double>> task_metrics(const TaskResult& r) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [key, value] : std::vector<std::pair<std::string, double>>{{"acc", r.acc},
                                                                              {"acc_norm", r.acc_norm},
                                                                              {"ppl", r.perplexity},
                                                                              {"word_perplexity", r.word_perplexity},
                                                                              {"byte_perplexity", r.byte_perplexity},
                                                                              {"bits_per_byte", r.bits_per_byte}})
    if (std::isfinite(value)) out.emplace_back(key, value);
  return out;
}

nlohmann::json TaskResult::sample_json(std::size_t i, const ZeroShotTask* task) const {
  const auto& s = samples.at(i);
  nlohmann::json j = {{"task", name}, {"example", i}};
  nlohmann::json requests = nlohmann::json::array();
  const TaskExample* example = task && kind != TaskKind::Perplexity ? &task->examples.at(i) : nullptr;
  double ll = 0;
  bool greedy = true;
  for (std::size_t k = 0; k < s.requests.size(); ++k) {
    const auto& r = s.requests[k];
    requests.push_back({{"loglikelihood", r.loglikelihood},
                        {"tokens", r.tokens},
                        {"fed", r.fed},
                        {"greedy", r.greedy},
                        {"truncated", r.truncated}});
    if (example) {
      requests.back()["context"] = example->requests.at(k).context;
      requests.back()["continuation"] = example->requests.at(k).continuation;
    }
    ll += r.loglikelihood;
    greedy = greedy && r.greedy;
  }
  if (kind == TaskKind::MultipleChoice) {
    j["label"] = s.label;
    j["pred"] = s.pred;
    j["acc"] = s.pred == s.label ? 1 : 0;
    if (s.pred_norm >= 0) {
      j["pred_norm"] = s.pred_norm;
      j["acc_norm"] = s.pred_norm == s.label ? 1 : 0;
    }
  } else if (kind == TaskKind::Cloze) {
    j["acc"] = greedy ? 1 : 0;
    j["loglikelihood"] = ll;
  } else {
    j["loglikelihood"] = ll;  // the document's, over its windows
    j["prefix_token"] = prefix_token;
    if (task) j["text"] = task->examples.at(i).requests.front().continuation;  // as scored: WikiText's detokenized
  }
  j["requests"] = std::move(requests);
  return j;
}

std::string TaskResult::scoring_note() const {
  if (kind != TaskKind::Perplexity || prefix_token >= 0) return "";
  return "each document's first token fed, not scored (the tokenizer has no beginning- or end-of-sequence token to "
         "score it after, as the harness does)";
}

nlohmann::json TaskResult::to_json() const {
  const auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"name", name},
          {"format", format},
          {"shots", shots},
          {"path", path},
          {"kind", to_string(kind)},
          {"examples", examples},
          {"requests", requests},
          {"tokens", tokens},
          {"truncated", truncated},
          {"acc", number(acc)},
          {"acc_stderr", number(acc_stderr)},
          {"acc_norm", number(acc_norm)},
          {"acc_norm_stderr", number(acc_norm_stderr)},
          {"ppl", number(perplexity)},
          {"word_perplexity", number(word_perplexity)},
          {"byte_perplexity", number(byte_perplexity)},
          {"bits_per_byte", number(bits_per_byte)},
          {"prefix_token", prefix_token},
          {"flops_ratio", flops_ratio},
          {"routed_fraction", routed_fraction},
          {"seconds", seconds}};
}

nlohmann::json TaskResult::answers_json() const {
  nlohmann::json out = nlohmann::json::object();
  if (kind == TaskKind::Perplexity) return out;
  for (const auto& s : samples) {
    if (kind == TaskKind::MultipleChoice) {
      out["label"].push_back(s.label);
      out["pred"].push_back(s.pred);
      out["pred_norm"].push_back(s.pred_norm);
    } else {
      const bool greedy = std::all_of(s.requests.begin(), s.requests.end(), [](const auto& r) { return r.greedy; });
      out["greedy"].push_back(greedy ? 1 : 0);
    }
  }
  return out;
}

TaskResult TaskResult::from_json(const nlohmann::json& doc, const std::string& where) {
  const auto fail = [&](const std::string& key, const std::string& why) {
    return DataError(where + ": " + key + " " + why);
  };
  try {
    TaskResult r;
    r.name = doc.at("name").get<std::string>();
    r.format = doc.at("format").get<std::string>();
    r.path = doc.value("path", "");
    r.shots = doc.value("shots", std::int64_t{0});
    const auto kind = doc.at("kind").get<std::string>();
    bool known = false;
    for (const auto k : {TaskKind::MultipleChoice, TaskKind::Cloze, TaskKind::Perplexity})
      if (to_string(k) == kind) r.kind = k, known = true;
    if (!known) throw fail("kind", "'" + kind + "' is not a task kind");
    const auto number = [&](const char* key) {
      return doc.contains(key) && doc.at(key).is_number() ? doc.at(key).get<double>() : NAN;
    };
    r.examples = doc.at("examples").get<std::int64_t>();
    r.requests = doc.value("requests", std::int64_t{0});
    r.tokens = doc.value("tokens", std::int64_t{0});
    r.truncated = doc.value("truncated", std::int64_t{0});
    r.acc = number("acc");
    r.acc_stderr = number("acc_stderr");
    r.acc_norm = number("acc_norm");
    r.acc_norm_stderr = number("acc_norm_stderr");
    r.perplexity = number("ppl");
    r.word_perplexity = number("word_perplexity");
    r.byte_perplexity = number("byte_perplexity");
    r.bits_per_byte = number("bits_per_byte");
    r.prefix_token = doc.value("prefix_token", std::int64_t{-1});
    r.flops_ratio = doc.value("flops_ratio", 1.0);
    r.routed_fraction = doc.value("routed_fraction", 1.0);
    r.seconds = doc.value("seconds", 0.0);
    const auto answers = doc.value("answers", nlohmann::json::object());
    const auto column = [&](const char* key) {
      const auto values = answers.at(key).get<std::vector<std::int64_t>>();
      if (static_cast<std::int64_t>(values.size()) != r.examples)
        throw fail(std::string("answers.") + key, "holds " + std::to_string(values.size()) + " examples, not " +
                                                      std::to_string(r.examples));
      return values;
    };
    if (r.kind == TaskKind::MultipleChoice && answers.contains("pred")) {
      const auto label = column("label"), pred = column("pred"), pred_norm = column("pred_norm");
      for (std::size_t i = 0; i < label.size(); ++i) r.samples.push_back({{}, label[i], pred[i], pred_norm[i]});
    } else if (r.kind == TaskKind::Cloze && answers.contains("greedy")) {
      for (const auto g : column("greedy")) {
        ExampleScore s;
        s.requests.push_back(RequestScore{NAN, g != 0, 0, false});
        r.samples.push_back(std::move(s));
      }
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw DataError(where + ": not a stored task result (" + e.what() + ")");
  }
}

}  // namespace routelab
