// Value types behind a run dashboard: what the store reader extracts from a run (curves, routing history,
// evaluations with their per-layer routing, the probe's per-token routing at each evaluation, the cost figure).
// Read on the store thread, copied to the GUI thread: core's typed records and Qt values, nothing that points into
// the store.
#pragma once
#include <QMetaType>
#include <QString>
#include <QStringList>
#include <QVector>

#include <string>
#include <vector>

#include "core/report/builders/catalog.h"
#include "core/report/figure/figure.h"
#include "core/run/evaluation_record.h"
#include "core/run/probe_record.h"
#include "core/run/routing_history.h"

namespace routelab {

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

/// The probe text's per-token routing at one evaluation: the typed record (what the token map is built from, by
/// core/report/figure/run_panels.h) and the Qt values the captions and the inspector's tables show.
struct ProbeSnapshot {
  /// One ranked next-token prediction (the token inspector's traces).
  struct Prediction {
    QString text;
    double prob = 0;
  };
  ProbeRecord record;
  qint64 step = 0;
  QString task = QStringLiteral("lm");  ///< "lm" or "classification"
  QStringList tokens;
  QVector<double> nextLogprob;  ///< log p(next token) per position; NaN where unknown
  QVector<QVector<Prediction>> topK;  ///< per position, most likely first (traces only)
  qint64 droppedTokens = 0;           ///< tokens cut from a traced text that exceeded the context
  // classification
  QStringList labels;
  QVector<double> classProbs;
  int predicted = -1;
  int label = -1;  ///< the probe example's gold label (-1 for a typed text)
};

/// The run's metrics besides the losses, for the dashboard's metrics tab: the catalogue's figures themselves.
struct RunMetricsData {
  QStringList keys;     ///< every metric key the run has
  Figure panels;        ///< "metrics" (every panel; meta "panel_ids" names each panel's quantity)
  QString panelsError;  ///< why there are no panels (no metrics besides the loss yet)
  Figure loads;         ///< "expert-loads" at the last evaluation; no panels when the run reports none
};

struct RunDashboardData {
  qint64 runId = 0;
  bool found = false;
  qint64 readMs = 0;  ///< how long the store read took on the reader's thread (the rest of a read is applying it)
  QString name, arch, status, message;
  RunStyle style;  ///< the label and colour every catalogue figure gives this run (the panels use them too)
  qint64 totalSteps = 0;
  double tokensPerStep = 0;  ///< batch_size x context
  /// The cumulative-FLOPs x axis (core/report/builders/catalog.h training_flops_axis): 3 x the dense layers' forward
  /// FLOPs of one step, and the measured train/flops_ratio by step; denseStepFlops 0 when it cannot be priced.
  double denseStepFlops = 0;
  QVector<double> flopsRatioSteps, flopsRatios;
  double createdAt = 0;      ///< unix seconds
  QVector<double> trainSteps, trainLoss, trainWall;  ///< wall: unix seconds
  QVector<double> valSteps, valLoss, valWall;
  RoutingHistory routing;  ///< training-mode routing per logged step (core/run/routing_history.h)
  QVector<EvalSnapshot> evals;
  QVector<ProbeSnapshot> probes;
  /// The cost panel: the catalogue's "cost-length" figure of this run (language models) or its "curves" of
  /// val/flops_ratio (classifiers), built by the loader with build_figure; empty with `costError` saying why.
  Figure cost;
  QString costError;
  QString task = QStringLiteral("lm");  ///< "classification" when the run reports accuracy
  QVector<qint64> checkpointSteps;      ///< the steps of the run's stored checkpoints, increasing
  RunMetricsData metrics;
};

}  // namespace routelab

Q_DECLARE_METATYPE(routelab::RunDashboardData)
