// Dashboard loader: RunStore rows -> RunDashboardData. Malformed probe or eval documents are skipped (logged),
// never fatal: a dashboard shows what it can.
#include "ui/dashboard_loader.h"

#include <cmath>
#include <map>

#include <QRegularExpression>

#include <nlohmann/json.hpp>

#include "core/models/registry.h"
#include "core/report/figures.h"
#include "core/store/run_store.h"
#include "core/util/logging.h"
#include "ui/routing_cost.h"

namespace routelab {
namespace {

using nlohmann::json;

QVector<double> numbers(const json& array) {
  QVector<double> out;
  if (!array.is_array()) return out;
  out.reserve(static_cast<qsizetype>(array.size()));
  for (const json& v : array) out.push_back(v.is_number() ? v.get<double>() : std::nan(""));
  return out;
}

bool allIntegral(const json& value) {
  if (value.is_array()) {
    for (const json& v : value)
      if (!allIntegral(v)) return false;
    return true;
  }
  return value.is_number_integer() || value.is_boolean();
}

double number(const json& v) {
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  return v.is_number() ? v.get<double>() : std::nan("");
}

/// token_data[key] after the probe took sequence 0: (T) -> one component, (T, K) -> K components; deeper
/// shapes are flattened per token.
ProbeSnapshot::Series parseSeries(const std::string& name, const json& data) {
  ProbeSnapshot::Series series;
  series.name = QString::fromStdString(name);
  series.integral = allIntegral(data);
  if (!data.is_array()) return series;
  // The per-token shape from the first token: (T, L, k) -> {L, k}.
  if (!data.empty())
    for (const json* d = &data.front(); d->is_array() && !d->empty(); d = &d->front())
      series.shape.push_back(static_cast<int>(d->size()));
  std::vector<std::vector<double>> perToken;
  std::size_t width = 0;
  for (const json& token : data) {
    std::vector<double> values;
    if (token.is_array()) {
      json flat = token.flatten();
      for (const auto& item : flat.items()) values.push_back(number(item.value()));
    } else {
      values.push_back(number(token));
    }
    width = std::max(width, values.size());
    perToken.push_back(std::move(values));
  }
  series.components.resize(static_cast<qsizetype>(width));
  for (std::size_t c = 0; c < width; ++c) {
    auto& component = series.components[static_cast<qsizetype>(c)];
    for (const auto& values : perToken) component.push_back(c < values.size() ? values[c] : std::nan(""));
  }
  return series;
}

}  // namespace

ProbeSnapshot parseProbe(qint64 step, const std::string& text) {
  ProbeSnapshot probe;
  probe.step = step;
  const json doc = json::parse(text);
  if (doc.contains("tokens"))
    for (const json& t : doc.at("tokens")) probe.tokens.push_back(QString::fromStdString(t.get<std::string>()));
  if (doc.contains("next_logprob")) probe.nextLogprob = numbers(doc.at("next_logprob"));
  if (doc.contains("layers")) {
    for (const json& l : doc.at("layers")) {
      ProbeSnapshot::Layer layer;
      layer.layer = l.value("layer", 0);
      layer.kind = QString::fromStdString(l.value("kind", std::string("dense")));
      layer.routed = l.value("routed", false);
      if (l.contains("gate")) layer.gate = numbers(l.at("gate"));
      if (l.contains("decision")) layer.decision = numbers(l.at("decision"));
      probe.layers.push_back(std::move(layer));
    }
  }
  if (doc.contains("token_data") && doc.at("token_data").is_object())
    for (const auto& [key, value] : doc.at("token_data").items()) probe.tokenData.push_back(parseSeries(key, value));
  if (doc.contains("top_k") && doc.at("top_k").is_array()) {
    for (const json& position : doc.at("top_k")) {
      QVector<ProbeSnapshot::Prediction> ranked;
      if (position.is_array())
        for (const json& p : position)
          ranked.push_back({QString::fromStdString(p.value("text", std::string())), p.value("p", 0.0)});
      probe.topK.push_back(std::move(ranked));
    }
  }
  probe.droppedTokens = doc.value("dropped_tokens", qint64{0});
  if (doc.value("task", std::string("lm")) == "classification") {
    probe.task = QStringLiteral("classification");
    if (doc.contains("labels"))
      for (const json& l : doc.at("labels")) probe.labels.push_back(QString::fromStdString(l.get<std::string>()));
    if (doc.contains("class_probs")) probe.classProbs = numbers(doc.at("class_probs"));
    probe.predicted = doc.value("predicted", -1);
    probe.label = doc.value("label", -1);
  }
  return probe;
}

EvalSnapshot parseEval(qint64 step, double valLoss, const std::string& extraJson) {
  EvalSnapshot eval;
  eval.step = step;
  eval.valLoss = valLoss;
  const json extra = json::parse(extraJson);
  eval.flopsRatio = extra.value("flops_ratio", 1.0);
  if (extra.contains("layers")) setEvalLayers(eval, extra.at("layers").dump());
  return eval;
}

void setEvalLayers(EvalSnapshot& eval, const std::string& layersJson) {
  const json layers = json::parse(layersJson);
  eval.routedFraction.clear();
  eval.routed.clear();
  eval.kinds.clear();
  for (const json& l : layers) {
    eval.routedFraction.push_back(l.value("routed_fraction", 1.0));
    eval.routed.push_back(l.value("routed", false));
    eval.kinds.push_back(QString::fromStdString(l.value("kind", std::string("dense"))));
  }
  eval.layersJson = layersJson;
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
    classifier = architecture(record->arch).task == "classification";
  } catch (const std::exception&) {
    // an architecture this build does not know: treated as a language model, its panels say what is missing
  }
  try {
    const auto config = json::parse(record->config_json);
    data.tokensPerStep = static_cast<double>(config.at("train").at("batch_size").get<std::int64_t>() *
                                             config.at("data").at("context").get<std::int64_t>());
  } catch (const std::exception&) {
    data.tokensPerStep = 0;  // the tokens axis then falls back to what the live run reports
  }
  if (classifier) {
    // No KV cache nor length curves; the measured FLOPs ratio is per evaluation (RunDashboard::renderClassifierCost).
    data.task = QStringLiteral("classification");
  } else {
    // Language models: the layer shape prices the FLOPs and KV curves, the FLOPs model the cumulative-FLOPs axis.
    data.cost = costModelFromConfig(record->config_json);
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

  // Routing rows arrive ordered by step then layer; one column per step.
  for (const RoutingRow& row : store.routing(runId)) {
    auto& h = data.routing;
    if (h.steps.isEmpty() || h.steps.back() != static_cast<double>(row.step)) {
      h.steps.push_back(static_cast<double>(row.step));
      h.fraction.push_back({});
    }
    const int layer = row.layer;
    auto put = [layer](QVector<double>& column, double value) {
      if (column.size() <= layer) column.resize(layer + 1, std::nan(""));
      column[layer] = value;
    };
    put(h.fraction.back(), row.routed_fraction);
  }

  for (const EvalRow& row : store.evals(runId)) {
    try {
      data.evals.push_back(parseEval(row.step, row.loss, row.extra_json));
    } catch (const std::exception& e) {
      logger("ui")->warn("run {}: evaluation at step {} has unreadable routing data: {}", runId, row.step, e.what());
    }
  }
  data.metrics = loadMetricsData(store, runId);

  for (const ProbeRow& row : store.probes(runId)) {
    try {
      ProbeSnapshot probe = parseProbe(row.step, row.json);
      if (!probe.tokens.isEmpty()) data.probes.push_back(std::move(probe));
    } catch (const std::exception& e) {
      logger("ui")->warn("run {}: probe at step {} is unreadable: {}", runId, row.step, e.what());
    }
  }
  return data;
}

}  // namespace routelab
