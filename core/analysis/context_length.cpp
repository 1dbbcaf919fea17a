#include "core/analysis/context_length.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <spdlog/fmt/fmt.h>

#include "core/analysis/run_analysis.h"
#include "core/train/evaluation.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/paths.h"

namespace routelab {

ContextCurve context_curve(const std::string& db_path, std::int64_t run_id, const ContextCurveOptions& options) {
  if (options.lengths.empty()) throw ConfigError("--lengths: give at least one length");
  // The stored shape: style, training context and max_seq_len decide what may change.
  const auto base = load_run(db_path, run_id, options.sets, options.step);
  const auto& model = base.config.model();
  const bool learned_positions = model.contains("style") && model.at("style") == "gpt2";
  const auto trained_context = base.config.data().at("context").get<std::int64_t>();
  const auto stored_max = model.contains("max_seq_len") ? model.at("max_seq_len").get<std::int64_t>() : 0;
  const auto trained_max = stored_max > 0 ? stored_max : trained_context;
  const auto longest = *std::max_element(options.lengths.begin(), options.lengths.end());
  if (!model.contains("rope_scaling") && options.scaling != "none")
    throw ConfigError("--scaling: " + base.config.arch() + " has no RoPE options");
  if (learned_positions && options.scaling != "none")
    throw ConfigError("--scaling: run " + std::to_string(run_id) + " uses learned positions (gpt2 style), not RoPE");

  ContextCurve curve;
  curve.run_id = run_id;
  curve.name = base.name;
  curve.arch = base.config.arch();
  curve.step = base.step;
  curve.trained_context = trained_context;
  curve.scaling = options.scaling;
  curve.factor = options.scaling == "none" ? 1.0
                 : options.factor > 0     ? options.factor
                                          : std::max(1.0, static_cast<double>(longest) / trained_context);
  const auto batch_limit = base.config.train().at("batch_size").get<std::int64_t>();
  for (const auto length : options.lengths) {
    if (length < 2) throw ConfigError("--lengths: " + std::to_string(length) + " is below 2");
    if (learned_positions && length > trained_max)
      throw ConfigError(fmt::format("--lengths: {} exceeds run {}'s {} learned positions (gpt2 style cannot be "
                                    "evaluated beyond model.max_seq_len)", length, run_id, trained_max));
    auto sets = options.sets;
    sets.push_back("data.context=" + std::to_string(length));
    sets.push_back("model.max_seq_len=" + std::to_string(std::max(length, trained_max)));
    if (!learned_positions && model.contains("rope_scaling")) {
      sets.push_back("model.rope_scaling=" + options.scaling);
      sets.push_back(fmt::format("model.rope_factor={:g}", curve.factor));
      sets.push_back("model.rope_original_context=" + std::to_string(trained_context));
    }
    auto run = load_run(db_path, run_id, sets, options.step);
    // Strided: consecutive windows of `length` tokens from the start of the split, each token scored once.
    const auto split = parse_split(options.split, "--split");
    const auto wanted = std::max<std::int64_t>(1, (options.tokens + length - 1) / length);
    std::int64_t used = 0;
    if (const auto pass = evaluate_strided(*run.model, *run.dataset, split, wanted,
                                           std::clamp<std::int64_t>(wanted, 1, batch_limit), run.device, run.bf16,
                                           &used)) {
      const double bpc = pass->loss / std::log(2.0) / run.dataset->chars_per_token(split);
      curve.points.push_back({length, pass->loss, std::exp(pass->loss), bpc, used});
      continue;
    }
    // Synthetic tasks have no windows: examples drawn with the fixed evaluation seed.
    RunEvalOptions eval;
    eval.split = split;
    eval.batch_size = std::clamp<std::int64_t>(options.tokens / length, 1, batch_limit);
    eval.batches = std::max<std::int64_t>(1, (options.tokens + eval.batch_size * length - 1) / (eval.batch_size * length));
    const auto report = evaluate_run(run, eval);
    curve.points.push_back({length, report.loss, report.ppl, report.bpc, eval.batches * eval.batch_size});
  }
  return curve;
}

void store_context_curve(const std::string& db_path, const ContextCurve& curve) {
  RunStore store(db_path.empty() ? default_db_path() : db_path, /*mark_crashed=*/false);
  EvalRow row;
  row.step = curve.step;
  row.split = curve.split_name();
  row.loss = curve.points.back().loss;
  row.ppl = curve.points.back().ppl;
  row.bpc = curve.points.back().bpc;
  row.extra_json = curve.to_json().dump();
  store.insert_eval(curve.run_id, row);
}

}  // namespace routelab
