// Language-modelling datasets: a text corpus with a deterministic split and random-window batches, and the
// TSA synthetic tasks (copy, sort). Batches are a pure function of (split, batch size, seed), so a resumed
// run draws exactly the batches the uninterrupted one would have drawn.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "core/data/tokenizer.h"

namespace routelab {

enum class Split { Train, Val, Test };
std::string to_string(Split split);
/// 0, 1, 2: a split's slot in per-split arrays.
inline std::size_t split_index(Split split) { return static_cast<std::size_t>(split); }

struct Batch {
  torch::Tensor input;      ///< (B, T) int64 token ids
  torch::Tensor target;     ///< (B, T) int64 next-token ids
  torch::Tensor loss_mask;  ///< (B, T) float 1/0, or undefined when every position counts
};

class LmDataset {
 public:
  virtual ~LmDataset() = default;
  virtual std::string describe() const = 0;              ///< e.g. "kjv: 4.3M chars, char tokenizer (76)"
  virtual const Tokenizer& tokenizer() const = 0;
  virtual std::int64_t context() const = 0;              ///< T of every batch
  /// B sequences of the split, drawn at random from a generator seeded with `seed`. For a corpus: random
  /// windows of context()+1 tokens; for a synthetic task: random examples of the split.
  virtual Batch sample(Split split, std::int64_t batch_size, std::uint64_t seed) const = 0;
  /// Strided evaluation: windows `first` .. `first + count - 1` of context()+1 tokens, window w starting at token
  /// w x context() (consecutive, non-overlapping: every token scored once, nothing drawn at random); fewer at the
  /// end of the split, nullopt past it. Datasets of independent examples (synthetic tasks) have no windows.
  virtual std::optional<Batch> windows(Split split, std::int64_t first, std::int64_t count) const {
    return std::nullopt;
  }
  virtual std::int64_t split_tokens(Split split) const = 0;  ///< tokens (corpus) or examples x T (task)
  /// Unicode characters per token in the split (for bits per character); 1 for char-level and tasks.
  virtual double chars_per_token(Split split) const = 0;
  /// A fixed short text (decoded) from the validation split, used for per-token routing views.
  virtual std::vector<std::int64_t> probe_tokens() const = 0;
};

/// Builds the dataset of a resolved `data` config section (see data_schema()). Throws DataError naming the
/// file for an unreadable, empty, non-UTF-8 or too-short corpus, ConfigError for inconsistent options.
/// `stored_tokenizer` (Tokenizer::to_json of a stored run, or null) replaces the tokenizer a corpus would build or
/// load, so a stored run reads its corpus exactly as it did when it trained.
std::unique_ptr<LmDataset> make_dataset(const nlohmann::json& data,
                                        const nlohmann::json& stored_tokenizer = nlohmann::json());

/// The context of the batches make_dataset(data) would give, read from the config alone: data.context for corpora
/// and shards, 2 x task_length + 2 for the synthetic tasks. ConfigError for an unknown source or a missing key.
std::int64_t dataset_context(const nlohmann::json& data);

/// The embedded default corpus: the King James Bible from Debian's bible-kjv, generated once with
/// `bible "Genesis 1:1-Revelation 22:21"` and cached in data_dir()/corpora/kjv.txt. Returns the file path.
std::string default_corpus_path();

}  // namespace routelab
