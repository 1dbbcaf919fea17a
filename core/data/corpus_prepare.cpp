// Corpus preparation: documents read in order and cut into units (a document, or about 64 KiB of a long text file
// at a line end), batches of units encoded in parallel and written in order, so the shards are the same whatever
// the thread count.
#include "core/data/corpus_prepare.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/data/corpus_files.h"
#include "core/data/sentencepiece_tokenizer.h"
#include "core/data/token_shards.h"
#include "core/util/errors.h"

namespace fs = std::filesystem;

namespace routelab {
namespace {

/// A long text is encoded in pieces of about this size: SentencePiece encodes 64 KiB pieces twice as fast as 1 MiB
/// ones, and each piece costs at most one extra word-start mark.
constexpr std::size_t kUnitBytes = 1 << 16;

struct Unit {
  std::string text;
  bool starts_document = false;
  bool val = false;  ///< in the validation split
};

std::unique_ptr<Tokenizer> prepare_tokenizer(const PrepareOptions& o) {
  if (o.tokenizer == "byte") return std::make_unique<ByteTokenizer>();
  if (o.tokenizer != "sentencepiece")
    throw ConfigError("prepare: --tokenizer '" + o.tokenizer + "' (expected a SentencePiece .model file or byte)");
  if (o.tokenizer_model.empty()) throw ConfigError("prepare: give the tokenizer (--tokenizer FILE.model or byte)");
  return SentencePieceTokenizer::from_file(o.tokenizer_model);
}

void check_out_folder(const std::string& out) {
  if (out.empty()) throw ConfigError("prepare: give the folder to write (--out DIR)");
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec)) throw ConfigError("prepare: --out " + out + " is a file, not a folder");
    if (!fs::is_empty(out, ec))
      throw ConfigError("prepare: --out " + out + " is not empty; give a new folder (shards are never overwritten)");
  }
}

std::int64_t code_points_of(const std::string& text) {
  std::int64_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

PrepareResult prepare_shards(const PrepareOptions& options,
                             const std::function<void(const PrepareProgress&)>& progress) {
  if (!(options.val_fraction > 0 && options.val_fraction < 1))
    throw ConfigError("prepare: --val-fraction " + std::to_string(options.val_fraction) + " must be in (0, 1)");
  if (options.corpus.empty()) throw ConfigError("prepare: give a corpus (--corpus PATH)");
  check_out_folder(options.out);
  const auto tokenizer = prepare_tokenizer(options);
  CorpusReader reader(options.corpus, options.json_field);
  const auto started = std::chrono::steady_clock::now();
  const auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  const int threads = options.threads > 0 ? options.threads
                                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int width = tokenizer->vocab_size() <= 65536 ? 2 : 4;
  ShardWriter writer(options.out, "shard", width, options.shard_tokens);
  const std::int64_t bos = options.bos && tokenizer->kind() == "sentencepiece"
                               ? static_cast<const SentencePieceTokenizer&>(*tokenizer).bos_id()
                               : -1;
  const auto val_bytes = static_cast<std::int64_t>(options.val_fraction * static_cast<double>(reader.total_bytes()));

  PrepareResult result;
  std::int64_t chars_train = 0, chars_val = 0, val_bytes_assigned = 0;
  std::vector<Unit> batch;
  std::size_t batch_bytes = 0;
  bool document_open = false;  // the last unit read continues into the next one
  Unit current;
  auto last_report = started;

  const auto flush = [&] {
    std::vector<std::vector<std::int32_t>> encoded(batch.size());
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(threads));
    std::vector<std::thread> workers;
    for (int w = 0; w < threads; ++w) {
      workers.emplace_back([&, w] {
        try {
          for (std::size_t i = static_cast<std::size_t>(w); i < batch.size(); i += static_cast<std::size_t>(threads)) {
            const auto ids = tokenizer->encode(batch[i].text);
            auto& out = encoded[i];
            out.reserve(ids.size() + 1);
            if (batch[i].starts_document && bos >= 0) out.push_back(static_cast<std::int32_t>(bos));
            for (auto id : ids) out.push_back(static_cast<std::int32_t>(id));
          }
        } catch (...) {
          errors[static_cast<std::size_t>(w)] = std::current_exception();
        }
      });
    }
    for (auto& t : workers) t.join();
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const bool val = batch[i].val;
      (val ? chars_val : chars_train) += code_points_of(batch[i].text);
      (val ? result.val_tokens : result.train_tokens) += static_cast<std::int64_t>(encoded[i].size());
      writer.append(val ? "val" : "train", encoded[i]);
    }
    batch.clear();
    batch_bytes = 0;
    if (progress)
      progress({reader.bytes_read(), reader.total_bytes(), result.train_tokens + result.val_tokens,
                reader.documents(), seconds()});
  };

  // The validation split: the corpus's first units, until it holds val_fraction of the bytes; while it fills, a
  // unit ends (at a line end) where the validation split would be full, so a single long file splits too.
  CorpusReader::Piece piece;
  while (reader.next(piece)) {
    if (current.text.empty()) {
      current.starts_document = !document_open;
      current.val = val_bytes_assigned < val_bytes;
    }
    current.text += piece.text;
    document_open = !piece.ends_document;
    const auto unit_bytes = static_cast<std::int64_t>(current.text.size());
    const bool val_full = current.val && val_bytes_assigned + unit_bytes >= val_bytes;
    if (piece.ends_document || unit_bytes >= static_cast<std::int64_t>(kUnitBytes) || val_full) {
      if (current.val) val_bytes_assigned += unit_bytes;
      batch_bytes += current.text.size();
      batch.push_back(std::move(current));
      current = Unit{};
      if (batch.size() >= static_cast<std::size_t>(threads) * 16 || batch_bytes >= kUnitBytes * 4 * threads) flush();
    }
    if (progress && std::chrono::steady_clock::now() - last_report > std::chrono::milliseconds(500)) {
      last_report = std::chrono::steady_clock::now();
      progress({reader.bytes_read(), reader.total_bytes(), result.train_tokens + result.val_tokens,
                reader.documents(), seconds()});
    }
  }
  if (!current.text.empty()) batch.push_back(std::move(current));
  flush();
  if (result.train_tokens == 0)
    throw DataError(options.corpus.front() + ": too little text for a training split after the validation split "
                    "(--val-fraction " + std::to_string(options.val_fraction) + ")");
  const auto shards = writer.finish();

  nlohmann::json manifest = {
      {"format", "routelab-shards"},
      {"version", 1},
      {"tokenizer", tokenizer->to_json()},
      {"token_bytes", width},
      {"bos_per_document", bos >= 0},
      {"documents", reader.documents()},
      {"bytes", reader.total_bytes()},
      {"corpus", reader.files()},
      {"val_fraction", options.val_fraction},
      {"tokens", {{"train", result.train_tokens}, {"val", result.val_tokens}}},
      {"chars", {{"train", chars_train}, {"val", chars_val}}},
      {"shards", shards},
  };
  result.folder = options.out;
  result.manifest = (fs::path(options.out) / kShardManifest).string();
  {
    const auto temp = result.manifest + ".tmp";
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << manifest.dump(1) << "\n";
    out.close();
    if (!out) throw DataError(temp + ": cannot write the manifest");
    std::error_code ec;
    fs::rename(temp, result.manifest, ec);
    if (ec) throw DataError(result.manifest + ": cannot write (" + ec.message() + ")");
  }
  result.documents = reader.documents();
  result.bytes = reader.total_bytes();
  result.shards = static_cast<std::int64_t>(shards.size());
  result.seconds = seconds();
  return result;
}

}  // namespace routelab
