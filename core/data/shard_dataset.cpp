// Shard datasets: the folder's tokenizer (manifest, config or stored run), the mapped splits, random windows
// across shard ends, and the checks that keep foreign token ids inside the vocabulary.
#include "core/data/shard_dataset.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/data/detail.h"
#include "core/data/sentencepiece_tokenizer.h"
#include "core/util/errors.h"
#include "core/util/json_fields.h"
#include "core/util/logging.h"
#include "core/util/utf8.h"

namespace routelab {

ShardDataset::ShardDataset(const ShardDatasetOptions& options) : options_(options) {
  std::error_code ec;
  if (!std::filesystem::exists(options_.path, ec))
    throw DataError("data.path: " + options_.path + ": no such folder; `routelab-cli prepare --corpus TEXT --out " +
                    options_.path + "` makes one (README: the seeds' regime)");
  try {
    folder_ = find_shards(options_.path);
  } catch (const DataError& e) {
    throw DataError(std::string("data.path: ") + e.what());
  }
  for (const auto& file : folder_.train) train_.add(MappedShard(file, folder_.file_layout));
  for (const auto& file : folder_.val) val_.add(MappedShard(file, folder_.file_layout));
  const auto& manifest = folder_.manifest;
  if (!options_.stored_tokenizer.is_null()) {
    tokenizer_ = Tokenizer::from_json(options_.stored_tokenizer);
  } else if (!manifest.is_null()) {
    try {
      tokenizer_ = Tokenizer::from_json(manifest.at("tokenizer"));
    } catch (const nlohmann::json::exception& e) {
      throw DataError(options_.path + ": the manifest has no tokenizer (" + e.what() + ")");
    }
  } else if (options_.tokenizer == "sentencepiece" && !options_.tokenizer_model.empty()) {
    try {
      tokenizer_ = SentencePieceTokenizer::from_file(options_.tokenizer_model);
    } catch (const DataError& e) {
      throw DataError(std::string("data.tokenizer_model: ") + e.what());
    }
  } else if (options_.vocab > 0) {
    tokenizer_ = std::make_unique<IdTokenizer>(options_.vocab);
  } else {
    throw ConfigError("data.shard_vocab: " + options_.path + " holds " + folder_.layout +
                      " shards without a tokenizer: give their vocabulary size (50257 for GPT-2's) or "
                      "data.tokenizer=sentencepiece with data.tokenizer_model");
  }
  // Shards made elsewhere are scanned once (their validation split) for ids their stated vocabulary cannot hold;
  // RouteLab's were written by the manifest's tokenizer. Every batch is checked either way.
  const std::int64_t vocab = tokenizer_->vocab_size();
  for (std::size_t i = 0; manifest.is_null() && i < val_.shards(); ++i) {
    const auto& shard = val_.shard(i);
    if (const auto top = shard.max_token(); top >= vocab)
      throw DataError(shard.path() + ": token id " + std::to_string(top) + " is outside the vocabulary of " +
                      std::to_string(vocab) + " (" + tokenizer_->kind() + " tokenizer); wrong data.shard_vocab or "
                      "tokenizer?");
  }
  for (Split split : {Split::Train, Split::Val})
    if (split_tokens(split) < options_.context + 1)
      throw DataError(options_.path + ": the " + to_string(split) + " split has " +
                      std::to_string(split_tokens(split)) + " tokens, fewer than one context window (data.context + "
                      "1 = " + std::to_string(options_.context + 1) + ")");

  // Characters per token: counted when RouteLab prepared the shards (a manifest's "chars": {"train": n, "val": n}),
  // else (or where those are not numbers) estimated on the validation split.
  const auto chars = manifest.is_object() ? manifest.value("chars", nlohmann::json()) : nlohmann::json();
  const double train_chars = json_number(chars, "train", -1), val_chars = json_number(chars, "val", -1);
  if (train_chars >= 0 && val_chars >= 0) {
    chars_per_token_train_ = train_chars / static_cast<double>(train_.tokens());
    chars_per_token_val_ = val_chars / static_cast<double>(val_.tokens());
  } else if (tokenizer_->kind() != "ids") {
    std::vector<std::int64_t> head(static_cast<std::size_t>(std::min<std::int64_t>(val_.tokens(), 200'000)));
    val_.copy(0, static_cast<std::int64_t>(head.size()), head.data());
    chars_per_token_train_ = chars_per_token_val_ =
        static_cast<double>(utf8_code_points(tokenizer_->decode(head))) / static_cast<double>(head.size());
  }
  if (!(chars_per_token_train_ > 0)) chars_per_token_train_ = 1;
  if (!(chars_per_token_val_ > 0)) chars_per_token_val_ = 1;

  // The probe: the first validation tokens covering about probe_chars characters.
  const auto wanted = static_cast<std::int64_t>(static_cast<double>(options_.probe_chars) / chars_per_token_val_);
  const auto probe_tokens = std::min(std::max<std::int64_t>(wanted, 8), std::min(options_.context, val_.tokens()));
  probe_.resize(static_cast<std::size_t>(probe_tokens));
  val_.copy(0, probe_tokens, probe_.data());
  logger("data")->info("mapped shards {}: {}", options_.path, describe());
}

std::string ShardDataset::describe() const {
  return std::filesystem::path(options_.path).filename().string() + ": " + folder_.layout + " shards (" +
         std::to_string(train_.shards()) + " train, " + std::to_string(val_.shards()) + " val), " +
         tokenizer_->kind() + " tokenizer (" + std::to_string(tokenizer_->vocab_size()) + " symbols), train/val " +
         detail::with_commas(train_.tokens()) + "/" + detail::with_commas(val_.tokens()) + " tokens, memory-mapped";
}

std::size_t ShardDataset::shards(Split split) const {
  return split == Split::Test ? 0 : stream(split).shards();
}

const ShardStream& ShardDataset::stream(Split split) const {
  if (split == Split::Test)
    throw DataError(options_.path + ": token shards hold a training and a validation split, no test split");
  return split == Split::Train ? train_ : val_;
}

std::int64_t ShardDataset::split_tokens(Split split) const {
  return split == Split::Test ? 0 : stream(split).tokens();
}

double ShardDataset::chars_per_token(Split split) const {
  return split == Split::Train ? chars_per_token_train_ : chars_per_token_val_;
}

void ShardDataset::check_ids(const torch::Tensor& rows, Split split) const {
  const auto top = rows.max().item<std::int64_t>();
  if (top >= tokenizer_->vocab_size())
    throw DataError(options_.path + ": the " + to_string(split) + " split holds token id " + std::to_string(top) +
                    ", outside the vocabulary of " + std::to_string(tokenizer_->vocab_size()));
}

Batch ShardDataset::to_batch(torch::Tensor rows) const {
  const std::int64_t T = options_.context;
  Batch batch;
  batch.input = rows.slice(1, 0, T).contiguous();       // (B, T)
  batch.target = rows.slice(1, 1, T + 1).contiguous();  // (B, T)
  return batch;
}

Batch ShardDataset::sample(Split split, std::int64_t batch_size, std::uint64_t seed) const {
  if (batch_size < 1)
    throw DataError(options_.path + ": the batch size must be positive, got " + std::to_string(batch_size));
  const auto& tokens = stream(split);
  const std::int64_t T = options_.context, n = tokens.tokens();
  std::mt19937_64 gen(seed);
  torch::Tensor rows = torch::empty({batch_size, T + 1}, torch::kLong);  // (B, T+1)
  std::int64_t* dst = rows.data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < batch_size; ++b) {
    const auto start = static_cast<std::int64_t>(detail::uniform_below(gen, static_cast<std::uint64_t>(n - T)));
    tokens.copy(start, T + 1, dst + b * (T + 1));
  }
  check_ids(rows, split);
  return to_batch(rows);
}

std::optional<Batch> ShardDataset::windows(Split split, std::int64_t first, std::int64_t count) const {
  if (split == Split::Test) return std::nullopt;
  const auto& tokens = stream(split);
  const std::int64_t T = options_.context, n = tokens.tokens();
  const std::int64_t available = n >= T + 1 ? (n - 1) / T : 0;
  const std::int64_t rows_n = std::min(count, available - first);
  if (first < 0 || rows_n <= 0) return std::nullopt;
  torch::Tensor rows = torch::empty({rows_n, T + 1}, torch::kLong);  // (B, T+1)
  std::int64_t* dst = rows.data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < rows_n; ++b) tokens.copy((first + b) * T, T + 1, dst + b * (T + 1));
  check_ids(rows, split);
  return to_batch(rows);
}

}  // namespace routelab
