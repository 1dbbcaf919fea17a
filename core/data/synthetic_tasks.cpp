// Copy and sort example generation, batches with a source-masked loss, and the task tokenizer.
#include "core/data/synthetic_tasks.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <random>

#include "core/data/detail.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

using detail::uniform_below;
using detail::with_commas;

/// `count` sequences [BOS] src [SEP] tgt [EOS], src uniform over the symbols, tgt = src or sorted src.
std::vector<std::int64_t> generate(const SyntheticTaskOptions& o, const TaskTokenizer& tok, std::int64_t count,
                                   std::uint64_t seed) {
  const std::int64_t L = o.length;
  const std::int64_t S = 2 * L + 3;
  std::vector<std::int64_t> out(static_cast<std::size_t>(count * S));
  std::mt19937_64 gen(seed);
  for (std::int64_t e = 0; e < count; ++e) {
    std::int64_t* seq = out.data() + e * S;
    std::int64_t* src = seq + 1;
    std::int64_t* tgt = seq + L + 2;
    seq[0] = tok.bos_id();
    for (std::int64_t i = 0; i < L; ++i) src[i] = static_cast<std::int64_t>(uniform_below(gen, o.vocab));
    seq[L + 1] = tok.sep_id();
    std::copy(src, src + L, tgt);
    if (o.task == SyntheticTask::Sort) std::sort(tgt, tgt + L);
    seq[S - 1] = tok.eos_id();
  }
  return out;
}

}  // namespace

// ---- Task tokenizer -----------------------------------------------------------------------------------------

TaskTokenizer::TaskTokenizer(std::int64_t symbols) : symbols_(symbols) {
  if (symbols < 1) throw DataError("task tokenizer: needs at least one symbol, got " + std::to_string(symbols));
}

std::vector<std::int64_t> TaskTokenizer::encode(std::string_view text) const {
  std::vector<std::int64_t> ids;
  std::size_t i = 0;
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (i < text.size()) {
    if (is_space(text[i])) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && !is_space(text[end])) ++end;
    const std::string_view word = text.substr(i, end - i);
    i = end;
    if (word == "<bos>") {
      ids.push_back(bos_id());
    } else if (word == "<sep>") {
      ids.push_back(sep_id());
    } else if (word == "<eos>") {
      ids.push_back(eos_id());
    } else {
      std::int64_t value = -1;
      auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
      if (ec != std::errc() || ptr != word.data() + word.size() || value < 0 || value >= symbols_) {
        throw DataError("task tokenizer: '" + std::string(word) + "' is not a symbol 0.." +
                        std::to_string(symbols_ - 1) + " nor <bos>, <sep> or <eos>");
      }
      ids.push_back(value);
    }
  }
  return ids;
}

std::string TaskTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ' ';
    out += token_text(ids[i]);
  }
  return out;
}

std::string TaskTokenizer::token_text(std::int64_t id) const {
  if (id == bos_id()) return "<bos>";
  if (id == sep_id()) return "<sep>";
  if (id == eos_id()) return "<eos>";
  if (id < 0 || id > eos_id()) {
    throw DataError("task tokenizer: token id " + std::to_string(id) + " is outside its vocabulary of " +
                    std::to_string(vocab_size()));
  }
  return std::to_string(id);
}

nlohmann::json TaskTokenizer::to_json() const { return {{"kind", "task"}, {"symbols", symbols_}}; }

// ---- Dataset ------------------------------------------------------------------------------------------------

SyntheticTaskDataset::SyntheticTaskDataset(const SyntheticTaskOptions& options)
    : options_(options), tokenizer_(options.vocab) {
  if (options.length < 1) throw DataError("synthetic task: the length must be positive");
  if (options.train_examples < 1 || options.eval_examples < 1) {
    throw DataError("synthetic task: every split needs at least one example");
  }
  sequences_[split_index(Split::Train)] = generate(options_, tokenizer_, options_.train_examples, options_.seed);
  sequences_[split_index(Split::Val)] = generate(options_, tokenizer_, options_.eval_examples, options_.seed + 1);
  sequences_[split_index(Split::Test)] = generate(options_, tokenizer_, options_.eval_examples, options_.seed + 2);
}

std::string SyntheticTaskDataset::describe() const {
  const char* name = options_.task == SyntheticTask::Copy ? "copy" : "sort";
  return std::string(name) + " task: " + std::to_string(options_.length) + " symbols of " +
         std::to_string(options_.vocab) + " (+ bos/sep/eos), train/val/test " + with_commas(examples(Split::Train)) +
         "/" + with_commas(examples(Split::Val)) + "/" + with_commas(examples(Split::Test)) +
         " examples, context " + std::to_string(context());
}

const std::vector<std::int64_t>& SyntheticTaskDataset::sequences(Split split) const {
  return sequences_[split_index(split)];
}

std::int64_t SyntheticTaskDataset::examples(Split split) const {
  return static_cast<std::int64_t>(sequences(split).size()) / sequence_length();
}

std::vector<std::int64_t> SyntheticTaskDataset::example(Split split, std::int64_t index) const {
  if (index < 0 || index >= examples(split)) {
    throw DataError("synthetic task: example " + std::to_string(index) + " is outside the " + to_string(split) +
                    " split");
  }
  const auto begin = sequences(split).begin() + index * sequence_length();
  return {begin, begin + sequence_length()};
}

std::int64_t SyntheticTaskDataset::split_tokens(Split split) const { return examples(split) * context(); }

Batch SyntheticTaskDataset::sample(Split split, std::int64_t batch_size, std::uint64_t seed) const {
  if (batch_size < 1) {
    throw DataError("synthetic task: the batch size must be positive, got " + std::to_string(batch_size));
  }
  const std::int64_t S = sequence_length();
  const std::int64_t T = context();
  const std::int64_t L = options_.length;
  const auto& source = sequences(split);
  const auto n = static_cast<std::uint64_t>(examples(split));

  std::mt19937_64 gen(seed);
  torch::Tensor rows = torch::empty({batch_size, S}, torch::kLong);  // (B, 2L+3)
  std::int64_t* dst = rows.data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < batch_size; ++b) {
    const auto e = static_cast<std::int64_t>(uniform_below(gen, n));
    std::memcpy(dst + b * S, source.data() + e * S, sizeof(std::int64_t) * S);
  }
  Batch batch;
  batch.input = rows.slice(1, 0, T).contiguous();   // (B, T)
  batch.target = rows.slice(1, 1, S).contiguous();  // (B, T)
  // Target position t holds sequence token t+1: the tgt tokens and EOS are sequence positions L+2 .. 2L+2.
  batch.loss_mask = torch::zeros({batch_size, T}, torch::kFloat);  // (B, T)
  batch.loss_mask.slice(1, L + 1, T).fill_(1.0);
  return batch;
}

std::vector<std::int64_t> SyntheticTaskDataset::probe_tokens() const {
  std::vector<std::int64_t> first = example(Split::Val, 0);
  first.pop_back();
  return first;
}

}  // namespace routelab
