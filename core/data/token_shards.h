// Token shards on disk: files of token ids read through memory maps, so a corpus of any size trains in constant
// memory. Three layouts load as they are:
//   - RouteLab's prepared folder (`routelab-cli prepare`): llm.c's shard files plus `routelab-shards.json`, the
//     manifest holding the tokenizer (its model's bytes included), each shard's split and token count, and the
//     characters per split (for bits per character);
//   - llm.c's shards: a header of 256 little-endian int32 (magic 20240520 with uint16 tokens, or 20240801 with
//     uint32 tokens; version; token count) and then the tokens; "val" in a file's name marks validation shards;
//   - nanoGPT's `train.bin` / `val.bin`: raw little-endian uint16 tokens, no header.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace routelab {

inline constexpr std::int32_t kLlmcMagic16 = 20240520;  ///< llm.c's GPT-2 shards: uint16 tokens, version 1
inline constexpr std::int32_t kLlmcMagic32 = 20240801;  ///< llm.c's Llama-3 shards: uint32 tokens, version 7
inline constexpr std::int64_t kLlmcHeaderBytes = 256 * 4;
inline constexpr const char* kShardManifest = "routelab-shards.json";

/// One shard file, memory-mapped read-only. DataError naming the file when it cannot be mapped, its header is not
/// llm.c's, or its size disagrees with the token count the header states.
class MappedShard {
 public:
  enum class Layout { Llmc, Raw16 };
  MappedShard(const std::string& path, Layout layout);
  ~MappedShard();
  MappedShard(MappedShard&& other) noexcept;
  MappedShard& operator=(MappedShard&&) = delete;
  MappedShard(const MappedShard&) = delete;

  const std::string& path() const { return path_; }
  std::int64_t tokens() const { return tokens_; }
  int token_bytes() const { return width_; }
  /// Copies tokens first .. first + count - 1 into `out`, widened to int64.
  void copy(std::int64_t first, std::int64_t count, std::int64_t* out) const;
  /// The largest token id in the shard (reads it whole once; for checks against a vocabulary).
  std::int64_t max_token() const;

 private:
  std::string path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const unsigned char* tokens_begin_ = nullptr;
  std::int64_t tokens_ = 0;
  int width_ = 2;
};

/// The shards of one split read as one stream of tokens.
class ShardStream {
 public:
  void add(MappedShard shard);
  std::int64_t tokens() const { return total_; }
  std::size_t shards() const { return shards_.size(); }
  const MappedShard& shard(std::size_t i) const { return shards_[i]; }
  /// Tokens first .. first + count - 1 of the stream (across shard ends) into `out`.
  void copy(std::int64_t first, std::int64_t count, std::int64_t* out) const;

 private:
  std::vector<MappedShard> shards_;
  std::vector<std::int64_t> starts_;  ///< first stream position of each shard
  std::int64_t total_ = 0;
};

/// What a folder of shards holds, found by its layout.
struct ShardFolder {
  std::string layout;                  ///< "routelab", "llm.c" or "nanogpt"
  std::vector<std::string> train, val; ///< shard files in order
  MappedShard::Layout file_layout = MappedShard::Layout::Llmc;
  nlohmann::json manifest;             ///< RouteLab's manifest; null for the others
};

/// Reads a folder of shards (or RouteLab's manifest file itself). DataError naming the folder when it holds no
/// shards of a known layout, no training or no validation shard, or a manifest that does not parse or names a
/// missing file.
ShardFolder find_shards(const std::string& path);

/// Writes llm.c shard files of at most `shard_tokens` tokens: `<prefix>_<split>_<index>.bin` with 6-digit indexes
/// counted across splits, as llm.c names them. The header's count is written when a shard is closed; every file is
/// written under a temporary name and renamed by finish(), so a writer stopped before it leaves no shard behind
/// (unless it was told to keep them for a later writer to continue: state(), keep_unfinished(), the state
/// constructor).
class ShardWriter {
 public:
  ShardWriter(std::string folder, std::string prefix, int token_bytes, std::int64_t shard_tokens);
  /// Continues the writer whose state() was `state` in `folder`: its full shards are checked (each temporary file
  /// as long as its count), its open ones cut back to their counts (what was written after the state was taken goes)
  /// and reopened, and the temporary files of shards begun after it removed. DataError naming the file where one is
  /// missing or shorter than its count. Unfinished, it keeps its files (as after keep_unfinished).
  ShardWriter(std::string folder, std::string prefix, int token_bytes, std::int64_t shard_tokens,
              const nlohmann::json& state);
  ~ShardWriter();
  /// Appends tokens to the open shard of `split` ("train" or "val"), opening the next shard as each fills.
  void append(const std::string& split, const std::vector<std::int32_t>& tokens);
  /// Closes every open shard; returns {"file", "split", "tokens"} for each written shard, in index order.
  nlohmann::json finish();
  /// What a later writer needs to continue this one, with every byte written so far flushed to the files (synced to
  /// the disk with `sync`): the next index, the full shards and the open ones with their counts.
  nlohmann::json state(bool sync);
  /// From now on, a writer destroyed unfinished leaves its temporary files for a later writer to continue.
  void keep_unfinished() { keep_ = true; }

 private:
  struct Open;
  void close(Open& open);
  Open& open_shard(const std::string& split, const std::string& file, const char* mode);
  std::int64_t file_bytes(std::int64_t tokens) const { return kLlmcHeaderBytes + tokens * width_; }
  bool keep_ = false;
  std::string folder_, prefix_;
  int width_;
  std::int64_t shard_tokens_;
  int next_index_ = 0;
  std::vector<std::unique_ptr<Open>> open_;  ///< one per split being written
  std::vector<std::string> closed_temps_;    ///< full shards still under their temporary names
  nlohmann::json written_ = nlohmann::json::array();
};

}  // namespace routelab
