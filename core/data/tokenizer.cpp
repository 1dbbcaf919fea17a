// Byte and character tokenizers, strict UTF-8 decoding, and the JSON form of every tokenizer kind.
#include "core/data/tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "core/data/sentencepiece_tokenizer.h"
#include "core/data/synthetic_tasks.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

/// One strictly decoded code point at text[i]; length 0 when the sequence there is invalid or truncated.
struct Decoded {
  char32_t code_point;
  int length;
};

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

Decoded decode_one(std::string_view text, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  if (b0 < 0x80) return {b0, 1};
  int length = 0;
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {  // 0xC0, 0xC1 could only start overlong forms
    length = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {  // 0xF5.. would exceed U+10FFFF
    length = 4;
    cp = b0 & 0x07;
  } else {
    return {0, 0};  // a lone continuation byte or an impossible lead byte
  }
  if (i + length > text.size()) return {0, 0};
  for (int k = 1; k < length; ++k) {
    const auto b = static_cast<unsigned char>(text[i + k]);
    if (!is_continuation(b)) return {0, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (length == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return {0, 0};
  if (length == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return {0, 0};
  return {cp, length};
}

bool is_valid_code_point(char32_t cp) { return cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF); }

void append_utf8(std::string& out, char32_t cp) {
  if (!is_valid_code_point(cp)) cp = kReplacement;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

[[noreturn]] void throw_invalid_utf8(std::size_t offset) {
  throw DataError("not valid UTF-8 (first invalid byte at offset " + std::to_string(offset) + ")");
}

/// Calls f(code_point) for each code point of valid UTF-8; throws DataError at the first invalid sequence.
template <typename F>
void for_each_code_point(std::string_view text, F&& f) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      f(static_cast<char32_t>(b));
      ++i;
      continue;
    }
    const Decoded d = decode_one(text, i);
    if (d.length == 0) throw_invalid_utf8(i);
    f(d.code_point);
    i += d.length;
  }
}

/// Display text of a code point: arrows for newline and tab, <U+XXXX> for other control characters.
std::string display_code_point(char32_t cp) {
  if (cp == U'\n') return "⏎";
  if (cp == U'\t') return "⇥";
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || !is_valid_code_point(cp)) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "<U+%04X>", static_cast<unsigned>(cp));
    return buf;
  }
  std::string out;
  append_utf8(out, cp);
  return out;
}

[[noreturn]] void throw_bad_id(const std::string& kind, std::int64_t id, std::int64_t vocab_size) {
  throw DataError(kind + " tokenizer: token id " + std::to_string(id) + " is outside its vocabulary of " +
                  std::to_string(vocab_size));
}

[[noreturn]] void throw_bad_document(const std::string& why) {
  throw DataError("tokenizer document: " + why);
}

}  // namespace

// ---- UTF-8 --------------------------------------------------------------------------------------------------

std::size_t find_invalid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const Decoded d = decode_one(text, i);
    if (d.length == 0) return i;
    i += d.length;
  }
  return std::string_view::npos;
}

std::u32string utf8_to_u32(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for_each_code_point(text, [&](char32_t cp) { out += cp; });
  return out;
}

std::string u32_to_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) append_utf8(out, cp);
  return out;
}

// ---- Byte tokenizer -----------------------------------------------------------------------------------------

std::vector<std::int64_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::int64_t> ids(text.size());
  std::transform(text.begin(), text.end(), ids.begin(),
                 [](char c) { return static_cast<std::int64_t>(static_cast<unsigned char>(c)); });
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (std::int64_t id : ids) {
    if (id < 0 || id >= 256) throw_bad_id(kind(), id, 256);
    out += static_cast<char>(static_cast<unsigned char>(id));
  }
  return out;
}

std::string ByteTokenizer::token_text(std::int64_t id) const {
  if (id < 0 || id >= 256) throw_bad_id(kind(), id, 256);
  if (id == '\n') return "⏎";
  if (id == '\t') return "⇥";
  if (id >= 0x20 && id < 0x7F) return std::string(1, static_cast<char>(id));
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", static_cast<unsigned>(id));
  return buf;
}

nlohmann::json ByteTokenizer::to_json() const { return {{"kind", "byte"}}; }

// ---- Character tokenizer ------------------------------------------------------------------------------------

CharTokenizer CharTokenizer::build(std::string_view training_text) {
  std::vector<bool> seen(0x110000, false);
  for_each_code_point(training_text, [&](char32_t cp) { seen[cp] = true; });
  std::vector<char32_t> vocab;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (seen[cp]) vocab.push_back(cp);
  }
  return CharTokenizer(std::move(vocab));
}

CharTokenizer::CharTokenizer(std::vector<char32_t> sorted_vocab) : vocab_(std::move(sorted_vocab)) {
  for (std::size_t i = 0; i < vocab_.size(); ++i) {
    if (!is_valid_code_point(vocab_[i])) {
      throw DataError("char tokenizer: " + std::to_string(static_cast<std::uint32_t>(vocab_[i])) +
                      " is not a Unicode scalar value");
    }
    if (i > 0 && vocab_[i] <= vocab_[i - 1]) {
      throw DataError("char tokenizer: the vocabulary must be sorted without duplicates");
    }
  }
}

std::int64_t CharTokenizer::vocab_size() const { return static_cast<std::int64_t>(vocab_.size()) + 1; }

std::int64_t CharTokenizer::unknown_id() const { return static_cast<std::int64_t>(vocab_.size()); }

std::vector<std::int64_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<std::int64_t> ids;
  ids.reserve(text.size());
  const std::int64_t unknown = unknown_id();
  for_each_code_point(text, [&](char32_t cp) {
    auto it = std::lower_bound(vocab_.begin(), vocab_.end(), cp);
    ids.push_back(it != vocab_.end() && *it == cp ? it - vocab_.begin() : unknown);
  });
  return ids;
}

std::string CharTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (std::int64_t id : ids) {
    if (id < 0 || id > unknown_id()) throw_bad_id(kind(), id, vocab_size());
    append_utf8(out, id == unknown_id() ? kReplacement : vocab_[static_cast<std::size_t>(id)]);
  }
  return out;
}

std::string CharTokenizer::token_text(std::int64_t id) const {
  if (id < 0 || id > unknown_id()) throw_bad_id(kind(), id, vocab_size());
  if (id == unknown_id()) return "<unk>";
  return display_code_point(vocab_[static_cast<std::size_t>(id)]);
}

nlohmann::json CharTokenizer::to_json() const {
  nlohmann::json codes = nlohmann::json::array();
  for (char32_t cp : vocab_) codes.push_back(static_cast<std::uint32_t>(cp));
  return {{"kind", "char"}, {"vocab", std::move(codes)}};
}

// ---- Ids without text ------------------------------------------------------------------------------------------

IdTokenizer::IdTokenizer(std::int64_t vocab) : vocab_(vocab) {
  if (vocab_ < 1) throw DataError("ids tokenizer: the vocabulary must hold at least one id");
}

std::vector<std::int64_t> IdTokenizer::encode(std::string_view /*text*/) const {
  throw DataError("these token shards came without their tokenizer, so text cannot be encoded (prepare the corpus "
                  "with `routelab-cli prepare`, or give data.tokenizer=sentencepiece with the model they were made "
                  "with)");
}

std::string IdTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::string text;
  for (auto id : ids) text += token_text(id);
  return text;
}

std::string IdTokenizer::token_text(std::int64_t id) const {
  if (id < 0 || id >= vocab_) throw_bad_id(kind(), id, vocab_);
  return "⟨" + std::to_string(id) + "⟩";
}

nlohmann::json IdTokenizer::to_json() const { return {{"kind", "ids"}, {"vocab", vocab_}}; }

// ---- JSON dispatch ------------------------------------------------------------------------------------------

std::unique_ptr<Tokenizer> Tokenizer::from_json(const nlohmann::json& doc) {
  if (!doc.is_object()) throw_bad_document("expected a JSON object, got " + std::string(doc.type_name()));
  auto kind_it = doc.find("kind");
  if (kind_it == doc.end() || !kind_it->is_string()) throw_bad_document("missing string field \"kind\"");
  const auto kind = kind_it->get<std::string>();
  if (kind == "byte") return std::make_unique<ByteTokenizer>();
  if (kind == "char") {
    auto vocab_it = doc.find("vocab");
    if (vocab_it == doc.end() || !vocab_it->is_array()) throw_bad_document("char: missing array field \"vocab\"");
    std::vector<char32_t> vocab;
    vocab.reserve(vocab_it->size());
    for (const auto& code : *vocab_it) {
      if (!code.is_number_integer() || code.get<std::int64_t>() < 0 || code.get<std::int64_t>() > 0x10FFFF) {
        throw_bad_document("char: \"vocab\" holds " + code.dump() + ", not a code point");
      }
      vocab.push_back(static_cast<char32_t>(code.get<std::int64_t>()));
    }
    return std::make_unique<CharTokenizer>(std::move(vocab));  // checks order and surrogates
  }
  if (kind == "task") {
    auto symbols_it = doc.find("symbols");
    if (symbols_it == doc.end() || !symbols_it->is_number_integer() || symbols_it->get<std::int64_t>() < 1) {
      throw_bad_document("task: \"symbols\" must be a positive integer");
    }
    return std::make_unique<TaskTokenizer>(symbols_it->get<std::int64_t>());
  }
  if (kind == "sentencepiece") return SentencePieceTokenizer::from_json(doc);
  if (kind == "ids") {
    auto vocab_it = doc.find("vocab");
    if (vocab_it == doc.end() || !vocab_it->is_number_integer() || vocab_it->get<std::int64_t>() < 1)
      throw_bad_document("ids: \"vocab\" must be a positive integer");
    return std::make_unique<IdTokenizer>(vocab_it->get<std::int64_t>());
  }
  throw_bad_document("unknown kind '" + kind + "' (expected byte, char, task, sentencepiece or ids)");
}

nlohmann::json parse_stored_tokenizer(const std::string& text, const std::string& where) {
  if (text.empty()) return nullptr;
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(where + ": the stored tokenizer is not JSON (" + e.what() + ")");
  }
  if (!doc.is_object()) throw DataError(where + ": the stored tokenizer is not a JSON object");
  return doc;
}

}  // namespace routelab
