// Sentence-pair classification data: MultiNLI-style TSV / JSON-lines readers, label mapping, the epoch order,
// and the dataset (pair files or the synthetic entailment task) encoded once into `[CLS] a [SEP] b [SEP]` rows.
#include "core/data/classification.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/data/detail.h"
#include "core/data/synthetic_entailment.h"
#include "core/data/tokenizer.h"
#include "core/data/word_tokenizer.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

namespace fs = std::filesystem;

namespace routelab {
namespace {

constexpr int kLoggedProblems = 5;  ///< per file, problems logged at warn level; the rest at debug

using detail::get;
using detail::require;

std::string lower_ascii(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

std::vector<std::string_view> split_tabs(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t begin = 0;
  while (true) {
    const auto tab = line.find('\t', begin);
    fields.push_back(line.substr(begin, tab == std::string_view::npos ? std::string_view::npos : tab - begin));
    if (tab == std::string_view::npos) break;
    begin = tab + 1;
  }
  return fields;
}

/// Counts and logs what a reader drops; remembers the first problem for the "nothing left" error.
class ProblemLog {
 public:
  ProblemLog(const std::string& path, PairFileReport& report) : path_(path), report_(report) {}

  void malformed(std::int64_t line, const std::string& why) {
    ++report_.malformed;
    note(line, why);
  }
  void unlabeled(std::int64_t line, const std::string& why) {
    ++report_.unlabeled;
    note(line, why);
  }
  [[noreturn]] void nothing_left() const {
    std::string message = path_;
    if (first_line_ > 0) message += ":" + std::to_string(first_line_);
    message += ": no usable sentence pairs in " + std::to_string(report_.rows) + " data rows (" +
               std::to_string(report_.malformed) + " malformed, " + std::to_string(report_.unlabeled) +
               " unlabeled)";
    if (first_line_ > 0) message += "; first problem: " + first_why_;
    throw DataError(message);
  }

 private:
  void note(std::int64_t line, const std::string& why) {
    if (first_line_ == 0) {
      first_line_ = line;
      first_why_ = why;
    }
    const auto level = ++logged_ <= kLoggedProblems ? spdlog::level::warn : spdlog::level::debug;
    logger("data")->log(level, "{}:{}: {}, row skipped", path_, line, why);
  }

  std::string path_;
  PairFileReport& report_;
  std::int64_t first_line_ = 0;
  std::string first_why_;
  int logged_ = 0;
};

/// The class id of a gold label text, or -1 ("-", empty or not a label name).
std::int64_t label_id(const std::string& text, const std::vector<std::string>& lowered_names) {
  const auto it = std::find(lowered_names.begin(), lowered_names.end(), lower_ascii(trim(text)));
  return it == lowered_names.end() ? -1 : static_cast<std::int64_t>(it - lowered_names.begin());
}

/// Index of the first header column named one of `names` (in order of preference), or -1.
std::int64_t find_column(const std::vector<std::string>& header, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it != header.end()) return static_cast<std::int64_t>(it - header.begin());
  }
  return -1;
}

/// Lines of `text` with their 1-based numbers, CR stripped; calls f(number, line) for each non-blank line.
template <typename F>
void for_each_line(std::string_view text, F&& f) {
  std::int64_t number = 0;
  std::size_t begin = 0;
  while (begin < text.size()) {
    auto end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    ++number;
    begin = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (!f(number, line)) return;
  }
}

void read_tsv(const std::string& path, std::string_view text, const std::vector<std::string>& lowered_names,
              PairFileReport& report, ProblemLog& problems, std::vector<SentencePair>& out) {
  std::vector<std::string> header;
  std::int64_t premise_col = -1, hypothesis_col = -1, label_col = -1;
  for_each_line(text, [&](std::int64_t number, std::string_view line) {
    if (header.empty()) {
      if (find_invalid_utf8(line) != std::string_view::npos)
        throw DataError(path + ":" + std::to_string(number) + ": the TSV header is not valid UTF-8");
      for (auto field : split_tabs(line)) header.push_back(lower_ascii(trim(field)));
      premise_col = find_column(header, {"sentence1", "premise"});
      hypothesis_col = find_column(header, {"sentence2", "hypothesis"});
      label_col = find_column(header, {"gold_label", "label"});
      const std::pair<std::int64_t, const char*> required[] = {
          {premise_col, "sentence1"}, {hypothesis_col, "sentence2"}, {label_col, "gold_label"}};
      for (const auto& [column, name] : required) {
        if (column >= 0) continue;
        std::string found;
        for (const auto& h : header) found += (found.empty() ? "" : ", ") + h;
        throw DataError(path + ":" + std::to_string(number) + ": the TSV header has no '" + name +
                        "' column (columns: " + found + ")");
      }
      return true;
    }
    ++report.rows;
    if (find_invalid_utf8(line) != std::string_view::npos) {
      problems.malformed(number, "invalid UTF-8");
      return true;
    }
    const auto fields = split_tabs(line);
    if (fields.size() != header.size()) {
      problems.malformed(number, std::to_string(fields.size()) + " fields where the header has " +
                                     std::to_string(header.size()));
      return true;
    }
    SentencePair pair{trim(fields[static_cast<std::size_t>(premise_col)]),
                      trim(fields[static_cast<std::size_t>(hypothesis_col)]), 0};
    if (pair.premise.empty() || pair.hypothesis.empty()) {
      problems.malformed(number, pair.premise.empty() ? "empty sentence1" : "empty sentence2");
      return true;
    }
    const std::string label = trim(fields[static_cast<std::size_t>(label_col)]);
    pair.label = label_id(label, lowered_names);
    if (pair.label < 0) {
      problems.unlabeled(number, label.empty() || label == "-" ? "no gold label" : "unknown label '" + label + "'");
      return true;
    }
    out.push_back(std::move(pair));
    return true;
  });
  if (header.empty()) throw DataError(path + ": empty file (expected a TSV header and sentence pairs)");
}

/// A string field under one of two names; nullptr when missing or not a string.
const nlohmann::json* string_field(const nlohmann::json& row, const char* name, const char* alias) {
  auto it = row.find(name);
  if (it == row.end()) it = row.find(alias);
  return it != row.end() && it->is_string() ? &*it : nullptr;
}

void read_jsonl(std::string_view text, const std::vector<std::string>& lowered_names, PairFileReport& report,
                ProblemLog& problems, std::vector<SentencePair>& out) {
  for_each_line(text, [&](std::int64_t number, std::string_view line) {
    ++report.rows;
    if (find_invalid_utf8(line) != std::string_view::npos) {
      problems.malformed(number, "invalid UTF-8");
      return true;
    }
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error&) {
      problems.malformed(number, "invalid JSON");
      return true;
    }
    if (!row.is_object()) {
      problems.malformed(number, "not a JSON object");
      return true;
    }
    const auto* premise = string_field(row, "sentence1", "premise");
    const auto* hypothesis = string_field(row, "sentence2", "hypothesis");
    if (!premise || !hypothesis) {
      problems.malformed(number, !premise ? "no string field sentence1" : "no string field sentence2");
      return true;
    }
    SentencePair pair{trim(premise->get<std::string>()), trim(hypothesis->get<std::string>()), -1};
    if (pair.premise.empty() || pair.hypothesis.empty()) {
      problems.malformed(number, pair.premise.empty() ? "empty sentence1" : "empty sentence2");
      return true;
    }
    auto label = row.find("gold_label");
    if (label == row.end()) label = row.find("label");
    if (label == row.end()) {
      problems.malformed(number, "no field gold_label");
      return true;
    }
    std::string shown;
    if (label->is_string()) {
      shown = label->get<std::string>();
      pair.label = label_id(shown, lowered_names);
    } else if (label->is_number_integer()) {
      const auto id = label->get<std::int64_t>();
      shown = std::to_string(id);
      if (id >= 0 && id < static_cast<std::int64_t>(lowered_names.size())) pair.label = id;
    } else {
      problems.malformed(number, "gold_label is neither a string nor an integer");
      return true;
    }
    if (pair.label < 0) {
      const bool none = shown.empty() || shown == "-" || shown == "-1";
      problems.unlabeled(number, none ? "no gold label" : "unknown label '" + shown + "'");
      return true;
    }
    out.push_back(std::move(pair));
    return true;
  });
}

PairFormat detect_format(const std::string& path, std::string_view text) {
  const auto ext = lower_ascii(fs::path(path).extension().string());
  if (ext == ".jsonl" || ext == ".json" || ext == ".ndjson") return PairFormat::Jsonl;
  if (ext == ".tsv" || ext == ".txt") return PairFormat::Tsv;
  const auto first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{' ? PairFormat::Jsonl : PairFormat::Tsv;
}

// ---- the dataset ----

/// The encoded examples of one split: token ids of all rows back to back.
struct EncodedSplit {
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> offsets = {0};  ///< row r is ids[offsets[r], offsets[r + 1])
  std::vector<std::int64_t> first_length;   ///< tokens of `[CLS] a [SEP]` per row
  std::vector<std::int64_t> labels;
  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
};

EncodedSplit encode_split(const PairTokenizer& tokenizer, const std::vector<SentencePair>& pairs,
                          std::int64_t max_length, std::int64_t& truncated) {
  EncodedSplit split;
  split.offsets.reserve(pairs.size() + 1);
  split.first_length.reserve(pairs.size());
  split.labels.reserve(pairs.size());
  for (const auto& pair : pairs) {
    const auto encoded =
        encode_pair(tokenizer, tokenizer.encode(pair.premise), tokenizer.encode(pair.hypothesis), max_length);
    if (encoded.truncated) ++truncated;
    split.ids.insert(split.ids.end(), encoded.ids.begin(), encoded.ids.end());
    split.offsets.push_back(static_cast<std::int64_t>(split.ids.size()));
    split.first_length.push_back(encoded.first_length);
    split.labels.push_back(pair.label);
  }
  return split;
}

class PairDataset final : public ClassificationDataset {
 public:
  PairDataset(std::string description, std::unique_ptr<PairTokenizer> tokenizer, std::vector<std::string> labels,
              std::int64_t max_length, std::array<EncodedSplit, 3> splits, std::vector<PairFileReport> reports)
      : description_(std::move(description)),
        tokenizer_(std::move(tokenizer)),
        labels_(std::move(labels)),
        max_length_(max_length),
        splits_(std::move(splits)),
        reports_(std::move(reports)) {}

  std::string describe() const override { return description_; }
  const std::vector<std::string>& label_names() const override { return labels_; }
  std::int64_t vocab_size() const override { return tokenizer_->vocab_size(); }
  std::int64_t max_length() const override { return max_length_; }
  std::int64_t pad_id() const override { return tokenizer_->pad_id(); }
  std::int64_t size(Split split) const override { return of(split).size(); }

  ClassBatch batch(Split split, const std::vector<std::int64_t>& indices) const override {
    const auto& s = of(split);
    const auto b = static_cast<std::int64_t>(indices.size());
    ClassBatch out;
    out.input = torch::full({b, max_length_}, tokenizer_->pad_id(), torch::kLong);  // (B, T)
    out.mask = torch::zeros({b, max_length_}, torch::kBool);                          // (B, T)
    out.segment = torch::ones({b, max_length_}, torch::kLong);                        // (B, T)
    out.label = torch::empty({b}, torch::kLong);                                      // (B)
    auto input = out.input.accessor<std::int64_t, 2>();
    auto mask = out.mask.accessor<bool, 2>();
    auto segment = out.segment.accessor<std::int64_t, 2>();
    auto label = out.label.accessor<std::int64_t, 1>();
    for (std::int64_t r = 0; r < b; ++r) {
      const auto index = indices[static_cast<std::size_t>(r)];
      check_index(split, index);
      const auto row = static_cast<std::size_t>(index);
      const auto begin = s.offsets[row], length = s.offsets[row + 1] - begin;
      for (std::int64_t t = 0; t < length; ++t) {
        input[r][t] = s.ids[static_cast<std::size_t>(begin + t)];
        mask[r][t] = true;
        segment[r][t] = t < s.first_length[row] ? 0 : 1;
      }
      label[r] = s.labels[row];
    }
    return out;
  }

  std::vector<std::string> tokens_text(Split split, std::int64_t index) const override {
    check_index(split, index);
    const auto& s = of(split);
    const auto row = static_cast<std::size_t>(index);
    std::vector<std::string> tokens;
    for (auto i = s.offsets[row]; i < s.offsets[row + 1]; ++i)
      tokens.push_back(tokenizer_->token_text(s.ids[static_cast<std::size_t>(i)]));
    return tokens;
  }

  std::vector<std::int64_t> labels(Split split) const override { return of(split).labels; }
  std::vector<PairFileReport> reports() const override { return reports_; }
  nlohmann::json tokenizer_json() const override { return tokenizer_->to_json(); }

 private:
  const EncodedSplit& of(Split split) const { return splits_[static_cast<std::size_t>(split)]; }
  void check_index(Split split, std::int64_t index) const {
    if (index < 0 || index >= size(split)) {
      throw DataError("classification data: example " + std::to_string(index) + " is out of range for the " +
                      to_string(split) + " split (" + std::to_string(size(split)) + " examples)");
    }
  }

  std::string description_;
  std::unique_ptr<PairTokenizer> tokenizer_;
  std::vector<std::string> labels_;
  std::int64_t max_length_;
  std::array<EncodedSplit, 3> splits_;
  std::vector<PairFileReport> reports_;
};

struct TokenizerChoice {
  std::string kind;
  std::string vocab_path;
  WordTokenizerOptions word;
};

TokenizerChoice tokenizer_choice(const nlohmann::json& data) {
  TokenizerChoice choice;
  choice.kind = get<std::string>(data, "tokenizer");
  require(choice.kind == "word" || choice.kind == "wordpiece", "tokenizer",
          "'" + choice.kind + "' is a language-modelling tokenizer; sentence pairs use word or wordpiece");
  choice.word.lowercase = get<bool>(data, "lowercase");
  choice.word.min_count = get<std::int64_t>(data, "min_count");
  choice.word.max_vocab = get<std::int64_t>(data, "max_vocab");
  require(choice.word.min_count >= 1, "min_count", std::to_string(choice.word.min_count) + " must be >= 1");
  require(choice.word.max_vocab == 0 || choice.word.max_vocab >= 6, "max_vocab",
          std::to_string(choice.word.max_vocab) + " must be 0 (no limit) or leave room beyond the 5 special tokens");
  if (choice.kind == "wordpiece") {
    choice.vocab_path = get<std::string>(data, "vocab_path");
    require(!choice.vocab_path.empty(), "vocab_path", "required when data.tokenizer is 'wordpiece'");
  }
  return choice;
}

std::unique_ptr<PairTokenizer> make_tokenizer(const TokenizerChoice& choice, const std::vector<SentencePair>& train) {
  if (choice.kind == "wordpiece") {
    return std::make_unique<WordPieceTokenizer>(
        WordPieceTokenizer::from_vocab_file(choice.vocab_path, choice.word.lowercase));
  }
  std::vector<std::string> texts;
  texts.reserve(2 * train.size());
  for (const auto& pair : train) {
    texts.push_back(pair.premise);
    texts.push_back(pair.hypothesis);
  }
  return std::make_unique<WordTokenizer>(WordTokenizer::build(texts, choice.word));
}

std::string counts_text(const std::array<EncodedSplit, 3>& splits) {
  return detail::with_commas(splits[0].size()) + "/" + detail::with_commas(splits[1].size()) + "/" +
         detail::with_commas(splits[2].size());
}

std::string tail_text(const PairTokenizer& tokenizer, std::int64_t length, std::size_t classes) {
  return tokenizer.kind() + " tokenizer (" + detail::with_commas(tokenizer.vocab_size()) + "), length " +
         std::to_string(length) + ", " + std::to_string(classes) + " classes";
}

std::unique_ptr<ClassificationDataset> make_synthetic(const nlohmann::json& data, const TokenizerChoice& choice,
                                                      std::int64_t context) {
  SyntheticEntailmentOptions options;
  options.train_examples = get<std::int64_t>(data, "task_train_examples");
  options.eval_examples = get<std::int64_t>(data, "task_eval_examples");
  options.seed = static_cast<std::uint64_t>(get<std::int64_t>(data, "task_seed"));
  options.max_facts = get<std::int64_t>(data, "entailment_facts");
  options.converse_fraction = get<double>(data, "entailment_converse");
  require(options.train_examples >= 1, "task_train_examples",
          std::to_string(options.train_examples) + " must be >= 1");
  require(options.eval_examples >= 1, "task_eval_examples", std::to_string(options.eval_examples) + " must be >= 1");
  const auto longest = synthetic_entailment_max_tokens(options);
  require(context >= longest, "context",
          std::to_string(context) + " is shorter than the longest synthetic entailment pair (" +
              std::to_string(longest) + " tokens)");

  std::array<std::vector<SentencePair>, 3> pairs;
  for (const auto split : {Split::Train, Split::Val, Split::Test})
    pairs[static_cast<std::size_t>(split)] = generate_synthetic_entailment(options, split);
  auto tokenizer = make_tokenizer(choice, pairs[0]);
  std::array<EncodedSplit, 3> splits;
  std::int64_t truncated = 0;
  for (std::size_t i = 0; i < 3; ++i) splits[i] = encode_split(*tokenizer, pairs[i], context, truncated);
  const auto& labels = synthetic_entailment_labels();
  const std::string description = "synthetic-entailment (seed " + std::to_string(options.seed) +
                                  "): " + counts_text(splits) + " pairs, " +
                                  tail_text(*tokenizer, context, labels.size());
  return std::make_unique<PairDataset>(description, std::move(tokenizer), labels, context, std::move(splits),
                                       std::vector<PairFileReport>{});
}

std::unique_ptr<ClassificationDataset> make_pairs(const nlohmann::json& data, const TokenizerChoice& choice,
                                                  std::int64_t context) {
  const std::array<std::string, 3> paths = {get<std::string>(data, "train_path"), get<std::string>(data, "val_path"),
                                            get<std::string>(data, "test_path")};
  require(!paths[0].empty(), "train_path", "required when data.source is 'pairs'");
  require(!paths[1].empty(), "val_path", "required when data.source is 'pairs'");
  const auto format_name = get<std::string>(data, "pair_format");
  PairFormat format = PairFormat::Auto;
  if (format_name == "tsv") {
    format = PairFormat::Tsv;
  } else if (format_name == "jsonl") {
    format = PairFormat::Jsonl;
  } else {
    require(format_name == "auto", "pair_format", "unknown format '" + format_name + "' (expected auto, tsv or jsonl)");
  }
  const auto labels = parse_label_names(get<std::string>(data, "labels"));

  std::array<std::vector<SentencePair>, 3> pairs;
  std::vector<PairFileReport> reports;
  for (std::size_t i = 0; i < 3; ++i) {
    if (paths[i].empty()) continue;
    PairFileReport report;
    pairs[i] = read_pair_file(paths[i], format, labels, report);
    reports.push_back(report);
  }
  auto tokenizer = make_tokenizer(choice, pairs[0]);
  std::array<EncodedSplit, 3> splits;
  for (std::size_t i = 0, r = 0; i < 3; ++i) {
    if (paths[i].empty()) continue;
    auto& report = reports[r++];
    splits[i] = encode_split(*tokenizer, pairs[i], context, report.truncated);
    if (report.truncated > 0) {
      logger("data")->info("{}: {} of {} pairs truncated to {} tokens", report.path, report.truncated, report.kept,
                           context);
    }
  }
  std::string names;
  for (std::size_t i = 0; i < 3; ++i)
    if (!paths[i].empty()) names += (names.empty() ? "" : " / ") + fs::path(paths[i]).filename().string();
  const std::string description =
      "pairs (" + names + "): " + counts_text(splits) + " pairs, " + tail_text(*tokenizer, context, labels.size());
  return std::make_unique<PairDataset>(description, std::move(tokenizer), labels, context, std::move(splits),
                                       std::move(reports));
}

}  // namespace

std::vector<std::string> parse_label_names(const std::string& text) {
  std::vector<std::string> names;
  std::stringstream in(text);
  std::string name;
  while (std::getline(in, name, ',')) {
    name = trim(name);
    if (name.empty()) throw ConfigError("data.labels: empty class name in '" + text + "'");
    for (const auto& seen : names)
      if (lower_ascii(seen) == lower_ascii(name)) throw ConfigError("data.labels: class '" + name + "' is repeated");
    names.push_back(name);
  }
  if (!text.empty() && text.back() == ',') throw ConfigError("data.labels: empty class name in '" + text + "'");
  if (names.size() < 2) throw ConfigError("data.labels: '" + text + "' names fewer than two classes");
  return names;
}

std::vector<SentencePair> read_pair_file(const std::string& path, PairFormat format,
                                         const std::vector<std::string>& label_names, PairFileReport& report) {
  report = PairFileReport{};
  report.path = path;
  detail::check_data_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in || fs::is_directory(path)) throw DataError(path + ": cannot open the sentence-pair file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw DataError(path + ": read error");
  const std::string content = buffer.str();
  std::string_view text = content;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 byte-order mark
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    throw DataError(path + ": empty file (expected sentence pairs)");
  }
  std::vector<std::string> lowered;
  for (const auto& name : label_names) lowered.push_back(lower_ascii(trim(name)));

  ProblemLog problems(path, report);
  std::vector<SentencePair> pairs;
  if (format == PairFormat::Auto) format = detect_format(path, text);
  if (format == PairFormat::Tsv) {
    read_tsv(path, text, lowered, report, problems, pairs);
  } else {
    read_jsonl(text, lowered, report, problems, pairs);
  }
  report.kept = static_cast<std::int64_t>(pairs.size());
  if (pairs.empty()) {
    if (report.rows == 0) throw DataError(path + ": no data rows after the TSV header");
    problems.nothing_left();
  }
  if (report.malformed + report.unlabeled > 0) {
    logger("data")->warn("{}: kept {} of {} rows ({} malformed, {} unlabeled)", path, report.kept, report.rows,
                         report.malformed, report.unlabeled);
  } else {
    logger("data")->info("{}: {} sentence pairs", path, report.kept);
  }
  return pairs;
}

std::vector<std::int64_t> epoch_order(std::int64_t n, std::uint64_t seed) {
  if (n < 0) throw DataError("epoch_order: negative example count " + std::to_string(n));
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  std::mt19937_64 gen(seed);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[detail::uniform_below(gen, i)]);
  return order;
}

std::unique_ptr<ClassificationDataset> make_classification_dataset(const nlohmann::json& data) {
  if (!data.is_object()) throw ConfigError("data: expected an object");
  const auto source = get<std::string>(data, "source");
  require(source == "entailment" || source == "pairs", "source",
          "'" + source + "' is a language-modelling source; classification models need 'entailment' or 'pairs'");
  const auto choice = tokenizer_choice(data);
  const auto context = get<std::int64_t>(data, "context");
  require(context >= 4, "context", std::to_string(context) + " cannot hold [CLS] a [SEP] b [SEP] (>= 4 tokens)");
  if (source == "entailment") return make_synthetic(data, choice, context);
  return make_pairs(data, choice, context);
}

}  // namespace routelab
