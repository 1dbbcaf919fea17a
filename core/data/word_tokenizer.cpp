// Word-level and WordPiece tokenizers for sentence pairs, BERT's basic tokenization, and the pair layout.
#include "core/data/word_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "core/data/tokenizer.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

bool is_whitespace(char32_t c) {
  return c == U' ' || c == U'\t' || c == U'\n' || c == U'\r' || c == 0x0B || c == 0x0C || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

/// Control (Cc) and format (Cf) characters that BERT's _clean_text removes; \t \n \r count as white space.
bool is_control(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  return c < 0x20 || (c >= 0x7F && c <= 0x9F) || c == 0xAD || (c >= 0x200B && c <= 0x200F) ||
         (c >= 0x202A && c <= 0x202E) || (c >= 0x2060 && c <= 0x2064) || c == 0xFEFF;
}

/// BERT treats every non-alphanumeric printable ASCII character as punctuation, plus Unicode category P.
/// Non-ASCII: the P characters of Latin-1, General Punctuation, CJK Symbols and the full-width ASCII block.
bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  return c == 0xA1 || c == 0xA7 || c == 0xAB || c == 0xB6 || c == 0xB7 || c == 0xBB || c == 0xBF || c == 0x37E ||
         c == 0x387 || (c >= 0x2010 && c <= 0x2027) || (c >= 0x2030 && c <= 0x2043) ||
         (c >= 0x2045 && c <= 0x2051) || (c >= 0x2053 && c <= 0x205E) || (c >= 0x3001 && c <= 0x3003) ||
         (c >= 0x3008 && c <= 0x3011) || (c >= 0x3014 && c <= 0x301F) || (c >= 0xFF01 && c <= 0xFF03) ||
         (c >= 0xFF05 && c <= 0xFF0A) || (c >= 0xFF0C && c <= 0xFF0F) || c == 0xFF1A || c == 0xFF1B ||
         c == 0xFF1F || c == 0xFF20 || (c >= 0xFF3B && c <= 0xFF3D) || c == 0xFF3F || c == 0xFF5B ||
         c == 0xFF5D;
}

/// BERT's _is_chinese_char: the CJK Unified Ideographs blocks (not Japanese kana or Hangul).
bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_combining_mark(char32_t c) { return c >= 0x300 && c <= 0x36F; }

/// Base letters of U+00C0..U+017F after NFD and mark removal ('\0': no letter decomposition, e.g. Æ, ß, ×).
using namespace std::string_view_literals;  // the table holds NULs, so its length must not come from strlen
constexpr std::string_view kLatinBase =
    // U+00C0..U+00FF
    "AAAAAA\0CEEEEIIII\0NOOOOO\0\0UUUUY\0\0aaaaaa\0ceeeeiiii\0nooooo\0\0uuuuy\0y"
    // U+0100..U+017F
    "AaAaAaCcCcCcCcDd\0\0EeEeEeEeEeGgGgGgGgHh\0\0IiIiIiIiI\0\0\0JjKk\0LlLlLl\0\0\0\0NnNnNn\0\0\0OoOoOo\0\0RrRrRrSsSsSs"
    "SsTtTt\0\0UuUuUuUuUuUuWwYyYZzZzZz\0"sv;
static_assert(kLatinBase.size() == 0x180 - 0xC0, "one entry per code point of U+00C0..U+017F");

char32_t strip_accent(char32_t c) {
  if (c >= 0xC0 && c < 0x180 && kLatinBase[c - 0xC0] != '\0') return static_cast<char32_t>(kLatinBase[c - 0xC0]);
  return c;
}

char32_t to_lower(char32_t c) {
  if (c >= U'A' && c <= U'Z') return c + 32;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;                                 // Latin-1
  if (c == 0x130) return U'i';                                                            // İ
  if (c >= 0x100 && c <= 0x137 && c % 2 == 0) return c + 1;                               // Latin Ext-A, pairs
  if (c >= 0x139 && c <= 0x148 && c % 2 == 1) return c + 1;
  if (c >= 0x14A && c <= 0x177 && c % 2 == 0) return c + 1;
  if (c == 0x178) return 0xFF;
  if (c >= 0x179 && c <= 0x17E && c % 2 == 1) return c + 1;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;                              // Greek
  if (c >= 0x410 && c <= 0x42F) return c + 32;                                           // Cyrillic
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

void throw_bad_pair_document(const std::string& what) { throw DataError("pair tokenizer JSON: " + what); }

}  // namespace

std::vector<std::string> basic_tokenize(std::string_view text, bool lowercase) {
  const std::u32string chars = utf8_to_u32(text);  // DataError on invalid UTF-8
  std::vector<std::string> tokens;
  std::u32string word;
  auto flush = [&] {
    if (!word.empty()) tokens.push_back(u32_to_utf8(word));
    word.clear();
  };
  for (char32_t c : chars) {
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (is_whitespace(c)) {
      flush();
      continue;
    }
    if (lowercase) {
      c = strip_accent(to_lower(c));
      if (is_combining_mark(c)) continue;
    }
    if (is_punctuation(c) || is_cjk(c)) {
      flush();
      tokens.push_back(u32_to_utf8(std::u32string(1, c)));
      continue;
    }
    word += c;
  }
  flush();
  return tokens;
}

PairTokenizer::PairTokenizer(std::vector<std::string> vocab, bool lowercase)
    : vocab_(std::move(vocab)), lowercase_(lowercase) {
  ids_.reserve(vocab_.size() + 5);
  for (std::size_t i = 0; i < vocab_.size(); ++i) ids_.emplace(vocab_[i], static_cast<std::int64_t>(i));
  auto special = [&](const char* token) {
    const auto it = ids_.find(token);
    if (it != ids_.end()) return it->second;
    vocab_.emplace_back(token);
    const auto id = static_cast<std::int64_t>(vocab_.size()) - 1;
    ids_.emplace(token, id);
    return id;
  };
  pad_id_ = special(kPadToken);
  unk_id_ = special(kUnkToken);
  cls_id_ = special(kClsToken);
  sep_id_ = special(kSepToken);
  mask_id_ = special(kMaskToken);
}

std::int64_t PairTokenizer::id_of(const std::string& token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

const std::string& PairTokenizer::token_text(std::int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw DataError(kind() + " tokenizer: id " + std::to_string(id) + " is outside the vocabulary (" +
                    std::to_string(vocab_size()) + " entries)");
  }
  return vocab_[static_cast<std::size_t>(id)];
}

std::vector<std::int64_t> PairTokenizer::encode(std::string_view text) const {
  std::vector<std::int64_t> ids;
  for (const auto& word : basic_tokenize(text, lowercase_)) encode_word(word, ids);
  return ids;
}

nlohmann::json PairTokenizer::to_json() const {
  return {{"kind", kind()}, {"lowercase", lowercase_}, {"vocab", vocab_}};
}

std::unique_ptr<PairTokenizer> PairTokenizer::from_json(const nlohmann::json& doc) {
  if (!doc.is_object()) throw_bad_pair_document("expected a JSON object, got " + std::string(doc.type_name()));
  const auto kind_it = doc.find("kind");
  if (kind_it == doc.end() || !kind_it->is_string()) throw_bad_pair_document("missing string field \"kind\"");
  const auto kind = kind_it->get<std::string>();
  if (kind != "word" && kind != "wordpiece") {
    throw_bad_pair_document("unknown kind '" + kind + "' (expected word or wordpiece)");
  }
  const auto lower_it = doc.find("lowercase");
  if (lower_it == doc.end() || !lower_it->is_boolean()) throw_bad_pair_document(kind + ": missing bool field \"lowercase\"");
  const auto vocab_it = doc.find("vocab");
  if (vocab_it == doc.end() || !vocab_it->is_array()) throw_bad_pair_document(kind + ": missing array field \"vocab\"");
  std::vector<std::string> vocab;
  vocab.reserve(vocab_it->size());
  for (const auto& entry : *vocab_it) {
    if (!entry.is_string()) throw_bad_pair_document(kind + ": \"vocab\" holds " + entry.dump() + ", not a string");
    vocab.push_back(entry.get<std::string>());
  }
  const bool lowercase = lower_it->get<bool>();
  if (kind == "word") return std::make_unique<WordTokenizer>(std::move(vocab), lowercase);
  return std::make_unique<WordPieceTokenizer>(std::move(vocab), lowercase);
}

WordTokenizer WordTokenizer::build(const std::vector<std::string>& training_texts,
                                   const WordTokenizerOptions& options) {
  std::map<std::string, std::int64_t> counts;  // ordered: ties are then broken in byte order by a stable sort
  for (const auto& text : training_texts)
    for (auto& word : basic_tokenize(text, options.lowercase)) ++counts[word];
  std::vector<std::pair<std::string, std::int64_t>> words;
  for (auto& [word, count] : counts) {
    if (count < options.min_count) continue;
    if (word == kPadToken || word == kUnkToken || word == kClsToken || word == kSepToken || word == kMaskToken)
      continue;  // basic tokenization splits brackets off, so this only guards hand-made inputs
    words.emplace_back(word, count);
  }
  std::stable_sort(words.begin(), words.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> vocab = {kPadToken, kUnkToken, kClsToken, kSepToken, kMaskToken};
  std::size_t keep = words.size();
  if (options.max_vocab > 0) {
    const auto room = std::max<std::int64_t>(0, options.max_vocab - static_cast<std::int64_t>(vocab.size()));
    keep = std::min(keep, static_cast<std::size_t>(room));
  }
  for (std::size_t i = 0; i < keep; ++i) vocab.push_back(std::move(words[i].first));
  return WordTokenizer(std::move(vocab), options.lowercase);
}

void WordTokenizer::encode_word(const std::string& word, std::vector<std::int64_t>& out) const {
  const auto id = id_of(word);
  out.push_back(id < 0 ? unk_id() : id);
}

WordPieceTokenizer WordPieceTokenizer::from_vocab_file(const std::string& path, bool lowercase) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open the WordPiece vocabulary");
  std::vector<std::string> vocab;
  std::string line;
  std::int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_number == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (find_invalid_utf8(line) != std::string::npos) {
      throw DataError(path + ":" + std::to_string(line_number) + ": the WordPiece vocabulary is not valid UTF-8");
    }
    vocab.push_back(line);
  }
  if (in.bad()) throw DataError(path + ": read error in the WordPiece vocabulary");
  const bool any = std::any_of(vocab.begin(), vocab.end(), [](const auto& t) { return !t.empty(); });
  if (!any) throw DataError(path + ": the WordPiece vocabulary is empty");
  return WordPieceTokenizer(std::move(vocab), lowercase);
}

void WordPieceTokenizer::encode_word(const std::string& word, std::vector<std::int64_t>& out) const {
  // Byte offset of every code point (plus the end), so candidate pieces are plain substrings.
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < word.size(); ++i)
    if ((static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) starts.push_back(i);
  const std::size_t n = starts.size();
  starts.push_back(word.size());
  if (static_cast<std::int64_t>(n) > kMaxWordChars) {
    out.push_back(unk_id());
    return;
  }
  std::vector<std::int64_t> pieces;
  std::size_t begin = 0;
  while (begin < n) {
    std::int64_t found = -1;
    std::size_t end = n;
    for (; end > begin; --end) {
      std::string piece = word.substr(starts[begin], starts[end] - starts[begin]);
      if (begin > 0) piece.insert(0, "##");
      found = id_of(piece);
      if (found >= 0) break;
    }
    if (found < 0) {
      out.push_back(unk_id());
      return;
    }
    pieces.push_back(found);
    begin = end;
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

EncodedPair encode_pair(const PairTokenizer& tokenizer, std::vector<std::int64_t> a, std::vector<std::int64_t> b,
                        std::int64_t max_length) {
  if (max_length < 3) {
    throw DataError("a sentence pair needs at least 3 tokens ([CLS] [SEP] [SEP]), got a length of " +
                    std::to_string(max_length));
  }
  EncodedPair pair;
  const auto budget = static_cast<std::size_t>(max_length - 3);
  while (a.size() + b.size() > budget) {
    if (a.size() > b.size()) {
      a.pop_back();
    } else {
      b.pop_back();
    }
    pair.truncated = true;
  }
  pair.ids.reserve(a.size() + b.size() + 3);
  pair.ids.push_back(tokenizer.cls_id());
  pair.ids.insert(pair.ids.end(), a.begin(), a.end());
  pair.ids.push_back(tokenizer.sep_id());
  pair.first_length = static_cast<std::int64_t>(pair.ids.size());
  pair.ids.insert(pair.ids.end(), b.begin(), b.end());
  pair.ids.push_back(tokenizer.sep_id());
  return pair;
}

}  // namespace routelab
