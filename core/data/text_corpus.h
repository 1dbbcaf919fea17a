// A UTF-8 text file as a language-modelling dataset: split by position in code points into train/val/test,
// tokenized once (char, byte or SentencePiece subwords), batches of random windows of context() + 1 tokens.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/data/tokenizer.h"

namespace routelab {

struct TextCorpusOptions {
  std::string path;               ///< the UTF-8 text file
  std::string tokenizer = "char"; ///< "char" (vocabulary of the train split), "byte" or "sentencepiece"
  std::string tokenizer_model;    ///< the SentencePiece .model file ("sentencepiece")
  /// A run's stored tokenizer (Tokenizer::to_json), used instead of building one from the corpus or the model
  /// file, so a stored run tokenizes as it trained; null for a new run.
  nlohmann::json stored_tokenizer;
  double train_fraction = 0.8;    ///< first part of the text, in code points
  double val_fraction = 0.1;      ///< next part; the rest is the test split
  std::int64_t context = 128;     ///< T
  std::int64_t probe_chars = 96;  ///< characters of the probe text
};

class TextCorpusDataset final : public LmDataset {
 public:
  /// Reads and tokenizes the file. Throws DataError naming the file when it cannot be read, is empty, is not
  /// valid UTF-8, or when its train or val split is shorter than one window of context + 1 tokens.
  explicit TextCorpusDataset(const TextCorpusOptions& options);

  std::string describe() const override;
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  std::int64_t context() const override { return options_.context; }
  /// B windows with starts uniform in [0, n - (T + 1)]; target is input shifted by one; no loss mask.
  Batch sample(Split split, std::int64_t batch_size, std::uint64_t seed) const override;
  std::optional<Batch> windows(Split split, std::int64_t first, std::int64_t count) const override;
  std::int64_t split_tokens(Split split) const override;
  double chars_per_token(Split split) const override;
  /// The first probe_chars characters of the val split after its first newline (from its start when there is
  /// no newline or too little text after it).
  std::vector<std::int64_t> probe_tokens() const override { return probe_; }

  std::int64_t total_chars() const { return total_chars_; }
  std::int64_t split_chars(Split split) const;
  /// The token stream of a split.
  const std::vector<std::int64_t>& tokens(Split split) const;

 private:
  [[noreturn]] void throw_too_short(Split split) const;

  TextCorpusOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::int64_t total_chars_ = 0;
  std::array<std::vector<std::int64_t>, 3> tokens_;  ///< per split
  std::array<std::int64_t, 3> chars_{};              ///< code points per split
  std::vector<std::int64_t> probe_;
};

}  // namespace routelab
