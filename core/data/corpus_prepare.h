// `routelab-cli prepare`: a corpus on disk (text files, folders, JSON lines) tokenized on every core into llm.c
// shard files with RouteLab's manifest (token_shards.h), streamed: memory use depends on the batch of documents
// in flight, not on the corpus.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace routelab {

struct PrepareOptions {
  std::vector<std::string> corpus;           ///< text files, folders of them, JSON lines
  std::string json_field = "text";
  std::string tokenizer = "sentencepiece";   ///< "sentencepiece" (tokenizer_model) or "byte"
  std::string tokenizer_model;
  std::string out;                           ///< a new or empty folder
  double val_fraction = 0.005;               ///< the corpus's first documents, by bytes, form the validation split
  std::int64_t shard_tokens = 100'000'000;   ///< tokens per shard file (llm.c's size)
  int threads = 0;                           ///< 0: every core
  /// Each document starts with the tokenizer's beginning-of-sequence id, where it has one (as Llama trains).
  bool bos = true;
  /// Continue the unfinished preparation in `out` (its kPrepareProgress file) instead of starting in a new folder.
  bool resume = false;
  /// Set, the preparation stops after the batch in flight, its progress saved for `resume` (PrepareResult::stopped).
  const std::atomic<bool>* cancel = nullptr;
  /// How often the progress is saved (seconds; 0: after every batch of documents).
  double save_every_s = 30;
};

/// The progress file of an unfinished preparation, in its folder beside the shards' temporary files.
inline constexpr const char* kPrepareProgress = "prepare-progress.json";

struct PrepareProgress {
  std::int64_t bytes_read = 0, bytes_total = 0, tokens = 0, documents = 0;
  double seconds = 0;
};

struct PrepareResult {
  bool stopped = false;  ///< by `cancel`: no manifest yet; `resume` continues
  bool resumed = false;  ///< continued an unfinished preparation
  std::string folder, manifest;
  std::int64_t train_tokens = 0, val_tokens = 0, documents = 0, bytes = 0, shards = 0;
  double seconds = 0;
};

/// Tokenizes and writes the shards, then the manifest (last, so a folder without one was not finished).
/// ConfigError for bad options or an `out` folder that is not empty; DataError naming the file for an unreadable
/// corpus or tokenizer. Every `save_every_s` it saves its progress (kPrepareProgress, after the shards' bytes are on
/// disk); a preparation stopped, failed or killed after that continues with `resume` and the same options, and writes
/// the same shards and manifest as one that never stopped. A resume with other options, tokenizer or corpus files
/// (by name and size) is a ConfigError naming the difference.
PrepareResult prepare_shards(const PrepareOptions& options,
                             const std::function<void(const PrepareProgress&)>& progress);

}  // namespace routelab
