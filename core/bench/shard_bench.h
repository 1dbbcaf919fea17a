// Memory against corpus size for token shards: writes a shard set of a given size (random token ids, 2 bytes each),
// maps it as training does, draws batches of random windows, and reports the process's memory (anonymous and
// file-backed resident, from /proc/self/status) after each phase, with the sampling rate. Shows that a corpus
// many times larger than memory trains in constant anonymous memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace routelab {

struct ShardBenchOptions {
  std::string folder;                   ///< where the shards are written (a new or empty folder)
  double gigabytes = 4;                 ///< size of the shard set
  std::int64_t vocab = 50257;           ///< token ids are drawn below this
  std::int64_t batch = 8, context = 1024, batches = 2000;
  bool keep = false;                    ///< keep the shards afterwards
};

struct ShardBenchPhase {
  std::string name;
  double rss_anon_mb = 0, rss_file_mb = 0, seconds = 0;
};

struct ShardBenchResult {
  std::int64_t tokens = 0, shards = 0;
  double write_mb_per_s = 0, batches_per_s = 0, tokens_per_s = 0;
  std::vector<ShardBenchPhase> phases;
};

ShardBenchResult bench_shards(const ShardBenchOptions& options);

}  // namespace routelab
