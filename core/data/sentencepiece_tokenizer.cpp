// SentencePiece models as RouteLab tokenizers: loading, encoding and decoding with errors that name the model, and
// the JSON form that carries the model's bytes.
#include "core/data/sentencepiece_tokenizer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/data/spm_api.h"
#include "core/util/base64.h"
#include "core/util/content_hash.h"
#include "core/util/errors.h"
#include "core/util/json_fields.h"

namespace routelab {
namespace {

std::string read_model_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw DataError(path + ": is a folder; give a SentencePiece .model file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open the SentencePiece model (" + std::strerror(errno) + ")");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw DataError(path + ": cannot read the SentencePiece model");
  return std::move(bytes).str();
}

[[noreturn]] void throw_bad_sp_document(const std::string& what) {
  throw DataError("sentencepiece tokenizer document: " + what);
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(std::string bytes, std::string source)
    : bytes_(std::move(bytes)), source_(std::move(source)), hash_(content_hash(bytes_)) {
  if (bytes_.empty()) throw DataError(source_ + ": empty, not a SentencePiece model");
  std::string error;
  processor_ = spm_api().load(bytes_, &error);
  if (!processor_) throw DataError(source_ + ": not a SentencePiece model (" + error + ")");
  if (spm_api().size(processor_) < 1) throw DataError(source_ + ": the SentencePiece model has no pieces");
}

SentencePieceTokenizer::~SentencePieceTokenizer() {
  if (processor_) spm_api().destroy(processor_);
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::from_file(const std::string& path) {
  return from_bytes(read_model_file(path), path);
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::from_bytes(std::string model_bytes,
                                                                           const std::string& origin) {
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(model_bytes), origin));
}

std::int64_t SentencePieceTokenizer::vocab_size() const { return spm_api().size(processor_); }
std::int64_t SentencePieceTokenizer::bos_id() const { return spm_api().bos_id(processor_); }
std::int64_t SentencePieceTokenizer::eos_id() const { return spm_api().eos_id(processor_); }

void SentencePieceTokenizer::check_id(std::int64_t id) const {
  if (id < 0 || id >= vocab_size())
    throw DataError("sentencepiece tokenizer (" + source_ + "): token id " + std::to_string(id) + " is outside 0.." +
                    std::to_string(vocab_size() - 1));
}

std::vector<std::int64_t> SentencePieceTokenizer::encode(std::string_view text) const {
  if (auto bad = find_invalid_utf8(text); bad != std::string_view::npos)
    throw DataError("sentencepiece tokenizer (" + source_ + "): the text is not valid UTF-8 (first invalid byte at "
                    "offset " + std::to_string(bad) + ")");
  std::vector<int> ids;
  std::string error;
  if (!spm_api().encode(processor_, text, &ids, &error))
    throw DataError("sentencepiece tokenizer (" + source_ + "): cannot encode: " + error);
  return {ids.begin(), ids.end()};
}

std::string SentencePieceTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (auto id : ids) {
    check_id(id);
    narrow.push_back(static_cast<int>(id));
  }
  std::string text, error;
  if (!spm_api().decode(processor_, narrow, &text, &error))
    throw DataError("sentencepiece tokenizer (" + source_ + "): cannot decode: " + error);
  return text;
}

std::string SentencePieceTokenizer::decode_after(const std::vector<std::int64_t>& context,
                                                 const std::vector<std::int64_t>& ids) const {
  if (context.empty()) return decode(ids);
  std::vector<std::int64_t> both(context);
  both.insert(both.end(), ids.begin(), ids.end());
  const auto head = decode(context), all = decode(both);
  // A UTF-8 character split between the two (byte pieces) changes the context's own text: decode the rest alone.
  return all.compare(0, head.size(), head) == 0 ? all.substr(head.size()) : decode(ids);
}

std::string SentencePieceTokenizer::token_text(std::int64_t id) const {
  check_id(id);
  const int i = static_cast<int>(id);
  const std::string& piece = spm_api().piece(processor_, i);
  const int kind = spm_api().piece_kind(processor_, i);
  if (kind & 1) {  // a byte piece
    if (piece == "<0x0A>") return "⏎";
    if (piece == "<0x09>") return "⇥";
    return piece;
  }
  if (kind & 6) return piece;  // control or unknown
  static constexpr std::string_view kWordStart = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  std::string shown;
  shown.reserve(piece.size());
  for (std::size_t k = 0; k < piece.size();) {
    if (std::string_view(piece).substr(k, kWordStart.size()) == kWordStart) {
      shown += ' ';
      k += kWordStart.size();
    } else {
      shown += piece[k++];
    }
  }
  return shown;
}

nlohmann::json SentencePieceTokenizer::to_json() const {
  return {{"kind", kind()},
          {"hash", hash_},
          {"source", source_},
          {"vocab", vocab_size()},
          {"model", base64_encode(bytes_)}};
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::from_json(const nlohmann::json& doc) {
  if (!doc.is_object()) throw_bad_sp_document("expected a JSON object");
  const auto model = doc.find("model");
  if (model == doc.end() || !model->is_string()) throw_bad_sp_document("missing string field \"model\"");
  auto bytes = base64_decode(model->get_ref<const std::string&>());
  if (!bytes) throw_bad_sp_document("\"model\" is not Base64");
  const auto source = json_text(doc, "source", "stored tokenizer");
  if (const auto hash = doc.find("hash"); hash != doc.end()) {
    if (!hash->is_string()) throw_bad_sp_document("\"hash\" must be a string");
    if (content_hash(*bytes) != hash->get<std::string>())
      throw_bad_sp_document("the model of " + source + " does not match its hash " + hash->get<std::string>() +
                         " (damaged)");
  }
  return from_bytes(std::move(*bytes), source);
}

}  // namespace routelab
