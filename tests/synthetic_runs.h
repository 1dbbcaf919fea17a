// For GUI tests that need stored runs without training them: a run with validation and training loss at steps
// 100, 200, ..., its FLOPs ratio, one evaluation's per-layer routing and optionally a probe.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/store/run_store.h"

namespace test {

struct SyntheticRun {
  std::string name, arch, config;
  std::vector<double> valLoss;  ///< at steps 100, 200, 300, ...
  double flopsRatio = 1.0;
  std::string layers;           ///< extra.layers of the last evaluation
  std::string probe;            ///< the probe at the last evaluation ("" = none)
};

inline std::int64_t addSyntheticRun(routelab::RunStore& store, const SyntheticRun& spec, std::int64_t seed) {
  routelab::NewRun run;
  run.name = spec.name;
  run.arch = spec.arch;
  run.preset = "synthetic";
  run.config_json = spec.config;
  run.seed = seed;
  const auto last = static_cast<std::int64_t>(100 * spec.valLoss.size());
  run.total_steps = last;
  const std::int64_t id = store.create_run(run);
  std::vector<routelab::MetricRow> rows;
  for (std::size_t i = 0; i < spec.valLoss.size(); ++i) {
    const auto step = static_cast<std::int64_t>(100 * (i + 1));
    rows.push_back({"val/loss", step, 1000.0 + static_cast<double>(step), spec.valLoss[i]});
    rows.push_back({"train/loss", step, 1000.0 + static_cast<double>(step), spec.valLoss[i] + 0.1});
    rows.push_back({"val/flops_ratio", step, 1000.0 + static_cast<double>(step), spec.flopsRatio});
  }
  store.insert_metrics(id, rows);
  routelab::EvalRow eval;
  eval.step = last;
  eval.loss = spec.valLoss.back();
  eval.extra_json = R"({"flops_ratio":)" + std::to_string(spec.flopsRatio) + R"(,"layers":)" + spec.layers + "}";
  store.insert_eval(id, eval);
  if (!spec.probe.empty()) store.insert_probe(id, {last, spec.probe});
  store.set_status(id, routelab::RunStatus::Finished);
  return id;
}

/// A config document of the synthetic runs: `model` (JSON), the learning rate and the seed.
inline std::string syntheticConfig(const std::string& model, const std::string& lr, int seed) {
  return R"({"model":)" + model + R"(,"train":{"lr":)" + lr + R"(,"batch_size":4},"data":{"context":8},)" +
         R"("run":{"seed":)" + std::to_string(seed) + "}}";
}

}  // namespace test
