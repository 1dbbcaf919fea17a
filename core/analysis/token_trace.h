// Per-token trace of any text through a stored run (issue 7, the token inspector), through the trainer's probe
// (core/train/token_probe.h: trace_ids / trace_pair), so the inspector and the stored probe JSON agree exactly.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/analysis/run_analysis.h"
#include "core/train/token_probe.h"

namespace routelab {

class LanguageModel;
class PairTokenizer;
class SequenceClassifier;
class Tokenizer;
struct ClassBatch;

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
  std::string name, arch;
  Task task = Task::LanguageModel;
  std::int64_t num_layers = 0;
  std::unique_ptr<LoadedRun> lm;
  std::shared_ptr<SequenceClassifier> classifier;
  std::shared_ptr<PairTokenizer> pair_tokenizer;
  std::vector<std::string> labels;
  std::int64_t max_length = 0;
  torch::Device device = torch::kCPU;
};

/// Opens run `run_id` of `db_path` at the checkpoint of `step` (0 = latest), with the overrides `sets`
/// ("model.inference=sparse") applied as load_run applies them. Errors as load_run.
TraceableRun open_traceable(const std::string& db_path, std::int64_t run_id, std::int64_t step = 0,
                            const std::vector<std::string>& sets = {});

/// Traces `text` through either kind of run. A classifier reads a sentence pair: the premise and the hypothesis
/// separated by the first line break, tab or " ||| " (a single sentence is read as the premise with an empty
/// hypothesis); longer pairs are truncated as in training.
TokenTrace trace_text(TraceableRun& run, const std::string& text, int top_k);

}  // namespace routelab
