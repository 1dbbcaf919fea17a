// Tokenizers for language modelling: byte-level (256 symbols) and character-level over Unicode code points
// (sorted vocabulary built from the training split, plus an explicit unknown id).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace routelab {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string kind() const = 0;  ///< "byte", "char", "task" or "sentencepiece"
  virtual std::int64_t vocab_size() const = 0;
  /// Throws DataError on invalid UTF-8 (char tokenizer); the byte tokenizer accepts any bytes.
  virtual std::vector<std::int64_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<std::int64_t>& ids) const = 0;
  /// The text of `ids` as it reads after `context` (generated tokens after a prompt). The same as decode(ids) for
  /// tokenizers whose tokens decode alone; SentencePiece drops a leading word-start space when it decodes a sequence,
  /// so it decodes the two together and returns what follows the context's text.
  virtual std::string decode_after(const std::vector<std::int64_t>& /*context*/,
                                   const std::vector<std::int64_t>& ids) const {
    return decode(ids);
  }
  /// The token fed before a document's first token and before the continuation of an empty context, as the
  /// lm-evaluation-harness feeds its prefix_token_id: the beginning-of-sequence token, else the end-of-sequence one;
  /// -1 where the tokenizer has neither (byte and character tokenizers).
  virtual std::int64_t prefix_id() const { return -1; }
  /// Human-readable text of one token for the GUI ("\n" shown as "⏎", unknown as "<unk>").
  virtual std::string token_text(std::int64_t id) const = 0;
  virtual nlohmann::json to_json() const = 0;           ///< persisted in checkpoints and the run store
  static std::unique_ptr<Tokenizer> from_json(const nlohmann::json& doc);  ///< throws DataError
};

/// Token ids without a text form: shards prepared elsewhere (llm.c, nanoGPT) that came without their tokenizer.
/// Decoding shows ids ("⟨464⟩"); encoding text is a DataError that says why.
class IdTokenizer final : public Tokenizer {
 public:
  explicit IdTokenizer(std::int64_t vocab);  ///< vocab >= 1
  std::string kind() const override { return "ids"; }
  std::int64_t vocab_size() const override { return vocab_; }
  std::vector<std::int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<std::int64_t>& ids) const override;
  std::string token_text(std::int64_t id) const override;
  nlohmann::json to_json() const override;

 private:
  std::int64_t vocab_;
};

/// A run's stored tokenizer document (RunStore::run_tokenizer): null for "", the parsed object otherwise; DataError
/// naming `where` when it is not a JSON object.
nlohmann::json parse_stored_tokenizer(const std::string& text, const std::string& where);

class ByteTokenizer final : public Tokenizer {
 public:
  std::string kind() const override { return "byte"; }
  std::int64_t vocab_size() const override { return 256; }
  std::vector<std::int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<std::int64_t>& ids) const override;
  std::string token_text(std::int64_t id) const override;
  nlohmann::json to_json() const override;
};

class CharTokenizer final : public Tokenizer {
 public:
  /// Builds the sorted vocabulary of the code points in `training_text` (must be valid UTF-8).
  static CharTokenizer build(std::string_view training_text);
  explicit CharTokenizer(std::vector<char32_t> sorted_vocab);

  std::string kind() const override { return "char"; }
  /// Number of distinct code points + 1 (the unknown id, which is the last id).
  std::int64_t vocab_size() const override;
  std::int64_t unknown_id() const;
  std::vector<std::int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<std::int64_t>& ids) const override;
  std::string token_text(std::int64_t id) const override;
  nlohmann::json to_json() const override;
  const std::vector<char32_t>& vocab() const { return vocab_; }

 private:
  std::vector<char32_t> vocab_;
};

/// UTF-8 helpers (strict: overlong forms, surrogates and truncated sequences are invalid).
/// Returns the byte offset of the first invalid sequence, or npos when the text is valid.
std::size_t find_invalid_utf8(std::string_view text);
std::u32string utf8_to_u32(std::string_view text);  ///< throws DataError on invalid input
std::string u32_to_utf8(std::u32string_view text);

}  // namespace routelab
