// The helpers the generic figure builders share (core/report/builders/builder_detail.h): reading runs, configs and
// evaluation rows, and the styled run groups.
#include "core/report/builders/builder_detail.h"

#include <cmath>
#include <cstdio>
#include <optional>

#include "core/config/options.h"
#include "core/models/registry.h"
#include "core/run/run_config.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {

int arch_color(const std::string& arch, int unknown) {
  for (const auto& e : architectures())
    if (e.id == arch) return e.color;
  return unknown;
}

std::string number_text(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

bool higher_is_better(const std::string& metric) {
  return metric.find("accuracy") != std::string::npos || metric.find("f1") != std::string::npos ||
         metric.find("per_s") != std::string::npos || metric.find("saved") != std::string::npos;
}

double last_finite(const RunStore& store, std::int64_t run_id, const std::string& metric, std::int64_t step) {
  const auto points = read_metric(store, run_id, metric);
  for (auto it = points.rbegin(); it != points.rend(); ++it)
    if ((step == 0 || it->step <= step) && std::isfinite(it->value)) return it->value;
  return kNaN;
}

RunRecord run_record(const RunStore& store, std::int64_t id) {
  auto run = store.run(id);
  if (!run) throw StoreError(store.path() + ": no run " + std::to_string(id));
  return *run;
}

std::string run_label(const RunRecord& run) { return run.name.empty() ? "run " + std::to_string(run.id) : run.name; }

json run_config(const RunStore& store, const RunRecord& run) { return stored_config(run, store.path()); }

std::int64_t config_int(const RunStore& store, const RunRecord& run, const json& config, const char* section,
                        const char* key) {
  const std::string path = std::string(section) + "." + key;
  if (!config.contains(section) || !config.at(section).is_object() || !config.at(section).contains(key) ||
      !config.at(section).at(key).is_number_integer())
    throw ConfigError(store.path() + ": run " + std::to_string(run.id) + ": the stored config has no integer " + path);
  return config.at(section).at(key).get<std::int64_t>();
}

std::int64_t sequences_per_step(const RunStore& store, const RunRecord& run, const json& config) {
  try {
    return routelab::sequences_per_step(config);
  } catch (const DataError& e) {
    throw ConfigError(store.path() + ": run " + std::to_string(run.id) + ": " + e.what());
  }
}

json full_model(const RunStore& store, const RunRecord& run, const json& config) {
  if (!config.contains("model") || !config.at("model").is_object() || !config.at("model").contains("arch"))
    throw ConfigError(store.path() + ": run " + std::to_string(run.id) + ": the stored config has no model.arch");
  const auto& model = config.at("model");
  const auto arch = model.at("arch").get<std::string>();
  json full = schema_defaults(architecture(arch).options);
  for (const auto& [k, v] : model.items()) full[k] = v;
  full["arch"] = arch;
  return full;
}

std::vector<StyledGroup> styled_groups(const RunStore& store, const FigureRequest& request) {
  Styler styler;
  std::vector<StyledGroup> out;
  for (auto& g : group_runs(store, request.run_ids, request.by_seed)) {
    StyledGroup s;
    s.arch = run_record(store, g.run_ids.front()).arch;
    std::tie(s.color, s.dash) = styler.next(s.arch);
    s.group = std::move(g);
    out.push_back(std::move(s));
  }
  return out;
}

ProbeRecord probe_at(const RunStore& store, std::int64_t id, std::int64_t step, const std::string& figure) {
  std::optional<ProbeRow> found;
  std::string steps;
  for (auto& p : store.probes(id)) {
    if ((step == 0 || p.step == step) && (!found || p.step >= found->step)) found = p;
    steps += (steps.empty() ? "" : ", ") + std::to_string(p.step);
  }
  if (!found)
    throw ConfigError(figure + ": run " + std::to_string(id) + " has no probe" +
                      (step && !steps.empty() ? " at step " + std::to_string(step) + " (probed at: " + steps + ")"
                                              : std::string()));
  try {
    return read_probe(*found);
  } catch (const DataError& e) {
    throw DataError(figure + ": " + store.path() + ": run " + std::to_string(id) + ": " + e.what());
  }
}

std::string token_map_title(const RunRecord& run, std::int64_t step) {
  return run_label(run) + " (step " + std::to_string(step) + ")";
}

void require_metric_somewhere(const RunStore& store, const FigureRequest& request, const std::string& figure) {
  for (auto id : request.run_ids)
    if (!store.metric(id, request.metric).empty()) return;
  std::string keys;
  for (const auto& k : store.metric_keys(request.run_ids.front())) keys += (keys.empty() ? "" : ", ") + k;
  throw ConfigError(figure + ": none of the runs stores metric '" + request.metric + "' (run " +
                    std::to_string(request.run_ids.front()) + " has: " + keys + ")");
}

std::vector<EvaluationRecord> evaluations(const RunStore& store, std::int64_t run_id, const std::string& figure) {
  try {
    return read_evaluations(store, run_id);
  } catch (const DataError& e) {
    throw DataError(figure + ": " + e.what());
  }
}

std::optional<EvaluationRecord> val_eval(const RunStore& store, std::int64_t id, std::int64_t step) {
  std::optional<EvaluationRecord> found;
  for (auto& e : read_evaluations(store, id))
    if (e.split == "val" && (step == 0 || e.step == step) && (!found || e.step >= found->step)) found = e;
  return found;
}

EvaluationRecord eval_at(const RunStore& store, std::int64_t run_id, std::int64_t step, const std::string& figure) {
  const auto evals = evaluations(store, run_id, figure);
  if (evals.empty())
    throw DataError(figure + ": " + store.path() + ": run " + std::to_string(run_id) + " has no evaluation");
  if (step == 0) return evals.back();
  std::string steps;
  for (const auto& e : evals) {
    if (e.step == step) return e;
    steps += (steps.empty() ? "" : ", ") + std::to_string(e.step);
  }
  throw DataError(figure + ": run " + std::to_string(run_id) + " has no evaluation at step " + std::to_string(step) +
                  " (evaluated at: " + steps + ")");
}

std::vector<LayerRouting> eval_layers(const RunStore& store, std::int64_t run_id, const EvaluationRecord& eval,
                                      const std::string& figure) {
  if (eval.layers.empty())
    throw DataError(figure + ": " + store.path() + ": run " + std::to_string(run_id) + " step " +
                    std::to_string(eval.step) + ": the evaluation stores no per-layer routing (layers)");
  return eval.layers;
}

}  // namespace routelab::figure_detail
