// Decode throughput per architecture at equal shape: prefill a context of 1K, 4K or 8K tokens through the KV-cache
// decode path, then time N single-token greedy decode steps; cache bytes held next to the dense model's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace routelab {

struct DecodeBenchOptions {
  std::vector<std::string> archs;  ///< empty: every registered language model
  std::vector<std::int64_t> contexts{1024, 4096, 8192};
  std::int64_t steps = 32;  ///< timed decode steps after the prefill
  std::int64_t batch = 1;
  std::int64_t n_embd = 256, n_layer = 6, n_head = 8, n_kv_head = 0, vocab = 256;
  int warmup = 2;           ///< untimed decode steps before the timed ones
  int threads = 0;          ///< 0: all cores
  std::string device = "cpu";
  std::uint64_t seed = 0;   ///< weights (random, routers untrained: routing as initialised)
  /// smoke test: contexts 64 and 128, 4 steps, d 64, 2 heads, 4 layers
  bool quick = false;
};

struct DecodeBenchRow {
  std::string arch;
  std::int64_t context = 0;
  double prefill_ms = 0;
  double ms_per_step = 0;          ///< mean over the timed steps (one token per sequence each)
  double tokens_per_second = 0;    ///< batch x steps / time
  double speed_vs_dense = 0;       ///< tokens/s over the dense model's at the same context (0 without dense)
  std::int64_t cache_live_bytes = 0, cache_allocated_bytes = 0;
  std::int64_t dense_cache_bytes = 0;  ///< a dense model of the same shape at the same length (analytic)
  double kv_ratio = 0;             ///< live / dense
};

struct DecodeBenchResult {
  DecodeBenchOptions options;  ///< as run (quick applied)
  int threads = 0;
  std::string device;
  std::vector<DecodeBenchRow> rows;
  std::string to_table() const;
  nlohmann::json to_json() const;
};

/// Throws ConfigError for an unknown architecture or option, DeviceError for an unavailable device.
DecodeBenchResult bench_decode(const DecodeBenchOptions& options);

}  // namespace routelab
