// Zero-shot evaluation of a stored language model on multiple-choice, cloze and perplexity tasks: the downstream
// columns of the DTRNet paper's Tables 1 and 3 (ARC-Easy and -Challenge, BoolQ, HellaSwag, PIQA, MMLU, Winogrande,
// LAMBADA, WikiText), scored as EleutherAI's lm-evaluation-harness (v0.4) scores them. Each task is a file the user
// has (JSON Lines as the datasets are published, or text): an example becomes the harness's prompt and choices, each
// choice is scored by the summed log-probability of its tokens after the prompt's, and the example is right when the
// right choice scores highest (acc) or highest per character of the choice (acc_norm). Cloze tasks (LAMBADA) are right
// when every token of the answer is the model's greedy choice; perplexity tasks (WikiText) score whole documents in
// windows. The results can be stored with the run (core/analysis/zero_shot_store.h).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace routelab {

class LanguageModel;
class Tokenizer;

/// One log-likelihood asked of the model: log p(continuation | context), summed over the continuation's tokens.
struct TaskRequest {
  std::string context, continuation;
  bool operator==(const TaskRequest&) const = default;
};

/// One example: a request per choice and the right one's index (multiple choice; Winogrande's choices are contexts
/// sharing one continuation), one request (cloze: the answer after the context), or one document as the
/// continuation of an empty context (perplexity). `lengths`: each choice's characters, for acc_norm; `words`,
/// `bytes`: what a document's perplexities divide by (WikiText's page counted before it is detokenized).
struct TaskExample {
  std::vector<TaskRequest> requests;
  std::int64_t label = 0;
  std::vector<double> lengths;
  double words = 0, bytes = 0;
  /// Said once before any few-shot examples (MMLU's subject line); every request's context begins with it.
  std::string description;
};

enum class TaskKind { MultipleChoice, Cloze, Perplexity };

struct ZeroShotTask {
  std::string name;    ///< the file's stem unless named ("piqa" for piqa_validation.jsonl's "NAME=" form)
  std::string format;  ///< one of task_formats()
  std::string path;
  TaskKind kind = TaskKind::MultipleChoice;
  std::vector<TaskExample> examples;
  std::int64_t shots = 0;  ///< solved examples before each prompt (with_few_shot)
};

/// The formats a task file may have: generic ({"context", "choices", "label"}, the choices appended as written),
/// piqa, arc, hellaswag, winogrande, boolq, mmlu (tinyMMLU's input_formatted prompts too), lambada (JSON Lines in the
/// fields of the published datasets), and text (perplexity: a JSON Lines file of {"page"} documents, detokenized as the
/// harness detokenizes WikiText, or of {"text"} documents, or a plain text file as one document).
const std::vector<std::string>& task_formats();

/// "NAME=FILE:FORMAT", each of NAME= and :FORMAT optional; the name defaults to the file's stem. A ConfigError names
/// the spec when the file is empty or the format unknown.
struct TaskSpec {
  std::string name, path, format;
};
TaskSpec parse_task_spec(const std::string& spec);

/// Reads a task file in `format` ("" = from the first line's keys; a file not ending in .jsonl or .json is text).
/// `limit` > 0 keeps the first examples. A missing or unreadable file, a line that is not JSON or lacks a field, a
/// label out of range or a file without examples is a DataError naming the file, the line and the key.
ZeroShotTask read_task(const TaskSpec& spec, std::int64_t limit = 0);

/// The task with `shots` solved examples before each prompt, as lm-evaluation-harness 0.4 builds a few-shot prompt
/// (num_fewshot, fewshot_random_seed): the example's description (MMLU's subject line), then each drawn example's
/// prompt, its right answer after the target delimiter and a blank line, then the example's own prompt. The examples
/// are drawn from `pool` by Python's random.Random(seed).sample, one draw an example in the file's order (the
/// harness's sampler); MMLU takes the pool's first ones (its first_n sampler). `same_file`: the pool is the task's own
/// file (read whole), and an example is not shown its own answer (shots + 1 drawn, copies of it dropped, as the
/// harness does when the few-shot split is the evaluated one). Named NAME_Kshot. ConfigError for a perplexity task,
/// a pool of another format or one too small.
ZeroShotTask with_few_shot(const ZeroShotTask& task, const ZeroShotTask& pool, bool same_file, std::int64_t shots,
                           std::uint64_t seed = 1234);

struct ScoringOptions {
  std::int64_t max_length = 256;  ///< tokens the model reads at most (a longer context is cut from the left)
  std::int64_t batch_size = 16;   ///< requests per forward
  torch::Device device = torch::kCPU;
  bool bf16 = false;
  /// Called after each batch with the requests scored so far and their total (a panel's progress); may be empty.
  std::function<void(std::int64_t scored, std::int64_t total)> progress;
};

struct RequestScore {
  double loglikelihood = 0;  ///< summed over the scored tokens
  bool greedy = true;        ///< every scored token was the model's most likely one
  std::int64_t tokens = 0;   ///< tokens scored
  bool truncated = false;    ///< the context was cut to fit max_length
  std::int64_t fed = 0;      ///< tokens fed to the model: the scored ones' predecessors and the context before them
};

/// Scores each request as the harness does: the continuation's tokens are those of context + continuation after the
/// context's own (whitespace ending the context moves to the continuation first), fed left-truncated to max_length,
/// in batches of similar lengths (right-padded: a causal model's real positions do not see the padding). An empty
/// context feeds the tokenizer's prefix token (Tokenizer::prefix_id) before the continuation's own tokens, as the
/// harness does; without one it is a DataError, as is a context of whitespace alone.
std::vector<RequestScore> score_requests(LanguageModel& model, const Tokenizer& tokenizer,
                                         const std::vector<TaskRequest>& requests, const ScoringOptions& options);

/// One example as scored, for a look at single predictions and paired comparisons of runs: its requests' scores in
/// order (a choice each, the answer, or a document's windows) and, for multiple choice, the choice that scored highest
/// (pred) and highest per character (pred_norm; -1 where the task has no acc_norm).
struct ExampleScore {
  std::vector<RequestScore> requests;
  std::int64_t label = 0, pred = -1, pred_norm = -1;
};

struct TaskResult {
  std::string name, format, path;
  std::int64_t shots = 0;
  TaskKind kind = TaskKind::MultipleChoice;
  std::int64_t examples = 0, requests = 0, truncated = 0, tokens = 0;
  double acc = NAN, acc_stderr = NAN;            ///< multiple choice and cloze (stderr: sqrt(p (1 - p) / (n - 1)))
  double acc_norm = NAN, acc_norm_stderr = NAN;  ///< multiple choice with choices of their own text
  double perplexity = NAN;                       ///< cloze: exp(-mean log-likelihood of the answer)
  double word_perplexity = NAN, byte_perplexity = NAN, bits_per_byte = NAN;  ///< perplexity tasks
  /// Perplexity tasks: the token fed before each document (Tokenizer::prefix_id); -1: none, the documents' first
  /// tokens were fed and not scored.
  std::int64_t prefix_token = -1;
  /// What the figures leave out, for the reports beside them: for a perplexity task without a prefix token, that each
  /// document's first token was fed and not scored; "" otherwise.
  std::string scoring_note() const;
  double flops_ratio = 1, routed_fraction = 1;  ///< at inference over every position fed (padding included)
  double seconds = 0;
  std::vector<ExampleScore> samples;  ///< one per example, in the file's order (not in to_json)
  nlohmann::json to_json() const;
  /// Each example's answers, enough to pair this result with another's without scoring again (kept with the stored
  /// result): label, pred and pred_norm arrays (multiple choice) or greedy (cloze: 1 where every answer token was the
  /// greedy one); {} for perplexity tasks.
  nlohmann::json answers_json() const;
  /// A result as to_json wrote it, with its "answers" where kept (samples then hold them, without log-likelihoods).
  /// DataError naming `where` and the key for a document that is not one.
  static TaskResult from_json(const nlohmann::json& doc, const std::string& where);
  /// Example `i` as a JSON object: task, example, label, pred, pred_norm, acc, acc_norm (as the task has them) and
  /// each request's loglikelihood, tokens, greedy and truncated (the harness's --log_samples, in RouteLab's terms).
  /// Given the task it was scored on, each request also has its context and continuation (the harness's arguments);
  /// a perplexity task's requests are the document's windows, and its row has the document's text as scored ("text":
  /// the harness's loglikelihood_rolling argument) and the prefix_token.
  nlohmann::json sample_json(std::size_t i, const ZeroShotTask* task = nullptr) const;
};

/// One window of a document scored in rolling windows: ids [first, end) of the document, of which the model is fed
/// [first, end - 1) and scores the last `scored` (the ids that follow what it was fed).
struct RollingWindow {
  std::int64_t first = 0, end = 0, scored = 0;
  bool operator==(const RollingWindow&) const = default;
};

/// The harness's rolling windows of a document of `ids` ids (get_rolling_token_windows with context_len 1, then
/// make_disjoint_window), its first id the one fed first and never scored (the prefix token, else the document's
/// first token): windows of max_length scored ids each, the first fed from id 0, every later one fed the max_length
/// ids before its last, so that the last, shorter window sees a whole max_length of context. None for ids < 2.
std::vector<RollingWindow> rolling_windows(std::int64_t ids, std::int64_t max_length);

/// Evaluates one task in eval mode without gradients. Perplexity tasks score each document in the harness's rolling
/// windows (rolling_windows), after the tokenizer's prefix token where it has one (the harness's prefix_token_id),
/// else after the document's first token, which is then not scored.
TaskResult evaluate_task(LanguageModel& model, const Tokenizer& tokenizer, const ZeroShotTask& task,
                         const ScoringOptions& options);

/// The metric keys a result stores ("acc", "acc_norm", ...) with their values, finite ones only, in a fixed order.
std::vector<std::pair<std::string, double>> task_metrics(const TaskResult& result);

std::string to_string(TaskKind kind);

}  // namespace routelab
