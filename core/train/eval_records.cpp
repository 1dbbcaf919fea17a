// The rows an evaluation or a log step adds to the run store, and what the trainer reports of them.
#include "core/train/eval_records.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "core/run/evaluation_record.h"

namespace routelab {
double record_wall_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EvalMetrics record_lm_eval(RankWriter& writer, std::int64_t step, const EvalPass& pass, double chars_per_token) {
  const auto& routing = pass.routing;
  EvalMetrics e;
  e.step = step;
  e.val_loss = pass.loss;
  e.val_ppl = std::exp(e.val_loss);
  e.val_bpc = e.val_loss / std::log(2.0) / chars_per_token;
  e.flops_ratio = routing.flops_ratio();
  e.routed_fraction = routing.routed_fractions();
  const double wall = record_wall_s();
  writer->add_metric({"val/loss", step, wall, e.val_loss});
  writer->add_metric({"val/ppl", step, wall, e.val_ppl});
  writer->add_metric({"val/bpc", step, wall, e.val_bpc});
  writer->add_metric({"val/flops_ratio", step, wall, e.flops_ratio});
  if (routing.any_routed()) writer->add_metric({"val/routed_fraction", step, wall, routing.mean_routed_fraction()});
  auto record = routing.record();
  e.layers = record.layers;
  e.stats = pass.stats;
  record.stats = e.stats;
  for (const auto& [key, value] : e.stats) writer->add_metric({"val/" + key, step, wall, value});
  writer->add_eval({step, "val", e.val_loss, e.val_ppl, e.val_bpc, evaluation_extra_json(record).dump()});
  return e;
}

EvalMetrics record_classification_eval(RankWriter& writer, std::int64_t step, const ClassEvalPass& pass,
                                       std::int64_t steps_per_epoch, const std::vector<std::string>& labels) {
  EvalMetrics e;
  e.step = step;
  e.val_loss = pass.loss;
  e.val_ppl = e.val_bpc = std::numeric_limits<double>::quiet_NaN();  // no next-token prediction here
  e.val_accuracy = pass.scores.accuracy;
  e.val_macro_f1 = pass.scores.macro_f1;
  e.epoch = step / steps_per_epoch;
  e.flops_ratio = pass.routing.flops_ratio();
  e.routed_fraction = pass.routing.routed_fractions();
  e.stats = pass.stats;
  const double wall = record_wall_s();
  writer->add_metric({"val/loss", step, wall, e.val_loss});
  writer->add_metric({"val/accuracy", step, wall, *e.val_accuracy});
  writer->add_metric({"val/macro_f1", step, wall, *e.val_macro_f1});
  writer->add_metric({"val/epoch", step, wall, static_cast<double>(step) / static_cast<double>(steps_per_epoch)});
  if (pass.routing.any_routed()) {
    writer->add_metric({"val/routed_fraction", step, wall, pass.routing.mean_routed_fraction()});
    writer->add_metric({"val/flops_ratio", step, wall, e.flops_ratio});
  }
  auto record = pass.routing.record();
  e.layers = record.layers;
  record.task = Task::Classification;
  record.accuracy = pass.scores.accuracy;
  record.macro_f1 = pass.scores.macro_f1;
  record.f1 = pass.scores.f1;
  record.labels = labels;
  record.examples = pass.examples;
  record.stats = e.stats;
  for (const auto& [key, value] : e.stats) writer->add_metric({"val/" + key, step, wall, value});
  writer->add_eval({step, "val", e.val_loss, e.val_ppl, e.val_bpc, evaluation_extra_json(record).dump()});
  return e;
}

void record_train_routing(RankWriter& writer, std::int64_t step, const std::vector<LayerTrace>& trace,
                          const std::map<std::string, double>& stats, StepMetrics& m) {
  double flops = 0, dense_flops = 0;
  for (const auto& layer : trace) {
    flops += layer.flops;
    dense_flops += layer.dense_flops;
    m.routed_fraction.push_back(layer.routed_fraction);
    RoutingRow row;
    row.step = step;
    row.layer = layer.layer;
    row.routed_fraction = layer.routed_fraction;
    row.gate_mean = layer.gate.defined() ? layer.gate.to(torch::kFloat).mean().item<double>() : 1.0;
    row.aux_loss = layer.aux_loss;
    const auto attn = layer.tokens_processed.find("attn");
    const auto mlp = layer.tokens_processed.find("mlp");
    row.tokens_attn = attn == layer.tokens_processed.end() ? 0 : attn->second;
    row.tokens_mlp = mlp == layer.tokens_processed.end() ? 0 : mlp->second;
    writer->add_routing(row);
  }
  if (dense_flops > 0) {
    m.flops_ratio = flops / dense_flops;
    writer->add_metric({"train/flops_ratio", step, record_wall_s(), *m.flops_ratio});
  }
  for (const auto& [key, value] : stats) writer->add_metric({"train/" + key, step, record_wall_s(), value});
}

}  // namespace routelab
