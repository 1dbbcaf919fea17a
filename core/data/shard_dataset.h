// A language-modelling dataset over token shards on disk (token_shards.h), memory-mapped: memory use does not grow
// with the corpus. Batches are random windows drawn as TextCorpusDataset draws them (a pure function of the split,
// batch size and seed, so resume is exact), reading across shard ends.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/data/dataset.h"
#include "core/data/token_shards.h"

namespace routelab {

struct ShardDatasetOptions {
  std::string path;                 ///< the shard folder (or RouteLab's manifest)
  std::int64_t context = 128;
  std::int64_t probe_chars = 96;
  /// Shards without RouteLab's manifest: the tokenizer they were made with ("sentencepiece" with tokenizer_model),
  /// or else `vocab` ids without a text form.
  std::string tokenizer, tokenizer_model;
  std::int64_t vocab = 0;
  nlohmann::json stored_tokenizer;  ///< a stored run's tokenizer; null for a new run
};

class ShardDataset final : public LmDataset {
 public:
  /// Maps every shard. DataError naming the folder or file for a missing or damaged shard, a split shorter than one
  /// window, or token ids beyond the vocabulary (in every batch, and over the validation shards of shards made
  /// elsewhere at start-up);
  /// ConfigError naming data.shard_vocab when foreign shards come with neither a tokenizer nor a vocabulary size.
  explicit ShardDataset(const ShardDatasetOptions& options);

  std::string describe() const override;
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  std::int64_t context() const override { return options_.context; }
  Batch sample(Split split, std::int64_t batch_size, std::uint64_t seed) const override;
  std::optional<Batch> windows(Split split, std::int64_t first, std::int64_t count) const override;
  /// Shards hold a training and a validation split; the test split is empty.
  std::int64_t split_tokens(Split split) const override;
  /// From the manifest's character counts; estimated by decoding the first validation tokens for foreign shards
  /// with a tokenizer; 1 (bits per token) for ids without a text form.
  double chars_per_token(Split split) const override;
  std::vector<std::int64_t> probe_tokens() const override { return probe_; }

  const std::string& layout() const { return folder_.layout; }
  std::size_t shards(Split split) const;

 private:
  const ShardStream& stream(Split split) const;
  void check_ids(const torch::Tensor& rows, Split split) const;
  Batch to_batch(torch::Tensor rows) const;

  ShardDatasetOptions options_;
  ShardFolder folder_;
  ShardStream train_, val_;
  std::unique_ptr<Tokenizer> tokenizer_;
  double chars_per_token_train_ = 1, chars_per_token_val_ = 1;
  std::vector<std::int64_t> probe_;
};

}  // namespace routelab
