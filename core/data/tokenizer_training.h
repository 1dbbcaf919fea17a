// Training a SentencePiece tokenizer (BPE or unigram) on a corpus on disk, streamed line by line into
// SentencePiece's trainer, which uses every core. The result is a `.model` file that `data.tokenizer_model` names.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace routelab {

struct TokenizerTrainingOptions {
  std::vector<std::string> corpus;     ///< text files, folders of them, JSON lines (see CorpusReader)
  std::string json_field = "text";     ///< the text field of JSON-lines documents
  std::string out;                     ///< the .model file to write (replaced atomically)
  std::int64_t vocab_size = 8000;
  std::string type = "bpe";            ///< "bpe" or "unigram"
  int threads = 0;                     ///< 0: every core
  /// Lines drawn at random for training (SentencePiece's input_sentence_size); 0: every line.
  std::int64_t sample_lines = 0;
  /// Share of characters the vocabulary covers; the rarest fall back to bytes (or <unk> without byte_fallback).
  double character_coverage = 0.9995;
  /// As Llama's tokenizer: unknown characters become UTF-8 byte pieces, so every text round-trips.
  bool byte_fallback = true;
  bool log = true;                     ///< SentencePiece's own progress log on stderr
};

struct TokenizerTrainingProgress {
  std::int64_t bytes_read = 0, bytes_total = 0, lines = 0;
  double seconds = 0;
};

struct TokenizerTrainingResult {
  std::string path, hash;
  std::int64_t vocab_size = 0, lines = 0, bytes = 0;
  double read_seconds = 0, train_seconds = 0;
};

/// Trains and writes options.out. `progress` is called while the corpus is read (at most every 0.5 s, and once at
/// the end). ConfigError for bad options; DataError naming the file for an unreadable corpus or a failed training
/// (SentencePiece's message, e.g. a vocabulary larger than the corpus allows).
TokenizerTrainingResult train_sentencepiece(const TokenizerTrainingOptions& options,
                                            const std::function<void(const TokenizerTrainingProgress&)>& progress);

}  // namespace routelab
