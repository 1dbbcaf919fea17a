// Subword tokenizers through SentencePiece (BPE or unigram models, the Llama-2 tokenizer among them): loading a
// `.model` file, and the tokenizer's JSON form, which carries the model's bytes so a run decodes with exactly the
// tokenizer it trained with wherever the file went since. Training a model is in tokenizer_training.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/tokenizer.h"

namespace routelab {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  /// Reads a `.model` file. DataError naming the file when it cannot be read or is not a SentencePiece model.
  static std::unique_ptr<SentencePieceTokenizer> from_file(const std::string& path);
  /// From the bytes of a `.model` file; `origin` names them in errors and is kept as the tokenizer's source.
  static std::unique_ptr<SentencePieceTokenizer> from_bytes(std::string model_bytes, const std::string& origin);
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  std::string kind() const override { return "sentencepiece"; }
  std::int64_t vocab_size() const override;
  std::vector<std::int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<std::int64_t>& ids) const override;
  std::string decode_after(const std::vector<std::int64_t>& context,
                           const std::vector<std::int64_t>& ids) const override;
  /// The piece with SentencePiece's word-start mark shown as a space ("▁the" -> " the"), byte pieces of a newline
  /// and a tab as "⏎" and "⇥", other byte pieces as "<0xE2>", control pieces as they are ("<s>").
  std::string token_text(std::int64_t id) const override;
  /// {"kind": "sentencepiece", "hash": content_hash(model bytes), "source": the file it came from, "vocab": N,
  /// "model": Base64 of the model bytes}.
  nlohmann::json to_json() const override;
  /// The inverse of to_json(); DataError when the model is missing, not Base64, or does not match its hash.
  static std::unique_ptr<SentencePieceTokenizer> from_json(const nlohmann::json& doc);

  const std::string& hash() const { return hash_; }
  const std::string& source() const { return source_; }
  const std::string& model_bytes() const { return bytes_; }
  std::int64_t prefix_id() const override { return bos_id() >= 0 ? bos_id() : eos_id(); }
  std::int64_t bos_id() const;                          ///< -1 when the model has none
  std::int64_t eos_id() const;                          ///< -1 when the model has none

 private:
  SentencePieceTokenizer(std::string bytes, std::string source);
  void check_id(std::int64_t id) const;

  std::string bytes_, source_, hash_;
  void* processor_ = nullptr;  ///< SentencePiece's processor, reached through spm_api()
};

}  // namespace routelab
