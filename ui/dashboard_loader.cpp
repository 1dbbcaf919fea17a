// Dashboard loader: RunStore rows -> RunDashboardData. Malformed probe or eval documents are skipped (logged),
// never fatal: a dashboard shows what it can.
#include "ui/dashboard_loader.h"

#include "core/models/registry.h"
#include "core/report/builders/catalog.h"
#include "core/run/probe_record.h"
#include "core/run/routing_history.h"
#include "core/run/run_config.h"
#include "core/store/run_store.h"
#include "core/util/logging.h"

namespace routelab {
namespace {

QVector<double> toQVector(const std::vector<double>& v) { return {v.begin(), v.end()}; }

QStringList toQStringList(const std::vector<std::string>& v) {
  QStringList out;
  for (const auto& s : v) out.push_back(QString::fromStdString(s));
  return out;
}

}  // namespace

ProbeSnapshot probeSnapshot(const ProbeRecord& record) {
  ProbeSnapshot probe;
  probe.step = record.step;
  probe.tokens = toQStringList(record.tokens);
  probe.nextLogprob = toQVector(record.next_logprob);
  for (const auto& position : record.top_k) {
    QVector<ProbeSnapshot::Prediction> ranked;
    for (const ProbePrediction& p : position) ranked.push_back({QString::fromStdString(p.text), p.prob});
    probe.topK.push_back(std::move(ranked));
  }
  probe.droppedTokens = record.dropped_tokens;
  if (record.task == Task::Classification) {
    probe.task = QStringLiteral("classification");
    probe.labels = toQStringList(record.labels);
    probe.classProbs = toQVector(record.class_probs);
    probe.predicted = record.predicted;
    probe.label = record.label;
  }
  probe.record = record;
  return probe;
}

EvalSnapshot evalSnapshot(const EvaluationRecord& record) {
  EvalSnapshot eval;
  eval.step = record.step;
  eval.valLoss = record.loss;
  eval.flopsRatio = record.flops_ratio.value_or(1.0);
  setEvalLayers(eval, record.layers);
  return eval;
}

void setEvalLayers(EvalSnapshot& eval, std::vector<LayerRouting> layers) {
  eval.routedFraction.clear();
  eval.routed.clear();
  eval.kinds.clear();
  for (const LayerRouting& l : layers) {
    eval.routedFraction.push_back(l.routed_fraction);
    eval.routed.push_back(l.routed);
    eval.kinds.push_back(QString::fromStdString(l.kind));
  }
  eval.layers = std::move(layers);
}

FigureRequest metricsRequest(qint64 runId, const std::string& panel) {
  FigureRequest request;
  request.name = "metrics";
  request.run_ids = {runId};
  request.metric = panel;
  return request;
}

FigureRequest expertLoadsRequest(qint64 runId) {
  FigureRequest request;
  request.name = "expert-loads";
  request.run_ids = {runId};
  return request;
}

RunMetricsData loadMetricsData(const RunStore& store, qint64 runId) {
  RunMetricsData metrics;
  bool loads = false;
  for (const std::string& key : store.metric_keys(runId)) {
    metrics.keys.push_back(QString::fromStdString(key));
    loads = loads || key.rfind("val/load/L", 0) == 0;
  }
  try {
    metrics.panels = build_figure(store, metricsRequest(runId));
  } catch (const std::exception& e) {
    metrics.panelsError = QString::fromUtf8(e.what());
  }
  if (loads) {
    try {
      metrics.loads = build_figure(store, expertLoadsRequest(runId));
    } catch (const std::exception& e) {
      logger("ui")->warn("run {}: no expert loads: {}", runId, e.what());
    }
  }
  return metrics;
}

RunDashboardData loadDashboardData(const RunStore& store, qint64 runId) {
  RunDashboardData data;
  data.runId = runId;
  const auto record = store.run(runId);
  if (!record) return data;
  data.found = true;
  data.name = QString::fromStdString(record->name);
  data.arch = QString::fromStdString(record->arch);
  data.status = QString::fromStdString(to_string(record->status));
  data.message = QString::fromStdString(record->message);
  data.totalSteps = record->total_steps;
  data.createdAt = record->created_at;
  bool classifier = false;
  try {
    classifier = architecture(record->arch).task == Task::Classification;
  } catch (const std::exception&) {
    // an architecture this build does not know: treated as a language model, its panels say what is missing
  }
  try {
    const auto config = stored_config(*record, store.path());
    data.tokensPerStep = static_cast<double>(sequences_per_step(config) *
                                             config.at("data").at("context").get<std::int64_t>());
  } catch (const std::exception&) {
    data.tokensPerStep = 0;  // the tokens axis then falls back to what the live run reports
  }
  data.style = run_style(store, runId);
  if (classifier) data.task = QStringLiteral("classification");
  // The cost panel is the catalogue figure itself: language models price FLOPs and the KV cache against length
  // from the last evaluation's routing; a classifier encodes each pair once (no cache, no length axis), so its
  // panel is the FLOPs ratio each evaluation measured.
  FigureRequest cost;
  cost.name = classifier ? "curves" : "cost-length";
  cost.run_ids = {runId};
  if (classifier) cost.metric = "val/flops_ratio";
  try {
    data.cost = build_figure(store, cost);
  } catch (const std::exception& e) {
    data.costError = QString::fromUtf8(e.what());
  }
  if (!classifier) {
    // The cumulative-FLOPs x axis of the loss curves.
    try {
      data.denseStepFlops = training_step_dense_flops(store, runId);
      const auto [steps, ratios] = training_flops_ratios(store, runId);
      for (std::size_t i = 0; i < steps.size(); ++i) {
        data.flopsRatioSteps.push_back(static_cast<double>(steps[i]));
        data.flopsRatios.push_back(ratios[i]);
      }
    } catch (const std::exception& e) {
      data.denseStepFlops = 0;  // the FLOPs axis then says why it is empty
      logger("ui")->warn("run {}: no cumulative-FLOPs axis: {}", runId, e.what());
    }
  }

  for (const MetricPoint& p : read_metric(store, runId, "train/loss")) {
    data.trainSteps.push_back(static_cast<double>(p.step));
    data.trainLoss.push_back(p.value);
    data.trainWall.push_back(p.wall_time);
  }
  for (const MetricPoint& p : read_metric(store, runId, "val/loss")) {
    data.valSteps.push_back(static_cast<double>(p.step));
    data.valLoss.push_back(p.value);
    data.valWall.push_back(p.wall_time);
  }

  data.routing = read_routing_history(store, runId);
  for (const CheckpointRow& c : store.checkpoints(runId)) data.checkpointSteps.push_back(c.step);

  std::vector<std::string> unreadable;
  for (const EvaluationRecord& e : read_evaluations(store, runId, &unreadable)) data.evals.push_back(evalSnapshot(e));
  for (const std::string& message : unreadable) logger("ui")->warn("{}", message);
  data.metrics = loadMetricsData(store, runId);

  unreadable.clear();
  for (const ProbeRecord& record : read_probes(store, runId, &unreadable))
    if (!record.tokens.empty()) data.probes.push_back(probeSnapshot(record));
  for (const std::string& message : unreadable) logger("ui")->warn("{}", message);
  return data;
}

}  // namespace routelab
