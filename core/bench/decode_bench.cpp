// Decode bench: each architecture built from its registry defaults at one shape, weights seeded, prefilled with a
// random context in one decode call, then N greedy single-token steps timed (after a short warm-up).
#include "core/bench/decode_bench.h"

#include <chrono>
#include <iomanip>
#include <sstream>

#include <torch/torch.h>
#include <torch/version.h>

#include "core/bench/bench_timing.h"
#include "core/inference/kv_cache.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/util/device.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

nlohmann::json model_section(const std::string& arch, const DecodeBenchOptions& o, std::int64_t max_len) {
  auto m = schema_defaults(architecture(arch).options);
  m["n_layer"] = o.n_layer;
  m["n_embd"] = o.n_embd;
  m["n_head"] = o.n_head;
  if (m.contains("n_kv_head")) m["n_kv_head"] = o.n_kv_head;
  m["max_seq_len"] = max_len;
  architecture(arch).check(m, "model");
  m["arch"] = arch;
  return m;
}

}  // namespace

DecodeBenchResult bench_decode(const DecodeBenchOptions& in) {
  DecodeBenchResult result;
  auto o = in;
  if (o.quick) {
    o.contexts = {64, 128};
    o.steps = 4;
    o.warmup = 1;
    o.n_embd = 64;
    o.n_head = 2;
    o.n_layer = 4;
  }
  if (o.steps < 1) throw ConfigError("bench decode --steps: must be at least 1");
  if (o.batch < 1) throw ConfigError("bench decode --batch: must be at least 1");
  for (const auto c : o.contexts)
    if (c < 1) throw ConfigError("bench decode --contexts: " + std::to_string(c) + " must be at least 1");
  if (o.archs.empty()) o.archs = architecture_ids(Task::LanguageModel);
  for (const auto& a : o.archs)
    if (architecture(a).task != Task::LanguageModel)  // unknown ids fail here too, before any work
      throw ConfigError("bench decode --archs: '" + a + "' is a classifier, it does not decode");
  const auto device = resolve_device(o.device);
  result.threads = configure_threads(o.threads);
  result.device = device.str();
  result.options = o;
  torch::NoGradGuard no_grad;
  std::int64_t max_context = 0;
  for (const auto c : o.contexts) max_context = std::max(max_context, c);
  const auto max_len = max_context + o.warmup + o.steps + 1;
  const auto kv_heads = o.n_kv_head > 0 ? o.n_kv_head : o.n_head;
  const auto dense_entry = 2 * kv_heads * (o.n_embd / o.n_head) * 4;  // fp32 key + value of one token, one layer
  for (const auto& arch : o.archs) {
    torch::manual_seed(static_cast<std::int64_t>(o.seed));
    auto model = create_model(model_section(arch, o, max_len), {o.vocab, max_len});
    model->to(device);
    model->eval();
    if (device.is_cuda()) {  // the first calls pay for the context, cuBLAS handles and kernel selection: untimed
      auto state = model->begin_decode(o.batch);
      state->reserve(o.contexts.front() + 1);
      const auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
      model->decode(*state, model->decode(*state, torch::zeros({o.batch, o.contexts.front()}, ids))
                                .select(1, o.contexts.front() - 1).argmax(-1).unsqueeze(1));
      synchronize(device);
    }
    for (const auto context : o.contexts) {
      torch::manual_seed(static_cast<std::int64_t>(o.seed) + context);
      const auto prompt = torch::randint(o.vocab, {o.batch, context}, torch::TensorOptions().dtype(torch::kLong)).to(device);
      auto state = model->begin_decode(o.batch);
      state->reserve(context + o.warmup + o.steps);
      auto t0 = std::chrono::steady_clock::now();
      auto logits = model->decode(*state, prompt);
      synchronize(device);
      DecodeBenchRow row;
      row.arch = arch;
      row.context = context;
      row.prefill_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      auto next = logits.select(1, logits.size(1) - 1).argmax(-1).unsqueeze(1);  // (B, 1) greedy
      for (int w = 0; w < o.warmup; ++w) next = model->decode(*state, next).select(1, 0).argmax(-1).unsqueeze(1);
      synchronize(device);
      t0 = std::chrono::steady_clock::now();
      for (std::int64_t s = 0; s < o.steps; ++s) next = model->decode(*state, next).select(1, 0).argmax(-1).unsqueeze(1);
      synchronize(device);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      row.ms_per_step = 1000.0 * seconds / static_cast<double>(o.steps);
      row.tokens_per_second = static_cast<double>(o.batch * o.steps) / seconds;
      row.cache_live_bytes = state->live_bytes();
      row.cache_allocated_bytes = state->allocated_bytes();
      row.dense_cache_bytes = o.batch * state->length() * o.n_layer * dense_entry;
      row.kv_ratio = static_cast<double>(row.cache_live_bytes) / static_cast<double>(row.dense_cache_bytes);
      result.rows.push_back(row);
    }
  }
  for (auto& row : result.rows)
    for (const auto& dense : result.rows)
      if (dense.arch == kBaselineArchitecture && dense.context == row.context) row.speed_vs_dense = row.tokens_per_second / dense.tokens_per_second;
  return result;
}

std::string DecodeBenchResult::to_table() const {
  const auto& o = options;
  std::ostringstream out;
  out << "decode bench: d " << o.n_embd << ", L " << o.n_layer << ", H " << o.n_head << ", batch " << o.batch
      << ", vocab " << o.vocab << ", " << o.steps << " greedy steps after the prefill, " << device << ", " << threads
      << " threads; random weights (routers as initialised); KV fp32\n";
  out << "| arch | context | prefill ms | ms/step | tokens/s | vs dense | KV live MiB | KV allocated MiB | KV / dense |\n"
      << "|---|---|---|---|---|---|---|---|---|\n";
  out << std::fixed;
  const auto mib = [](std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  for (const auto& r : rows)
    out << "| " << r.arch << " | " << r.context << " | " << std::setprecision(1) << r.prefill_ms << " | "
        << std::setprecision(2) << r.ms_per_step << " | " << std::setprecision(1) << r.tokens_per_second << " | "
        << std::setprecision(2) << r.speed_vs_dense << "x | " << std::setprecision(2) << mib(r.cache_live_bytes)
        << " | " << mib(r.cache_allocated_bytes) << " | " << std::setprecision(3) << r.kv_ratio << " |\n";
  return out.str();
}

nlohmann::json DecodeBenchResult::to_json() const {
  nlohmann::json rows_json = nlohmann::json::array();
  for (const auto& r : rows)
    rows_json.push_back({{"arch", r.arch}, {"context", r.context}, {"prefill_ms", r.prefill_ms},
                         {"ms_per_step", r.ms_per_step}, {"tokens_per_second", r.tokens_per_second},
                         {"speed_vs_dense", r.speed_vs_dense}, {"cache_live_bytes", r.cache_live_bytes},
                         {"cache_allocated_bytes", r.cache_allocated_bytes}, {"dense_cache_bytes", r.dense_cache_bytes},
                         {"kv_ratio", r.kv_ratio}});
  return {{"device", device}, {"threads", threads}, {"n_embd", options.n_embd}, {"n_layer", options.n_layer},
          {"n_head", options.n_head}, {"batch", options.batch}, {"steps", options.steps}, {"rows", rows_json}};
}

}  // namespace routelab
