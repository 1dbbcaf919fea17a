// Forces TSA's routers to target active fractions by their output biases, then times dense, TSA soft and TSA
// sparse eval-mode forwards interleaved (median of several repetitions) and prices them from their traces.
#include "core/bench/tsa_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include <torch/torch.h>

#include "core/bench/bench_timing.h"
#include "core/config/experiment_config.h"
#include "core/data/tokenizer.h"
#include "core/models/dense_transformer.h"
#include "core/models/registry.h"
#include "core/models/tsa.h"
#include "core/train/checkpoint.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

double trace_flops(const std::vector<LayerTrace>& trace) {
  double f = 0;
  for (const auto& t : trace) f += t.flops;
  return f;
}

/// The TSA model of a run's checkpoint: config and tokenizer from the archive, then the weights.
std::shared_ptr<TokenSelectiveAttention> load_tsa(const std::string& path) {
  std::string config_json, tokenizer_json;
  try {
    torch::serialize::InputArchive in;
    in.load_from(path);
    c10::IValue config, tokenizer;
    if (!in.try_read("config", config) || !config.isString() || !in.try_read("tokenizer", tokenizer) ||
        !tokenizer.isString())
      throw CheckpointError(path + ": not a RouteLab checkpoint (no config or tokenizer)");
    config_json = config.toStringRef();
    tokenizer_json = tokenizer.toStringRef();
  } catch (const c10::Error& e) {
    throw CheckpointError(path + ": not a readable RouteLab checkpoint (" + e.what_without_backtrace() + ")");
  }
  const auto config = config_from_resolved(nlohmann::json::parse(config_json), path);
  if (config.arch() != "tsa") throw ConfigError(path + ": a '" + config.arch() + "' run, not a TSA run");
  const auto vocab = Tokenizer::from_json(nlohmann::json::parse(tokenizer_json))->vocab_size();
  // The trainer builds the model with the dataset's context; the synthetic tasks' is 2 L + 2.
  const auto& data = config.data();
  const auto source = data.at("source").get<std::string>();
  const auto context = (source == "copy" || source == "sort") ? 2 * data.at("task_length").get<std::int64_t>() + 2
                                                                : data.at("context").get<std::int64_t>();
  auto model = std::dynamic_pointer_cast<TokenSelectiveAttention>(create_model(config.model(), {vocab, context}));
  load_checkpoint(path, *model, nullptr);
  return model;
}

/// Sets router l's output bias so that exactly round(fraction N) of the N tokens have z + b <= 0 (p <= 0.5),
/// routers in order (each sees the stream the earlier, already forced ones produce in sparse mode).
void force_active_fraction(TokenSelectiveAttention& model, const torch::Tensor& tokens, double fraction) {
  torch::NoGradGuard no_grad;
  for (std::size_t l = 0; l < model.routers.size(); ++l) {
    auto bias = model.routers[l]->fc2->bias;  // (1)
    const auto z = (model.router_logits(tokens)[l] - bias.to(torch::kFloat)).reshape({-1});  // (N) before the bias
    const auto sorted = std::get<0>(z.to(torch::kDouble).sort());
    const auto n = sorted.size(0);
    const auto k = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::llround(fraction * static_cast<double>(n))),
                                            0, n);  // tokens to keep active
    double threshold;  // -b: tokens with z <= threshold stay active
    if (k == 0)
      threshold = sorted[0].item<double>() - 1.0;
    else if (k == n)
      threshold = sorted[n - 1].item<double>() + 1.0;
    else
      threshold = 0.5 * (sorted[k - 1].item<double>() + sorted[k].item<double>());
    bias.fill_(-threshold);
  }
}

}  // namespace

TsaBenchResult bench_tsa_inference(const TsaBenchOptions& o) {
  if (o.threads > 0) at::set_num_threads(o.threads);
  if (o.reps < 1) throw ConfigError("bench reps: " + std::to_string(o.reps) + " must be at least 1");
  if (o.batch < 1 || o.seq < 1) throw ConfigError("bench batch and seq must be at least 1");
  for (const double f : o.fractions)
    if (!(f >= 0.0 && f <= 1.0)) throw ConfigError("bench fractions: " + std::to_string(f) + " is outside [0, 1]");
  torch::manual_seed(0);
  TsaBenchResult result;
  result.options = o;
  std::shared_ptr<TokenSelectiveAttention> tsa;
  if (!o.checkpoint.empty()) {
    tsa = load_tsa(o.checkpoint);
  } else {
    TransformerOptions shape;
    shape.style(ModelStyle::GPT2)
        .vocab_size(o.vocab)
        .max_seq_len(o.seq)
        .n_layer(o.n_layer)
        .n_embd(o.n_embd)
        .n_head(o.n_head)
        .d_ff(o.d_ff);
    tsa = std::make_shared<TokenSelectiveAttention>(shape);
  }
  const auto& shape = tsa->options();
  auto& ro = result.options;
  ro.n_embd = shape.n_embd();
  ro.n_layer = shape.n_layer();
  ro.n_head = shape.n_head();
  ro.d_ff = shape.ff_dim();
  ro.vocab = shape.vocab_size();
  ro.seq = std::min(o.seq, shape.max_seq_len());
  result.threads = at::get_num_threads();
  result.model = tsa->describe();

  DenseTransformer dense(shape);  // equal shape; its weights do not matter for timing
  tsa->eval();
  dense.eval();
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, ro.vocab, {ro.batch, ro.seq}, torch::kLong);
  const double dense_flops = trace_flops(dense.forward(tokens, true).trace);

  for (const double fraction : o.fractions) {
    TsaBenchRow row;
    row.target = fraction;
    tsa->set_inference(TsaInference::Sparse);
    force_active_fraction(*tsa, tokens, fraction);
    const auto sparse_out = tsa->forward(tokens, true);
    row.alpha = sparse_out.stats.at("alpha_hard");
    row.alpha_soft = sparse_out.stats.at("alpha");
    row.sparse_flops_ratio = trace_flops(sparse_out.trace) / dense_flops;
    tsa->set_inference(TsaInference::Soft);
    row.soft_flops_ratio = trace_flops(tsa->forward(tokens, true).trace) / dense_flops;

    const std::vector<std::function<void()>> runs = {
        [&] { dense.forward(tokens); },
        [&] {
          tsa->set_inference(TsaInference::Soft);
          tsa->forward(tokens);
        },
        [&] {
          tsa->set_inference(TsaInference::Sparse);
          tsa->forward(tokens);
        },
    };
    for (int w = 0; w < o.warmup; ++w)
      for (const auto& run : runs) run();
    std::vector<std::vector<double>> times(runs.size());
    for (int r = 0; r < o.reps; ++r)  // interleaved, so drifting machine load hits every model alike
      for (std::size_t i = 0; i < runs.size(); ++i) times[i].push_back(time_ms(runs[i]));
    row.dense_ms = median(times[0]);
    row.soft_ms = median(times[1]);
    row.sparse_ms = median(times[2]);
    result.rows.push_back(row);
  }
  return result;
}

std::string TsaBenchResult::to_table() const {
  std::ostringstream out;
  const auto& o = options;
  out << "TSA inference bench: eval-mode forward, B " << o.batch << ", T " << o.seq << ", d " << o.n_embd << ", L "
      << o.n_layer << ", H " << o.n_head << ", d_ff " << o.d_ff << ", vocab " << o.vocab << ", " << threads
      << " threads, median of " << o.reps << " interleaved reps after " << o.warmup << " warm-up\n";
  out << "model: " << model << (o.checkpoint.empty() ? " (random weights)" : ", from " + o.checkpoint) << "\n";
  out << "speed = dense ms / ms (above 1: faster than dense); flops = layer FLOPs from the traces / dense\n";
  char line[256];
  std::snprintf(line, sizeof line, "%7s %7s %7s %10s %10s %10s %8s %8s %8s %8s\n", "target", "alpha", "alpha_s",
                "dense_ms", "soft_ms", "sparse_ms", "soft_x", "sparse_x", "soft_fl", "sparse_fl");
  out << line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%7.3f %7.3f %7.3f %10.2f %10.2f %10.2f %8.3f %8.3f %8.3f %8.3f\n", r.target,
                  r.alpha, r.alpha_soft, r.dense_ms, r.soft_ms, r.sparse_ms, r.dense_ms / r.soft_ms,
                  r.dense_ms / r.sparse_ms, r.soft_flops_ratio, r.sparse_flops_ratio);
    out << line;
  }
  out << "alpha: share of tokens that ran each routed block's FFN in sparse mode; alpha_s: eq. 6 mean(1 - p)\n";
  return out.str();
}

}  // namespace routelab
