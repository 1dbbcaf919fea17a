// Text corpus loading (strict UTF-8), the code-point split, one-time tokenization and random-window batches.
#include "core/data/text_corpus.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/data/detail.h"
#include "core/data/sentencepiece_tokenizer.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

namespace fs = std::filesystem;

namespace routelab {

void detail::check_data_file(const std::string& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return;  // opening it names the error
  if (!fs::is_regular_file(status) && !fs::is_directory(status))
    throw DataError(path + ": not a regular file (a device, pipe or socket): give a text file");
  if (!fs::is_regular_file(status)) return;
  const auto bytes = fs::file_size(path, ec);
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (ec || pages <= 0 || page <= 0) return;
  const auto half = static_cast<std::uintmax_t>(pages) * static_cast<std::uintmax_t>(page) / 2;
  if (bytes > half)
    throw DataError(path + ": " + std::to_string(bytes >> 20) + " MiB, more than half of this machine's memory (" +
                    std::to_string((2 * half) >> 20) + " MiB); a corpus is read whole: split it or use a smaller one");
}

namespace {

using detail::uniform_below;
using detail::with_commas;

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw DataError(path + ": cannot open (" + std::strerror(EISDIR) + ")");
  detail::check_data_file(path);
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) throw DataError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(file, &std::fclose);
  std::string bytes;
  if (auto size = fs::file_size(path, ec); !ec) bytes.reserve(size);
  char buffer[1 << 16];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, file)) > 0) bytes.append(buffer, got);
  if (std::ferror(file)) throw DataError(path + ": cannot read (" + std::strerror(errno) + ")");
  return bytes;
}

bool is_char_start(char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }

/// Code points of valid UTF-8: the bytes that do not continue a sequence.
std::int64_t count_chars(std::string_view text) {
  std::int64_t n = 0;
  for (char c : text) n += is_char_start(c);
  return n;
}

/// Byte offset of code point `index` of valid UTF-8 (text.size() when index is the number of code points).
std::size_t byte_offset(std::string_view text, std::int64_t index) {
  std::int64_t seen = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (is_char_start(text[i])) {
      if (seen == index) return i;
      ++seen;
    }
  }
  return text.size();
}

/// 3468043 -> "3.47M", 433505 -> "434K", 5120 -> "5.1K".
std::string compact(std::int64_t n) {
  char buf[32];
  const double x = static_cast<double>(n);
  if (n < 1000) return std::to_string(n);
  if (n < 10'000) std::snprintf(buf, sizeof buf, "%.1fK", x / 1e3);
  else if (n < 1'000'000) std::snprintf(buf, sizeof buf, "%.0fK", x / 1e3);
  else if (n < 1'000'000'000) std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else std::snprintf(buf, sizeof buf, "%.2fG", x / 1e9);
  return buf;
}

}  // namespace

TextCorpusDataset::TextCorpusDataset(const TextCorpusOptions& options) : options_(options) {
  const std::string& path = options_.path;
  const std::string text = read_file(path);
  if (text.empty()) throw DataError(path + ": the file is empty");
  if (auto bad = find_invalid_utf8(text); bad != std::string_view::npos) {
    throw DataError(path + ": not valid UTF-8 (first invalid byte at offset " + std::to_string(bad) + ")");
  }

  // Split by position in code points, so no character is cut in two.
  const std::string_view all(text);
  total_chars_ = count_chars(all);
  const auto train_chars = static_cast<std::int64_t>(std::floor(total_chars_ * options_.train_fraction));
  const auto val_chars = static_cast<std::int64_t>(std::floor(total_chars_ * options_.val_fraction));
  const std::size_t val_begin = byte_offset(all, train_chars);
  const std::size_t test_begin = val_begin + byte_offset(all.substr(val_begin), val_chars);
  const std::array<std::string_view, 3> parts = {all.substr(0, val_begin),
                                                 all.substr(val_begin, test_begin - val_begin), all.substr(test_begin)};
  chars_ = {train_chars, val_chars, total_chars_ - train_chars - val_chars};

  if (!options_.stored_tokenizer.is_null()) {
    tokenizer_ = Tokenizer::from_json(options_.stored_tokenizer);
    if (tokenizer_->kind() != options_.tokenizer)
      throw DataError(path + ": the stored tokenizer is " + tokenizer_->kind() + ", the config's data.tokenizer " +
                      options_.tokenizer);
  } else if (options_.tokenizer == "char") {
    tokenizer_ = std::make_unique<CharTokenizer>(CharTokenizer::build(parts[0]));
  } else if (options_.tokenizer == "byte") {
    tokenizer_ = std::make_unique<ByteTokenizer>();
  } else if (options_.tokenizer == "sentencepiece") {
    try {
      tokenizer_ = SentencePieceTokenizer::from_file(options_.tokenizer_model);
    } catch (const DataError& e) {
      throw DataError(std::string("data.tokenizer_model: ") + e.what());
    }
  } else {
    throw DataError(path + ": unknown tokenizer '" + options_.tokenizer + "' (expected char, byte or sentencepiece)");
  }
  for (std::size_t s = 0; s < parts.size(); ++s) tokens_[s] = tokenizer_->encode(parts[s]);
  for (Split split : {Split::Train, Split::Val}) {
    if (split_tokens(split) < options_.context + 1) throw_too_short(split);
  }

  // Probe: a line start in the val split, unless too little text follows its first newline.
  const std::string_view val = parts[1];
  std::size_t probe_begin = val.find('\n');
  probe_begin = probe_begin == std::string_view::npos ? 0 : probe_begin + 1;
  if (count_chars(val.substr(probe_begin)) < options_.probe_chars) probe_begin = 0;
  const std::string_view after = val.substr(probe_begin);
  probe_ = tokenizer_->encode(after.substr(0, byte_offset(after, options_.probe_chars)));

  logger("data")->info("loaded corpus {}: {}", path, describe());
}

void TextCorpusDataset::throw_too_short(Split split) const {
  const std::int64_t window = options_.context + 1;
  throw DataError(options_.path + ": the " + to_string(split) + " split has " + std::to_string(split_tokens(split)) +
                  " tokens, fewer than one context window (data.context + 1 = " + std::to_string(window) +
                  "); use a longer file or a smaller data.context");
}

std::string TextCorpusDataset::describe() const {
  return fs::path(options_.path).filename().string() + ": " + with_commas(total_chars_) + " chars, " +
         tokenizer_->kind() + " tokenizer (" + std::to_string(tokenizer_->vocab_size()) + " symbols), " +
         "train/val/test " + compact(split_tokens(Split::Train)) + "/" + compact(split_tokens(Split::Val)) + "/" +
         compact(split_tokens(Split::Test)) + " tokens";
}

const std::vector<std::int64_t>& TextCorpusDataset::tokens(Split split) const { return tokens_[split_index(split)]; }

std::int64_t TextCorpusDataset::split_tokens(Split split) const {
  return static_cast<std::int64_t>(tokens(split).size());
}

std::int64_t TextCorpusDataset::split_chars(Split split) const { return chars_[split_index(split)]; }

double TextCorpusDataset::chars_per_token(Split split) const {
  if (tokenizer_->kind() == "char") return 1.0;  // unknown characters are one token each too
  const std::int64_t tokens = split_tokens(split);
  return tokens == 0 ? 1.0 : static_cast<double>(split_chars(split)) / static_cast<double>(tokens);
}

Batch TextCorpusDataset::sample(Split split, std::int64_t batch_size, std::uint64_t seed) const {
  if (batch_size < 1) {
    throw DataError(options_.path + ": the batch size must be positive, got " + std::to_string(batch_size));
  }
  const std::int64_t T = options_.context;
  const std::vector<std::int64_t>& stream = tokens(split);
  const auto n = static_cast<std::int64_t>(stream.size());
  if (n < T + 1) throw_too_short(split);

  std::mt19937_64 gen(seed);
  torch::Tensor rows = torch::empty({batch_size, T + 1}, torch::kLong);  // (B, T+1)
  std::int64_t* dst = rows.data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < batch_size; ++b) {
    const auto start = static_cast<std::int64_t>(uniform_below(gen, static_cast<std::uint64_t>(n - T)));
    std::memcpy(dst + b * (T + 1), stream.data() + start, sizeof(std::int64_t) * (T + 1));
  }
  Batch batch;
  batch.input = rows.slice(1, 0, T).contiguous();       // (B, T)
  batch.target = rows.slice(1, 1, T + 1).contiguous();  // (B, T)
  return batch;
}

std::optional<Batch> TextCorpusDataset::windows(Split split, std::int64_t first, std::int64_t count) const {
  const std::int64_t T = options_.context;
  const std::vector<std::int64_t>& stream = tokens(split);
  const auto n = static_cast<std::int64_t>(stream.size());
  // Window w needs tokens w*T .. w*T + T (its last target).
  const std::int64_t available = n >= T + 1 ? (n - 1) / T : 0;
  const std::int64_t rows = std::min(count, available - first);
  if (first < 0 || rows <= 0) return std::nullopt;
  torch::Tensor data = torch::empty({rows, T + 1}, torch::kLong);  // (B, T+1)
  std::int64_t* dst = data.data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < rows; ++b)
    std::memcpy(dst + b * (T + 1), stream.data() + (first + b) * T, sizeof(std::int64_t) * (T + 1));
  Batch batch;
  batch.input = data.slice(1, 0, T).contiguous();       // (B, T)
  batch.target = data.slice(1, 1, T + 1).contiguous();  // (B, T)
  return batch;
}

}  // namespace routelab
