// The synthetic copy and sort tasks of the TSA paper (TSA, §3.1): sequences [BOS] src [SEP] tgt [EOS] over
// V symbols, loss masked on the source, with fixed train/val/test example sets generated from a seed.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/data/tokenizer.h"

namespace routelab {

/// Symbols 0..V-1 shown as their numbers, then <bos> = V, <sep> = V+1, <eos> = V+2.
class TaskTokenizer final : public Tokenizer {
 public:
  explicit TaskTokenizer(std::int64_t symbols);  ///< symbols >= 1

  std::string kind() const override { return "task"; }
  std::int64_t vocab_size() const override { return symbols_ + 3; }
  std::int64_t symbols() const { return symbols_; }
  std::int64_t bos_id() const { return symbols_; }
  std::int64_t sep_id() const { return symbols_ + 1; }
  std::int64_t eos_id() const { return symbols_ + 2; }
  std::int64_t prefix_id() const override { return bos_id(); }
  /// Whitespace-separated tokens "<bos>", "<sep>", "<eos>" or a symbol number; DataError on anything else.
  std::vector<std::int64_t> encode(std::string_view text) const override;
  /// The token texts joined with single spaces.
  std::string decode(const std::vector<std::int64_t>& ids) const override;
  std::string token_text(std::int64_t id) const override;
  nlohmann::json to_json() const override;

 private:
  std::int64_t symbols_;
};

enum class SyntheticTask { Copy, Sort };

struct SyntheticTaskOptions {
  SyntheticTask task = SyntheticTask::Copy;
  std::int64_t length = 10;           ///< L: source symbols per example
  std::int64_t vocab = 32;            ///< V: distinct symbols
  std::int64_t train_examples = 10000;
  std::int64_t eval_examples = 1000;  ///< each of val and test
  std::uint64_t seed = 1234;          ///< train from seed, val from seed + 1, test from seed + 2
};

class SyntheticTaskDataset final : public LmDataset {
 public:
  explicit SyntheticTaskDataset(const SyntheticTaskOptions& options);

  std::string describe() const override;
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  /// 2L + 2: the example [BOS] src [SEP] tgt [EOS] without its last token (input) or first (target).
  static std::int64_t context_of(std::int64_t length) { return 2 * length + 2; }
  std::int64_t context() const override { return context_of(options_.length); }
  /// B examples drawn uniformly with replacement; loss_mask is 1 where the target is a tgt token or EOS.
  Batch sample(Split split, std::int64_t batch_size, std::uint64_t seed) const override;
  std::int64_t split_tokens(Split split) const override;
  double chars_per_token(Split split) const override { return 1.0; }
  /// The input part of the first validation example.
  std::vector<std::int64_t> probe_tokens() const override;

  std::int64_t examples(Split split) const;
  /// The full sequence (2L + 3 tokens) of one example of the split.
  std::vector<std::int64_t> example(Split split, std::int64_t index) const;

 private:
  std::int64_t sequence_length() const { return 2 * options_.length + 3; }
  const std::vector<std::int64_t>& sequences(Split split) const;

  SyntheticTaskOptions options_;
  TaskTokenizer tokenizer_;
  std::array<std::vector<std::int64_t>, 3> sequences_;  ///< per split: examples x (2L + 3), row-major
};

}  // namespace routelab
