// SentencePiece training over a streamed corpus: CorpusReader's pieces, split into lines, feed SentencePiece's
// sentence iterator; the trained model is written through a temporary file and a rename.
#include "core/data/tokenizer_training.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unordered_map>

#include "core/data/corpus_files.h"
#include "core/data/sentencepiece_tokenizer.h"
#include "core/data/spm_api.h"
#include "core/util/errors.h"

namespace fs = std::filesystem;

namespace routelab {
namespace {

using Clock = std::chrono::steady_clock;

/// The corpus as SentencePiece's sentences: every non-empty line, without its newline.
class LineIterator {
 public:
  LineIterator(CorpusReader& reader, const std::function<void(const TokenizerTrainingProgress&)>& progress)
      : reader_(reader), progress_(progress), start_(Clock::now()), last_report_(start_) {}

  /// SpmApi::train's line callback.
  static bool next_line(void* self, std::string* line) {
    auto& it = *static_cast<LineIterator*>(self);
    it.advance();
    if (it.done_) return false;
    *line = it.line_;
    return true;
  }

  std::int64_t lines() const { return lines_; }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double read_seconds() const { return read_seconds_; }
  /// The error that stopped the iteration early, rethrown by the caller after SentencePiece returns.
  const std::exception_ptr& error() const { return error_; }

  void report() const {
    if (progress_) progress_({reader_.bytes_read(), reader_.total_bytes(), lines_, seconds()});
  }

 private:
  void advance() {
    try {
      while (true) {
        if (pending_.empty() || offset_ >= pending_.size()) {
          CorpusReader::Piece piece;
          if (!reader_.next(piece)) {
            done_ = true;
            read_seconds_ = seconds();
            report();
            return;
          }
          pending_ = std::move(piece.text);
          offset_ = 0;
        }
        auto end = pending_.find('\n', offset_);
        if (end == std::string::npos) end = pending_.size();
        line_.assign(pending_, offset_, end - offset_);
        offset_ = end + 1;
        if (!line_.empty() && line_.back() == '\r') line_.pop_back();
        if (line_.empty()) continue;
        ++lines_;
        if (progress_ && Clock::now() - last_report_ > std::chrono::milliseconds(500)) {
          last_report_ = Clock::now();
          report();
        }
        return;
      }
    } catch (...) {
      error_ = std::current_exception();  // the training sees the corpus end here; the error is rethrown after it
      done_ = true;
    }
  }

  CorpusReader& reader_;
  const std::function<void(const TokenizerTrainingProgress&)>& progress_;
  Clock::time_point start_, last_report_;
  std::string pending_, line_;
  std::size_t offset_ = 0;
  std::int64_t lines_ = 0;
  double read_seconds_ = 0;
  bool done_ = false;
  std::exception_ptr error_;
};

void check_options(const TokenizerTrainingOptions& o) {
  if (o.corpus.empty()) throw ConfigError("tokenizer train: give a corpus (--corpus PATH)");
  if (o.out.empty()) throw ConfigError("tokenizer train: give the model file to write (--out FILE)");
  if (o.type != "bpe" && o.type != "unigram")
    throw ConfigError("tokenizer train: --type '" + o.type + "' (expected bpe or unigram)");
  if (o.vocab_size < 8 || o.vocab_size > (1 << 20))
    throw ConfigError("tokenizer train: --vocab " + std::to_string(o.vocab_size) + " must be in 8..1048576");
  if (o.character_coverage <= 0 || o.character_coverage > 1)
    throw ConfigError("tokenizer train: --character-coverage " + std::to_string(o.character_coverage) +
                      " must be in (0, 1]");
  if (o.sample_lines < 0) throw ConfigError("tokenizer train: --sample-lines must be >= 0");
}

void write_atomically(const std::string& path, const std::string& bytes) {
  const fs::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) throw DataError(path + ": cannot create its folder (" + ec.message() + ")");
  }
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::remove(temp.c_str());
      throw DataError(path + ": cannot write the model");
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    std::remove(temp.c_str());
    throw DataError(path + ": cannot write the model (" + ec.message() + ")");
  }
}

}  // namespace

TokenizerTrainingResult train_sentencepiece(const TokenizerTrainingOptions& options,
                                            const std::function<void(const TokenizerTrainingProgress&)>& progress) {
  check_options(options);
  CorpusReader reader(options.corpus, options.json_field);
  const int threads = options.threads > 0 ? options.threads
                                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Llama's choices where they keep text intact: no normalization, white space kept as it is, digits split, byte
  // fallback; so decode(encode(text)) == text for any UTF-8 text.
  const std::unordered_map<std::string, std::string> spec = {
      {"model_type", options.type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"num_threads", std::to_string(threads)},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"byte_fallback", options.byte_fallback ? "true" : "false"},
      {"input_sentence_size", std::to_string(options.sample_lines)},
      {"shuffle_input_sentence", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"max_sentence_length", "65536"},
      {"minloglevel", options.log ? "0" : "2"},
  };
  LineIterator lines(reader, progress);
  std::string model, error;
  const auto started = Clock::now();
  const bool trained = spm_api().train(spec, &LineIterator::next_line, &lines, &model, &error);
  if (lines.error()) std::rethrow_exception(lines.error());
  const auto where = options.corpus.size() == 1 ? options.corpus.front()
                                                : options.corpus.front() + " (and " +
                                                      std::to_string(options.corpus.size() - 1) + " more)";
  if (lines.lines() == 0) throw DataError(where + ": the corpus has no text");
  if (!trained) throw DataError(where + ": SentencePiece could not train the tokenizer: " + error);
  // Load what was trained before it replaces anything, so a damaged result never reaches the disk.
  const auto tokenizer = SentencePieceTokenizer::from_bytes(model, options.out);
  write_atomically(options.out, model);
  TokenizerTrainingResult result;
  result.path = options.out;
  result.hash = tokenizer->hash();
  result.vocab_size = tokenizer->vocab_size();
  result.lines = lines.lines();
  result.bytes = reader.bytes_read();
  result.read_seconds = lines.read_seconds();
  result.train_seconds = std::chrono::duration<double>(Clock::now() - started).count() - result.read_seconds;
  return result;
}

}  // namespace routelab
