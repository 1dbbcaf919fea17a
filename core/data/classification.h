// Sentence-pair classification data (TAGAT: MultiNLI-style entailment): pair files in the GLUE TSV and
// JSON-lines formats, or the embedded synthetic entailment task; word-level or WordPiece tokenization into
// `[CLS] a [SEP] b [SEP]` with padding, a padding mask and segment ids. Batches are built from example indices,
// so the trainer owns the epoch order (epoch_order) and a resumed run sees the same batches.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "core/data/dataset.h"

namespace routelab {

/// One padded batch of sentence pairs.
struct ClassBatch {
  torch::Tensor input;    ///< (B, T) int64 token ids, [CLS] at position 0, padded with pad_id()
  torch::Tensor mask;     ///< (B, T) bool, true for real tokens (attention keys and pooling use only these)
  torch::Tensor segment;  ///< (B, T) int64, 0 for [CLS] a [SEP], 1 for b [SEP] and padding
  torch::Tensor label;    ///< (B) int64 class ids in [0, num_classes())
};

/// Counts of what reading a pair file kept and dropped (reported, not fatal unless nothing is left).
struct PairFileReport {
  std::string path;
  std::int64_t rows = 0;        ///< data rows read (header excluded)
  std::int64_t kept = 0;
  std::int64_t malformed = 0;   ///< wrong field count, invalid JSON, missing field, invalid UTF-8
  std::int64_t unlabeled = 0;   ///< gold label "-" or empty (MultiNLI has these), or a label not in the label set
  std::int64_t truncated = 0;   ///< pairs longer than max_length, cut
};

class ClassificationDataset {
 public:
  virtual ~ClassificationDataset() = default;
  /// e.g. "synthetic-entailment (seed 7): 30000/3000/3000 pairs, word tokenizer (412), length 64, 3 classes"
  virtual std::string describe() const = 0;
  virtual const std::vector<std::string>& label_names() const = 0;   ///< index = class id
  std::int64_t num_classes() const { return static_cast<std::int64_t>(label_names().size()); }
  virtual std::int64_t vocab_size() const = 0;
  virtual std::int64_t max_length() const = 0;                        ///< T of every batch
  virtual std::int64_t pad_id() const = 0;
  virtual std::int64_t size(Split split) const = 0;                   ///< examples in the split (0 if absent)
  /// The examples `indices` of the split, in that order, padded to max_length(). Throws DataError on an index
  /// out of range.
  virtual ClassBatch batch(Split split, const std::vector<std::int64_t>& indices) const = 0;
  /// Human-readable tokens of one example (as batch() encodes it, padding excluded), for per-token views.
  virtual std::vector<std::string> tokens_text(Split split, std::int64_t index) const = 0;
  /// The label of every example of the split (class balance, macro-F1 denominators).
  virtual std::vector<std::int64_t> labels(Split split) const = 0;
  /// A fixed validation example shown in per-token gating views.
  virtual std::int64_t probe_index() const { return 0; }
  /// What reading the files kept and dropped (empty for the synthetic task).
  virtual std::vector<PairFileReport> reports() const { return {}; }
  virtual nlohmann::json tokenizer_json() const = 0;                  ///< persisted with the run and checkpoints
};

/// One labelled sentence pair, as read from a file or generated.
struct SentencePair {
  std::string premise;     ///< sentence1
  std::string hypothesis;  ///< sentence2
  std::int64_t label = 0;  ///< class id: index into the label names
};

enum class PairFormat { Auto, Tsv, Jsonl };

/// "entailment,neutral,contradiction" -> the class names in id order (trimmed). ConfigError naming data.labels
/// for fewer than two names, an empty name or a duplicate (names compare case-insensitively).
std::vector<std::string> parse_label_names(const std::string& text);

/// Reads a MultiNLI-style pair file. TSV: tab-separated, no quoting, a header naming `sentence1`, `sentence2`
/// and `gold_label` columns anywhere (aliases `premise`, `hypothesis`, `label`); a row with another field count
/// than the header is malformed. JSON lines: one object per line with the same fields (a label may also be an
/// integer class id, -1 meaning unlabeled). Auto: by extension (.jsonl/.json/.ndjson vs .tsv/.txt), else by the
/// first character. Gold labels match `label_names` case-insensitively; "-", empty or unknown ones count as
/// unlabeled. Blank lines are skipped. Malformed and unlabeled rows are counted in `report` and logged; DataError
/// naming the file (and the line of the first problem) only when the file is unreadable or nothing is kept.
std::vector<SentencePair> read_pair_file(const std::string& path, PairFormat format,
                                         const std::vector<std::string>& label_names, PairFileReport& report);

/// A permutation of [0, n) drawn from `seed` (the trainer passes mix_seed(run seed, epoch)).
std::vector<std::int64_t> epoch_order(std::int64_t n, std::uint64_t seed);

/// Builds the dataset of a resolved `data` config section whose source is a classification one ("entailment":
/// the synthetic task of synthetic_entailment.h; "pairs": train/val(/test) files; see data_schema()). Throws
/// DataError naming the file (and line) for unreadable or empty files, ConfigError naming the key for
/// inconsistent options.
std::unique_ptr<ClassificationDataset> make_classification_dataset(const nlohmann::json& data);

}  // namespace routelab
