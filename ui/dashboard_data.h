// Plain value types behind a run dashboard: what the store reader extracts from a run (curves, routing history,
// evaluations with their per-layer routing, the probe's per-token routing at each evaluation, the model shape
// for the cost curves). Read on the store thread, copied to the GUI thread; nothing here points into core/.
#pragma once
#include <QMetaType>
#include <QString>
#include <QStringList>
#include <QVector>

#include <string>
#include <vector>

#include "core/run/evaluation_record.h"

namespace routelab {

/// Per-layer share of tokens on the routed path at logged training steps.
struct RoutingHistory {
  QVector<double> steps;
  QVector<QVector<double>> fraction;  ///< [step][layer]
};

/// One evaluation's inference-mode routing (eval extra_json).
struct EvalSnapshot {
  qint64 step = 0;
  double valLoss = 0;
  double flopsRatio = 1;
  QVector<double> routedFraction;  ///< per layer
  QVector<bool> routed;            ///< per layer: makes routing decisions
  QStringList kinds;               ///< per layer: its trace kind
  std::vector<LayerRouting> layers;  ///< the stored per-layer records: what the cost curves price
};

/// The probe text's per-token routing at one evaluation.
struct ProbeSnapshot {
  struct Layer {
    int layer = 0;
    QString kind;
    bool routed = false;
    QVector<double> gate;      ///< per token; empty when the layer reports none
    QVector<double> decision;  ///< per token, 0/1; empty when none
  };
  /// A per-token quantity from the model's token_data: components[c][t] (one component for (T) data, K for (T, K)).
  struct Series {
    QString name;
    QVector<QVector<double>> components;
    bool integral = false;
    QVector<int> shape;  ///< per-token dimensions, e.g. {L, N} for TAGAT's gate (T, L, N); empty for (T)
  };
  /// One ranked next-token prediction (the token inspector's traces).
  struct Prediction {
    QString text;
    double prob = 0;
  };
  qint64 step = 0;
  QString task = QStringLiteral("lm");  ///< "lm" or "classification"
  QStringList tokens;
  QVector<double> nextLogprob;  ///< log p(next token) per position; NaN where unknown
  QVector<Layer> layers;
  QVector<Series> tokenData;
  QVector<QVector<Prediction>> topK;  ///< per position, most likely first (traces only)
  qint64 droppedTokens = 0;           ///< tokens cut from a traced text that exceeded the context
  // classification
  QStringList labels;
  QVector<double> classProbs;
  int predicted = -1;
  int label = -1;  ///< the probe example's gold label (-1 for a typed text)

  /// TAGAT-style per-token experts: the "expert" series (T, L, k) of chosen ids, or nullptr.
  const Series* experts() const {
    for (const Series& s : tokenData)
      if (s.name == QLatin1String("expert") && s.shape.size() == 2 && s.integral) return &s;
    return nullptr;
  }
};

/// One stored metric series.
struct MetricCurve {
  QString key;  ///< e.g. "train/lr", "val/accuracy"
  QVector<double> steps, values;
};

/// The run's metrics besides the losses, for the dashboard's metrics tab.
struct RunMetricsData {
  QStringList keys;             ///< every metric key the run has
  QVector<MetricCurve> curves;  ///< the series the tab plots (isMetricsViewKey)
  qint64 loadStep = -1;         ///< the evaluation step of expertLoad
  QVector<QVector<double>> expertLoad;  ///< [layer][expert] share of routed tokens (val/load/L<l>/E<i>), last eval
};

/// What the cost curves need about the model (from the resolved config), or why they cannot be drawn.
struct CostModel {
  bool valid = false;
  QString error;
  std::string modelJson;  ///< the complete model section the architecture's FLOPs model prices
  qint64 nLayer = 0;
  qint64 context = 0;
  double bytesPerValue = 4;  ///< of the KV cache (4 fp32, 2 bf16)
};

struct RunDashboardData {
  qint64 runId = 0;
  bool found = false;
  QString name, arch, status, message;
  qint64 totalSteps = 0;
  double tokensPerStep = 0;  ///< batch_size x context
  /// The cumulative-FLOPs x axis (core/report/figures.h training_flops_axis): 3 x the dense layers' forward
  /// FLOPs of one step, and the measured train/flops_ratio by step; denseStepFlops 0 when it cannot be priced.
  double denseStepFlops = 0;
  QVector<double> flopsRatioSteps, flopsRatios;
  double createdAt = 0;      ///< unix seconds
  QVector<double> trainSteps, trainLoss, trainWall;  ///< wall: unix seconds
  QVector<double> valSteps, valLoss, valWall;
  RoutingHistory routing;
  QVector<EvalSnapshot> evals;
  QVector<ProbeSnapshot> probes;
  CostModel cost;
  QString task = QStringLiteral("lm");  ///< "classification" when the run reports accuracy
  RunMetricsData metrics;
};

}  // namespace routelab

Q_DECLARE_METATYPE(routelab::RunDashboardData)
