// RunDashboard: everything about one run in one panel: loss curves (EMA or moving average over the faint raw
// series; x = step, tokens or wall time), routed-token % per layer (bars and a layer x step heat map), the probe
// text's per-token routing with a slider over the stored evaluations, FLOPs and KV memory against sequence length
// for the run's current routing, and alerts; a second tab plots the run's other metrics (RunMetricsView). Fills
// from the store; follows the live run when it is the one running.
#pragma once
#include <QElapsedTimer>
#include <QVector>
#include <QWidget>

#include "core/report/curves.h"
#include "ui/dashboard_data.h"
#include "core/run/run_health.h"
#include "ui/run_progress.h"
#include "widgets/token_routing_widget.h"

class QComboBox;
class QLabel;
class QSlider;
class QTabWidget;
class QTimer;

namespace routelab {

class AlertBarWidget;
class LossPlotWidget;
class RoutingBarsWidget;
class RoutingHeatmapWidget;
class RunController;
class RunMetricsView;
class StoreService;
class XyCurvesWidget;

/// The rows of a token view for one probe or trace. `colourBy`: "gate" (gate values; TAGAT: per layer and
/// expert), "decision" (hard decisions) or "expert" (TAGAT: the chosen expert ids per layer and rank, 0..N-1);
/// per-token data of other models (exit layer, depth, path, ...) and p(next token) are always added.
QVector<TokenRoutingWidget::Row> probeRows(const ProbeSnapshot& probe, const QString& colourBy);

class RunDashboard : public QWidget {
  Q_OBJECT

 public:
  enum class XAxis { Step, Tokens, WallTime, Flops };
  /// After a live evaluation, the store is read again this much later (the store writer flushes every 0.25 s).
  static constexpr int kReloadAfterEvalMs = 800;

  RunDashboard(qint64 runId, StoreService* store, QWidget* parent = nullptr);
  ~RunDashboard() override;

  qint64 runId() const { return runId_; }
  QString title() const { return title_; }
  /// Takes progress of `controller` while its current run is this one (connections die with the dashboard).
  void followLive(RunController* controller);
  bool isLive() const { return live_; }
  /// Reads the run from the store again (off the GUI thread).
  void reload();

  void setXAxis(XAxis axis);
  XAxis xAxis() const { return xAxis_; }
  int probeCount() const { return static_cast<int>(data_.probes.size()); }
  /// Shows the probe of the index-th stored evaluation.
  void showProbe(int index);
  qint64 shownProbeStep() const;
  int evalCount() const;

  LossPlotWidget* lossPlot() const { return loss_; }
  RoutingBarsWidget* routingBars() const { return bars_; }
  RoutingHeatmapWidget* routingHeatmap() const { return heatmap_; }
  TokenRoutingWidget* tokenView() const { return tokens_; }
  XyCurvesWidget* flopsCurves() const { return flops_; }
  XyCurvesWidget* kvCurves() const { return kv_; }
  AlertBarWidget* alertBar() const { return alerts_; }
  QSlider* probeSlider() const { return probeSlider_; }
  QComboBox* colourBy() const { return colourBy_; }
  QTabWidget* tabs() const { return tabs_; }
  RunMetricsView* metricsView() const { return metrics_; }
  /// While live, the store is read this often with the metrics tab shown (its curves follow the run).
  static constexpr int kLiveMetricsReloadMs = 3000;

 Q_SIGNALS:
  void titleChanged(const QString& title);
  /// A store read was applied (tests wait on it).
  void dataLoaded();

 private:
  void onLoaded(const RunDashboardData& data);
  void onProgress(const ProgressBatch& batch);
  void onLiveFinished(const RunResult& result);
  void mergeLive();
  void appendLiveStep(const StepSample& sample);
  void appendLiveEval(const EvalSample& sample);
  void renderLoss();
  void renderRouting();
  void renderProbe();
  void renderCost();
  /// Classifiers: the measured FLOPs ratio per evaluation in place of the length curves; no KV panel.
  void renderClassifierCost();
  void rebuildHealth();
  void updateAlerts();
  void setTitle(const QString& title);
  double x(double step, double wall) const;
  void rebuildFlopsAxis();
  double wallOrigin() const;
  QVector<double> maskDense(const QVector<double>& column) const;
  const EvalSnapshot* latestEval() const;

  qint64 runId_ = 0;
  StoreService* store_ = nullptr;
  QString title_;
  bool live_ = false;
  bool loadedOnce_ = false;
  XAxis xAxis_ = XAxis::Step;
  CumulativeFlops flopsAxis_;  ///< rebuilt from data_ before each loss render
  RunDashboardData stored_;  ///< the last store read
  RunDashboardData data_;    ///< stored_ plus the live points newer than it
  QVector<StepSample> liveSteps_;
  QVector<EvalSample> liveEvals_;
  RunHealth health_;
  QElapsedTimer clock_;
  QTimer* reloadTimer_ = nullptr;
  QTimer* alertTimer_ = nullptr;
  QTimer* metricsTimer_ = nullptr;
  bool colourChosen_ = false;  ///< the user picked a colour mode (else TAGAT probes default to expert ids)

  QLabel* titleLabel_ = nullptr;
  QComboBox* xAxisCombo_ = nullptr;
  AlertBarWidget* alerts_ = nullptr;
  LossPlotWidget* loss_ = nullptr;
  RoutingBarsWidget* bars_ = nullptr;
  RoutingHeatmapWidget* heatmap_ = nullptr;
  TokenRoutingWidget* tokens_ = nullptr;
  QSlider* probeSlider_ = nullptr;
  QLabel* probeLabel_ = nullptr;
  QComboBox* colourBy_ = nullptr;
  XyCurvesWidget* flops_ = nullptr;
  XyCurvesWidget* kv_ = nullptr;
  QWidget* kvPanel_ = nullptr;  ///< kv_ with its title; hidden for classifiers
  QTabWidget* tabs_ = nullptr;
  RunMetricsView* metrics_ = nullptr;
};

}  // namespace routelab
