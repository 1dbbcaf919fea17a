// Corpus preparation: documents read in order and cut into units (a document, or about 64 KiB of a long text file
// at a line end), batches of units encoded in parallel and written in order, so the shards are the same whatever
// the thread count.
#include "core/data/corpus_prepare.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <spdlog/fmt/fmt.h>

#include "core/data/corpus_files.h"
#include "core/data/sentencepiece_tokenizer.h"
#include "core/data/token_shards.h"
#include "core/util/errors.h"
#include "core/util/utf8.h"

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

void check_out_folder(const std::string& out, bool resume) {
  if (out.empty()) throw ConfigError("prepare: give the folder to write (--out DIR)");
  std::error_code ec;
  const bool unfinished = fs::exists(fs::path(out) / kPrepareProgress, ec);
  if (resume && !unfinished)
    throw ConfigError("prepare --resume: --out " + out + " holds no unfinished preparation (no " +
                      std::string(kPrepareProgress) + ")");
  if (resume) return;
  if (unfinished)
    throw ConfigError("prepare: --out " + out + " holds an unfinished preparation: continue it with --resume (and the "
                      "options it began with), or give a new folder");
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec)) throw ConfigError("prepare: --out " + out + " is a file, not a folder");
    // Only a preparation's own temporary files (one killed before it first saved its progress): begun again.
    std::vector<fs::path> leftovers;
    bool only_leftovers = true;
    for (const auto& entry : fs::directory_iterator(out, ec)) {
      const auto name = entry.path().filename().string();
      const bool temp = name.size() > 8 && name.substr(name.size() - 8) == ".bin.tmp" && name.rfind("shard_", 0) == 0;
      if (temp || name == std::string(kPrepareProgress) + ".tmp")
        leftovers.push_back(entry.path());
      else
        only_leftovers = false;
    }
    if (!only_leftovers)
      throw ConfigError("prepare: --out " + out + " is not empty; give a new folder (shards are never overwritten)");
    for (const auto& file : leftovers) fs::remove(file, ec);
  }
}

/// Writes `doc` to `path` through a synced temporary file and a rename, so `path` is always a whole document.
void write_json_atomically(const fs::path& path, const nlohmann::json& doc) {
  const auto temp = path.string() + ".tmp";
  std::FILE* out = std::fopen(temp.c_str(), "wb");
  if (!out) throw DataError(temp + ": cannot write");
  const auto text = doc.dump(1) + "\n";
  const bool ok = std::fwrite(text.data(), 1, text.size(), out) == text.size() && std::fflush(out) == 0 &&
                  ::fsync(::fileno(out)) == 0;
  std::fclose(out);
  if (!ok) throw DataError(temp + ": cannot write");
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) throw DataError(path.string() + ": cannot write (" + ec.message() + ")");
}

/// What preparation has done so far, beside the reader's position and the writer's shards: what a resume restores.
struct Counters {
  std::int64_t chars_train = 0, chars_val = 0, val_bytes_assigned = 0, train_tokens = 0, val_tokens = 0;
  bool document_open = false;  ///< the last unit read continues into the next one
};

nlohmann::json to_json(const Counters& c) {
  return {{"chars_train", c.chars_train}, {"chars_val", c.chars_val}, {"val_bytes_assigned", c.val_bytes_assigned},
          {"train_tokens", c.train_tokens}, {"val_tokens", c.val_tokens}, {"document_open", c.document_open}};
}

Counters counters_from(const nlohmann::json& j) {
  return {j.at("chars_train").get<std::int64_t>(),  j.at("chars_val").get<std::int64_t>(),
          j.at("val_bytes_assigned").get<std::int64_t>(), j.at("train_tokens").get<std::int64_t>(),
          j.at("val_tokens").get<std::int64_t>(), j.at("document_open").get<bool>()};
}

}  // namespace

PrepareResult prepare_shards(const PrepareOptions& options,
                             const std::function<void(const PrepareProgress&)>& progress) {
  if (!(options.val_fraction > 0 && options.val_fraction < 1))
    throw ConfigError("prepare: --val-fraction " + fmt::format("{}", options.val_fraction) + " must be in (0, 1)");
  if (!(options.save_every_s >= 0))
    throw ConfigError("prepare: --save-every " + fmt::format("{}", options.save_every_s) + " must be 0 or more seconds");
  if (options.corpus.empty()) throw ConfigError("prepare: give a corpus (--corpus PATH)");
  check_out_folder(options.out, options.resume);
  const auto tokenizer = prepare_tokenizer(options);
  CorpusReader reader(options.corpus, options.json_field);
  const auto started = std::chrono::steady_clock::now();
  const auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  const int threads = options.threads > 0 ? options.threads
                                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int width = tokenizer->vocab_size() <= 65536 ? 2 : 4;
  const std::int64_t bos = options.bos && tokenizer->kind() == "sentencepiece"
                               ? static_cast<const SentencePieceTokenizer&>(*tokenizer).bos_id()
                               : -1;
  const auto val_bytes = static_cast<std::int64_t>(options.val_fraction * static_cast<double>(reader.total_bytes()));
  // What a resume must find unchanged: the same shards come only from the same corpus, tokenizer and options.
  const nlohmann::json fingerprint = {
      {"corpus", reader.files()},         {"corpus_bytes", reader.sizes()},   {"json_field", options.json_field},
      {"tokenizer", tokenizer->to_json()}, {"val_fraction", options.val_fraction},
      {"shard_tokens", options.shard_tokens}, {"bos", bos >= 0},           {"token_bytes", width}};
  const fs::path progress_file = fs::path(options.out) / kPrepareProgress;

  PrepareResult result;
  Counters done;
  std::unique_ptr<ShardWriter> writer;
  if (options.resume) {
    nlohmann::json saved;
    try {
      std::ifstream in(progress_file);
      saved = nlohmann::json::parse(in);
      for (const auto& [key, value] : fingerprint.items())
        if (saved.at("options").at(key) != value)
          throw ConfigError(progress_file.string() + ": " + key + " was " + saved.at("options").at(key).dump() +
                            ", now " + value.dump() + "; resume with what it began with, or give a new folder");
      const auto& at = saved.at("reader");
      reader.seek({at.at("file").get<std::size_t>(), at.at("offset").get<std::int64_t>(),
                   at.at("line").get<std::int64_t>(), at.at("documents").get<std::int64_t>()});
      done = counters_from(saved.at("counters"));
      writer = std::make_unique<ShardWriter>(options.out, "shard", width, options.shard_tokens, saved.at("writer"));
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(progress_file.string() + ": not a progress file this version can continue (" + e.what() + ")");
    }
    writer->keep_unfinished();
    result.resumed = true;
  } else {
    writer = std::make_unique<ShardWriter>(options.out, "shard", width, options.shard_tokens);
  }
  const auto report = [&] {
    if (progress)
      progress({reader.bytes_read(), reader.total_bytes(), done.train_tokens + done.val_tokens, reader.documents(),
                seconds()});
  };
  bool saved_once = options.resume;
  auto last_save = std::chrono::steady_clock::now();
  // Between batches (none in flight, no unit begun): the shards' bytes on disk first, then the progress naming them.
  const auto save = [&] {
    const auto position = reader.position();
    write_json_atomically(progress_file,
                          {{"format", "routelab-prepare-progress"},
                           {"version", 1},
                           {"options", fingerprint},
                           {"reader", {{"file", position.file}, {"offset", position.offset}, {"line", position.line},
                                       {"documents", position.documents}}},
                           {"counters", to_json(done)},
                           {"writer", writer->state(/*sync=*/true)}});
    writer->keep_unfinished();
    saved_once = true;
    last_save = std::chrono::steady_clock::now();
  };

  std::vector<Unit> batch;
  std::size_t batch_bytes = 0;
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
      (val ? done.chars_val : done.chars_train) += utf8_code_points(batch[i].text);
      (val ? done.val_tokens : done.train_tokens) += static_cast<std::int64_t>(encoded[i].size());
      writer->append(val ? "val" : "train", encoded[i]);
    }
    batch.clear();
    batch_bytes = 0;
    report();
  };

  try {
    // The validation split: the corpus's first units, until it holds val_fraction of the bytes; while it fills, a
    // unit ends (at a line end) where the validation split would be full, so a single long file splits too.
    CorpusReader::Piece piece;
    while (reader.next(piece)) {
      if (current.text.empty()) {
        current.starts_document = !done.document_open;
        current.val = done.val_bytes_assigned < val_bytes;
      }
      current.text += piece.text;
      done.document_open = !piece.ends_document;
      const auto unit_bytes = static_cast<std::int64_t>(current.text.size());
      const bool val_full = current.val && done.val_bytes_assigned + unit_bytes >= val_bytes;
      if (piece.ends_document || unit_bytes >= static_cast<std::int64_t>(kUnitBytes) || val_full) {
        if (current.val) done.val_bytes_assigned += unit_bytes;
        batch_bytes += current.text.size();
        batch.push_back(std::move(current));
        current = Unit{};
        if (batch.size() >= static_cast<std::size_t>(threads) * 16 || batch_bytes >= kUnitBytes * 4 * threads) {
          flush();
          const bool stop = options.cancel && options.cancel->load();
          if (stop || std::chrono::duration<double>(std::chrono::steady_clock::now() - last_save).count() >=
                          options.save_every_s)
            save();
          if (stop) {
            result.stopped = true;
            result.folder = options.out;
            result.train_tokens = done.train_tokens;
            result.val_tokens = done.val_tokens;
            result.documents = reader.documents();
            result.bytes = reader.bytes_read();
            result.seconds = seconds();
            return result;  // the writer keeps its files for --resume
          }
        }
      }
      if (progress && std::chrono::steady_clock::now() - last_report > std::chrono::milliseconds(500)) {
        last_report = std::chrono::steady_clock::now();
        report();
      }
    }
    if (!current.text.empty()) batch.push_back(std::move(current));
    flush();
  } catch (const Error& e) {
    if (!saved_once) throw;
    throw DataError(std::string(e.what()) + " (the preparation up to its last saved progress is kept in " +
                    options.out + ": continue it with --resume)");
  }
  if (done.train_tokens == 0 || done.val_tokens == 0)
    throw DataError(options.corpus.front() + ": too little text for a " +
                    (done.train_tokens == 0 ? "training split after the validation split" : "validation split") +
                    " (--val-fraction " + fmt::format("{}", options.val_fraction) + ")");
  const auto shards = writer->finish();

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
      {"tokens", {{"train", done.train_tokens}, {"val", done.val_tokens}}},
      {"chars", {{"train", done.chars_train}, {"val", done.chars_val}}},
      {"shards", shards},
  };
  result.folder = options.out;
  result.manifest = (fs::path(options.out) / kShardManifest).string();
  write_json_atomically(result.manifest, manifest);
  std::error_code ec;
  fs::remove(progress_file, ec);  // finished: nothing left to continue
  result.train_tokens = done.train_tokens;
  result.val_tokens = done.val_tokens;
  result.documents = reader.documents();
  result.bytes = reader.total_bytes();
  result.shards = static_cast<std::int64_t>(shards.size());
  result.seconds = seconds();
  return result;
}

}  // namespace routelab
