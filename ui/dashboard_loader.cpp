// Dashboard loader: RunStore rows -> RunDashboardData. Malformed probe or eval documents are skipped (logged),
// never fatal: a dashboard shows what it can.
#include "ui/dashboard_loader.h"

#include <cmath>

#include <QRegularExpression>

#include "core/models/registry.h"
#include "core/report/figures.h"
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

bool isMetricsViewKey(const QString& key) {
  if (!key.startsWith(QLatin1String("train/")) && !key.startsWith(QLatin1String("val/"))) return false;
  if (key == QLatin1String("train/loss") || key == QLatin1String("val/loss") || key == QLatin1String("val/epoch"))
    return false;
  // Per-expert and per-layer (".../L<l>") series stay out of the panels: the loads chart shows the experts, and
  // the layer means have panels of their own.
  static const QRegularExpression perLayer(QStringLiteral("/L\\d+(/|$)"));
  return !key.contains(QLatin1String("/load/")) && !key.contains(QLatin1String("/assign/")) &&
         !key.contains(perLayer);
}

RunMetricsData loadMetricsData(const RunStore& store, qint64 runId) {
  RunMetricsData metrics;
  // val/load/L<l>/E<i>: the share of layer l's routed tokens that expert i took, at each evaluation.
  const QRegularExpression loadKey(QStringLiteral("^val/load/L(\\d+)/E(\\d+)$"));
  for (const std::string& k : store.metric_keys(runId)) {
    const QString key = QString::fromStdString(k);
    metrics.keys.push_back(key);
    if (isMetricsViewKey(key)) {
      MetricCurve curve;
      curve.key = key;
      for (const MetricPoint& p : store.metric(runId, k)) {
        curve.steps.push_back(static_cast<double>(p.step));
        curve.values.push_back(p.value);
      }
      metrics.curves.push_back(std::move(curve));
      continue;
    }
    const auto match = loadKey.match(key);
    if (!match.hasMatch()) continue;
    const auto points = store.metric(runId, k);
    if (points.empty()) continue;
    const int layer = match.captured(1).toInt(), expert = match.captured(2).toInt();
    const qint64 step = points.back().step;
    if (step < metrics.loadStep) continue;  // a series that stopped earlier than the others
    if (step > metrics.loadStep) {
      metrics.loadStep = step;
      metrics.expertLoad.clear();
    }
    if (metrics.expertLoad.size() <= layer) metrics.expertLoad.resize(layer + 1);
    auto& row = metrics.expertLoad[layer];
    if (row.size() <= expert) row.resize(expert + 1, std::nan(""));
    row[expert] = points.back().value;
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
    data.tokensPerStep = static_cast<double>(config.at("train").at("batch_size").get<std::int64_t>() *
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

  for (const MetricPoint& p : store.metric(runId, "train/loss")) {
    data.trainSteps.push_back(static_cast<double>(p.step));
    data.trainLoss.push_back(p.value);
    data.trainWall.push_back(p.wall_time);
  }
  for (const MetricPoint& p : store.metric(runId, "val/loss")) {
    data.valSteps.push_back(static_cast<double>(p.step));
    data.valLoss.push_back(p.value);
    data.valWall.push_back(p.wall_time);
  }

  data.routing = read_routing_history(store, runId);

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
