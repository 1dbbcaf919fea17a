// Times the eval-mode forwards of a dense model, an architecture as configured and the same weights with its speed
// options, the routers forced to target shares by the architecture's registered hook (speed_options_bench.h).
#include "core/bench/speed_options_bench.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>

#include <torch/torch.h>

#include "core/bench/bench_timing.h"
#include "core/config/experiment_config.h"
#include "core/data/dataset.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/train/checkpoint.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

double trace_flops(const std::vector<LayerTrace>& trace) {
  double f = 0;
  for (const auto& t : trace) f += t.flops;
  return f;
}

/// Mean over the routed layers of the share the architecture's FLOPs model prices (its priced_share_stat where the
/// layer reports it, else the layer's routed fraction); 1 without routed layers.
double priced_share(const ArchitectureEntry& entry, const std::vector<LayerTrace>& trace) {
  double sum = 0;
  int n = 0;
  for (const auto& t : trace) {
    if (!t.routed) continue;
    const auto it = entry.priced_share_stat.empty() ? t.stats.end() : t.stats.find(entry.priced_share_stat);
    sum += it != t.stats.end() ? it->second : t.routed_fraction;
    ++n;
  }
  return n ? sum / n : 1.0;
}

/// The model section and data context of a run's checkpoint (its stored config; the context as its dataset has it).
std::pair<nlohmann::json, ModelContext> checkpoint_model(const std::string& path) {
  std::string config_json;
  try {
    torch::serialize::InputArchive in;
    in.load_from(path);
    c10::IValue config;
    if (!in.try_read("config", config) || !config.isString())
      throw CheckpointError(path + ": not a RouteLab checkpoint (no config)");
    config_json = config.toStringRef();
  } catch (const c10::Error& e) {
    throw CheckpointError(path + ": not a readable RouteLab checkpoint (" + e.what_without_backtrace() + ")");
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(config_json);
  } catch (const nlohmann::json::parse_error& e) {
    throw CheckpointError(path + ": config: not JSON (" + e.what() + ")");
  }
  const auto config = config_from_resolved(doc, path);
  const auto data = make_dataset(config.data());
  return {config.model(), {data->tokenizer().vocab_size(), data->context()}};
}

/// `o.arch`, or the first registered architecture with speed options and a benchmark hook.
const ArchitectureEntry& bench_architecture(const SpeedBenchOptions& o) {
  if (!o.arch.empty()) return architecture(o.arch);
  for (const auto& entry : architectures())
    if (!entry.speed_options.empty() && entry.force_routed_share) return entry;
  throw ConfigError("bench arch: no registered architecture states speed options");
}

/// A random-weight model section of the bench architecture at the bench shape (GPT-2 style where it has a style).
nlohmann::json bench_model(const SpeedBenchOptions& o) {
  const auto& entry = bench_architecture(o);
  auto model = schema_defaults(entry.options);
  model["arch"] = entry.id;
  const std::vector<std::pair<const char*, nlohmann::json>> shape = {
      {"n_layer", o.n_layer}, {"n_embd", o.n_embd}, {"n_head", o.n_head}, {"d_ff", o.d_ff}, {"style", "gpt2"}};
  for (const auto& [key, value] : shape)
    if (model.contains(key)) model[key] = value;
  return model;
}

/// The dense baseline of the same shape: the baseline's options where the section states them.
nlohmann::json dense_like(const nlohmann::json& model) {
  auto dense = schema_defaults(architecture(kBaselineArchitecture).options);
  for (auto& [key, value] : dense.items())
    if (model.contains(key)) value = model.at(key);
  dense["arch"] = kBaselineArchitecture;
  return dense;
}

}  // namespace

SpeedBenchResult bench_speed_options(const SpeedBenchOptions& o) {
  if (o.threads > 0) at::set_num_threads(o.threads);
  if (o.reps < 1) throw ConfigError("bench speed --reps: " + std::to_string(o.reps) + " must be at least 1");
  if (o.warmup < 0) throw ConfigError("bench speed --warmup: " + std::to_string(o.warmup) + " must be at least 0");
  if (o.batch < 1) throw ConfigError("bench speed --batch: " + std::to_string(o.batch) + " must be at least 1");
  if (o.seq < 1) throw ConfigError("bench speed --seq: " + std::to_string(o.seq) + " must be at least 1");
  for (const double f : o.fractions)
    if (!(f >= 0.0 && f <= 1.0))
      throw ConfigError("bench speed --fractions: " + std::to_string(f) + " is outside [0, 1]");
  torch::manual_seed(0);
  nlohmann::json model;
  ModelContext ctx{o.vocab, o.seq};
  if (!o.checkpoint.empty()) std::tie(model, ctx) = checkpoint_model(o.checkpoint);
  else model = bench_model(o);
  const auto& entry = architecture(model.at("arch").get<std::string>());
  const auto origin = o.checkpoint.empty() ? std::string("bench arch") : o.checkpoint;
  if (entry.speed_options.empty() || !entry.force_routed_share)
    throw ConfigError(origin + ": '" + entry.id + "' has no speed options to bench (" +
                      "an architecture whose registry entry states speed_options and force_routed_share)");
  if (entry.check) entry.check(model, "model");
  auto fast_model = model;
  fast_model.update(entry.speed_options);

  auto base = create_model(model, ctx);
  if (!o.checkpoint.empty()) load_checkpoint(o.checkpoint, *base, nullptr);
  auto fast = create_model(fast_model, ctx);
  auto dense = create_model(dense_like(model), ctx);  // equal shape; its weights do not matter for timing
  const auto copy_weights = [](torch::nn::Module& from, torch::nn::Module& to) {
    torch::NoGradGuard no_grad;
    const auto source = from.named_parameters();
    for (auto& p : to.named_parameters()) p.value().copy_(source[p.key()]);
  };
  copy_weights(*base, *fast);

  SpeedBenchResult result;
  result.options = o;
  auto& ro = result.options;
  ro.arch = entry.id;
  ro.n_layer = base->num_layers();
  ro.vocab = base->vocab_size();
  ro.n_embd = model.value("n_embd", o.n_embd);
  ro.n_head = model.value("n_head", o.n_head);
  ro.d_ff = model.value("d_ff", o.d_ff);
  ro.seq = std::min<std::int64_t>(o.seq, ctx.context);
  result.threads = at::get_num_threads();
  result.model = base->describe();
  result.speed_options = entry.speed_options.dump();

  base->eval();
  fast->eval();
  dense->eval();
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, ro.vocab, {ro.batch, ro.seq}, torch::kLong);
  const double dense_flops = trace_flops(dense->forward(tokens, true).trace);
  for (const double fraction : o.fractions) {
    SpeedBenchRow row;
    row.target = fraction;
    for (int pass = 0; pass < 3; ++pass) entry.force_routed_share(*fast, tokens, fraction);
    copy_weights(*fast, *base);
    const auto fast_out = fast->forward(tokens, true);
    row.share = priced_share(entry, fast_out.trace);
    row.fast_flops_ratio = trace_flops(fast_out.trace) / dense_flops;
    row.base_flops_ratio = trace_flops(base->forward(tokens, true).trace) / dense_flops;
    const std::vector<std::function<void()>> runs = {[&] { dense->forward(tokens); }, [&] { base->forward(tokens); },
                                                     [&] { fast->forward(tokens); }};
    for (int w = 0; w < o.warmup; ++w)
      for (const auto& run : runs) run();
    std::vector<std::vector<double>> times(runs.size());
    for (int r = 0; r < o.reps; ++r)  // interleaved, so drifting machine load hits every model alike
      for (std::size_t i = 0; i < runs.size(); ++i) times[i].push_back(time_ms(runs[i]));
    row.dense_ms = median(times[0]);
    row.base_ms = median(times[1]);
    row.fast_ms = median(times[2]);
    result.rows.push_back(row);
  }
  return result;
}

std::string SpeedBenchResult::to_table() const {
  std::ostringstream out;
  const auto& o = options;
  out << "speed-options bench (" << o.arch << "): eval-mode forward, B " << o.batch << ", T " << o.seq << ", d "
      << o.n_embd << ", L " << o.n_layer << ", H " << o.n_head << ", d_ff " << o.d_ff << ", vocab " << o.vocab << ", "
      << threads << " threads, median of " << o.reps << " interleaved reps after " << o.warmup << " warm-up\n";
  out << "model: " << model << (o.checkpoint.empty() ? " (random weights)" : ", from " + o.checkpoint) << "\n";
  out << "base: the model as configured; fast: the same weights with " << speed_options << "\n";
  out << "speed = dense ms / ms (above 1: faster than dense); flops = layer FLOPs from the traces / dense\n";
  char line[256];
  std::snprintf(line, sizeof line, "%7s %7s %10s %10s %10s %8s %8s %8s %8s\n", "target", "share", "dense_ms",
                "base_ms", "fast_ms", "base_x", "fast_x", "base_fl", "fast_fl");
  out << line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%7.3f %7.3f %10.2f %10.2f %10.2f %8.3f %8.3f %8.3f %8.3f\n", r.target, r.share,
                  r.dense_ms, r.base_ms, r.fast_ms, r.dense_ms / r.base_ms, r.dense_ms / r.fast_ms, r.base_flops_ratio,
                  r.fast_flops_ratio);
    out << line;
  }
  out << "share: mean over routed layers of the share the FLOPs model prices, measured in the fast forward\n";
  return out.str();
}

}  // namespace routelab
