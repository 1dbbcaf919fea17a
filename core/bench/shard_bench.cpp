// The shard memory benchmark: write, map, sample, and read the process's memory between phases.
#include "core/bench/shard_bench.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/data/shard_dataset.h"
#include "core/data/token_shards.h"
#include "core/util/errors.h"

namespace fs = std::filesystem;

namespace routelab {
namespace {

/// {RssAnon, RssFile} of this process in MB.
std::pair<double, double> resident_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  double anon = 0, file = 0;
  while (std::getline(status, line)) {
    std::istringstream in(line);
    std::string key;
    double kb = 0;
    in >> key >> kb;
    if (key == "RssAnon:") anon = kb / 1024.0;
    if (key == "RssFile:") file = kb / 1024.0;
  }
  return {anon, file};
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Refuses options the bench cannot run with, naming the option: sizes below one, token ids that 2 bytes cannot
/// hold, and a shard set larger than the free space of the file system that would hold it (checked before a byte is
/// written: the bench would otherwise fill the disk).
void check_options(const ShardBenchOptions& o) {
  if (o.folder.empty()) throw ConfigError("bench shards: give a folder for the shards (--dir)");
  if (!(o.gigabytes > 0)) throw ConfigError("bench shards: --gb must be positive");
  for (const auto& [option, value] :
       {std::pair{"--batch", o.batch}, {"--context", o.context}, {"--batches", o.batches}})
    if (value < 1)
      throw ConfigError(std::string("bench shards: ") + option + " must be at least 1, got " + std::to_string(value));
  if (o.vocab < 2 || o.vocab > 65536)
    throw ConfigError("bench shards: a vocabulary of " + std::to_string(o.vocab) +
                      " ids (2-byte tokens hold 2 to 65536)");
  std::error_code ec;
  if (fs::exists(o.folder, ec) && !fs::is_empty(o.folder, ec))
    throw ConfigError("bench shards: --dir " + o.folder + " is not empty");
  auto holder = fs::absolute(o.folder, ec);  // the folder, or the nearest folder above it that exists
  while (holder.has_parent_path() && holder != holder.parent_path() && !fs::exists(holder, ec))
    holder = holder.parent_path();
  const auto space = fs::space(holder, ec);
  if (!ec && o.gigabytes * 1e9 > static_cast<double>(space.available)) {
    std::ostringstream text;
    text << "bench shards: --gb " << o.gigabytes << " does not fit: " << holder.string() << " has "
         << static_cast<double>(space.available) / 1e9 << " GB free";
    throw ConfigError(text.str());
  }
}

}  // namespace

ShardBenchResult bench_shards(const ShardBenchOptions& o) {
  check_options(o);
  std::error_code ec;
  ShardBenchResult result;
  const auto phase = [&](const std::string& name, double seconds) {
    const auto [anon, file] = resident_mb();
    result.phases.push_back({name, anon, file, seconds});
  };
  phase("start", 0);

  const auto total = static_cast<std::int64_t>(o.gigabytes * 1e9 / 2);
  const std::int64_t per_shard = 100'000'000;
  auto start = std::chrono::steady_clock::now();
  {
    ShardWriter writer(o.folder, "bench", 2, per_shard);
    std::mt19937_64 gen(1234);
    std::vector<std::int32_t> chunk(1 << 20);
    const std::int64_t val = std::min<std::int64_t>(total / 100, 10'000'000);
    for (std::int64_t done = 0; done < total;) {
      // The validation split's tokens first, then the training split's: a chunk never crosses from one to the other.
      const auto n = std::min<std::int64_t>(static_cast<std::int64_t>(chunk.size()), (done < val ? val : total) - done);
      chunk.resize(static_cast<std::size_t>(n));
      for (auto& t : chunk) t = static_cast<std::int32_t>(gen() % static_cast<std::uint64_t>(o.vocab));
      writer.append(done < val ? "val" : "train", chunk);
      done += n;
    }
    const auto shards = writer.finish();
    result.shards = static_cast<std::int64_t>(shards.size());
    const nlohmann::json manifest = {{"format", "routelab-shards"},
                                     {"version", 1},
                                     {"tokenizer", {{"kind", "ids"}, {"vocab", o.vocab}}},
                                     {"shards", shards}};
    std::ofstream(fs::path(o.folder) / kShardManifest) << manifest.dump(1);
  }
  const double write_s = since(start);
  result.tokens = total;
  result.write_mb_per_s = static_cast<double>(total) * 2 / 1e6 / write_s;
  phase("written", write_s);

  start = std::chrono::steady_clock::now();
  ShardDatasetOptions options;
  options.path = o.folder;
  options.context = o.context;
  const ShardDataset data(options);
  phase("mapped", since(start));

  start = std::chrono::steady_clock::now();
  std::int64_t checksum = 0;
  for (std::int64_t b = 0; b < o.batches; ++b)
    checksum += data.sample(Split::Train, o.batch, static_cast<std::uint64_t>(b)).input[0][0].item<std::int64_t>();
  const double sample_s = since(start);
  result.batches_per_s = static_cast<double>(o.batches) / sample_s;
  result.tokens_per_s = result.batches_per_s * static_cast<double>(o.batch * o.context);
  phase("sampled (checksum " + std::to_string(checksum) + ")", sample_s);
  if (!o.keep) fs::remove_all(o.folder, ec);
  return result;
}

}  // namespace routelab
