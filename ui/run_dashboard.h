// RunDashboard: everything about one run in one panel: loss curves (EMA or moving average over the faint raw series; x
// = step, tokens, wall time or training FLOPs), routed-token % per layer (bars and a layer x step heat map), the probe
// text's per-token routing with a slider over the stored evaluations, the FLOPs ratio and KV memory against sequence
// length for the run's current routing, and alerts; a second tab plots the run's other metrics (RunMetricsView), a
// third what the routers route by kind of token (RunTokenRouting). Every panel but the streaming loss plot is a
// catalogue figure (core/report/builders/catalog.h, core/report/figure/run_panels.h) drawn by the figure renderer, so
// it exports as the paper figure. Fills from the store; follows the live run when it is the one running.
#pragma once
#include <QElapsedTimer>
#include <QPointer>
#include <QVector>
#include <QWidget>

#include "core/report/builders/catalog.h"
#include "core/report/figure/curves.h"
#include "core/report/figure/figure.h"
#include "ui/dashboard_data.h"
#include "core/run/run_health.h"
#include "ui/run_progress.h"
#include "widgets/token_routing_widget.h"

class QComboBox;
class QLabel;
class QSlider;
class QSplitter;
class QTabWidget;
class QTimer;

namespace routelab {

class AlertBarWidget;
class FigureView;
class LossPlotWidget;
class RunController;
class RunMetricsView;
class RunTokenRouting;
class StoreService;

/// The token view's rows: a token map's heat map (core/report/figure/run_panels.h) row by row, each on its range (a
/// [0, 1] row of only 0s and 1s as decisions, other [0, 1] rows as unit values, the rest as integers or values
/// over their own range).
QVector<TokenRoutingWidget::Row> tokenRows(const FigureHeatmap& map);
/// The rows of a token view for one probe or trace: the "token-map" figure's rows. `colourBy`: "gate" (gate
/// values; TAGAT: per layer and expert), "decision" (hard decisions) or "expert" (TAGAT: the chosen expert ids per
/// layer and rank, 0..N-1); per-token data of other models (exit layer, depth, path, ...) and p(next token) are
/// always added.
QVector<TokenRoutingWidget::Row> probeRows(const ProbeSnapshot& probe, const QString& colourBy);

class RunDashboard : public QWidget {
  Q_OBJECT

 public:
  enum class XAxis { Step, Tokens, WallTime, Flops };
  /// After a live evaluation, the store is read again this much later (the store writer flushes every 0.25 s).
  static constexpr int kReloadAfterEvalMs = 800;
  /// While live, the routing panels are redrawn at most this often (each redraw rebuilds their figures).
  static constexpr int kRoutingRedrawMs = 250;

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

  /// The panels drawn from catalogue figures (core/report/builders/catalog.h), each exportable from its view.
  enum class Panel { RoutedLayers, RoutingHistory, TokenMap, Cost };
  /// The catalogue request that builds `panel` from the store as shown now (`routelab-cli figure` with these
  /// fields draws the same numbers for a stored run).
  FigureRequest panelRequest(Panel panel) const;
  /// The figure behind `panel` as drawn now (the token map: the rows of the token view).
  const Figure& panelFigure(Panel panel) const;

  LossPlotWidget* lossPlot() const { return loss_; }
  FigureView* routingBars() const { return bars_; }
  FigureView* routingHistory() const { return history_; }
  TokenRoutingWidget* tokenView() const { return tokens_; }
  FigureView* costView() const { return cost_; }
  AlertBarWidget* alertBar() const { return alerts_; }
  QSlider* probeSlider() const { return probeSlider_; }
  QComboBox* colourBy() const { return colourBy_; }
  QTabWidget* tabs() const { return tabs_; }
  RunMetricsView* metricsView() const { return metrics_; }
  /// The "By token" tab (language models): what the routers route, from the run's checkpoints.
  RunTokenRouting* tokenRouting() const { return tokenRouting_; }
  /// While live, the store is read this often with the metrics or By-token tab shown (they follow the run), or less
  /// often where a read takes longer (liveMetricsReloadMs).
  static constexpr int kLiveMetricsReloadMs = 3000;
  /// The inverse of the most of the time between two live reads that one read may take: a read, which grows with
  /// the run's stored rows (routelab-bench-dashboard: 2.5 s for the first of a routed run of 200,000 logged steps,
  /// 0.2 s for the next), keeps the reader and the GUI busy at most 1 / kLiveReadShareInverse of the time.
  static constexpr int kLiveReadShareInverse = 5;
  /// The live reads' interval after a read (request to applied) of `lastReadMs`: kLiveMetricsReloadMs, or
  /// kLiveReadShareInverse times the read's time where that is longer.
  static int liveMetricsReloadMs(qint64 lastReadMs);
  /// The interval of the live reads now, and how long the last read took from request to applied (0: none yet).
  int metricsReloadIntervalMs() const;
  qint64 lastReadMs() const { return lastReadMs_; }
  /// Of lastReadMs, the store read on the reader's thread (RunDashboardData::readMs).
  qint64 lastStoreReadMs() const { return stored_.readMs; }
  /// Where the dashboard is shown less than this high (a laptop's workspace), the token view and the cost panel
  /// move from under the loss and routing panels to a tab of their own, so every panel keeps a readable height;
  /// they move back from kExpandHeight (a margin, so a height near the threshold does not flip them to and fro).
  static constexpr int kCompactHeight = 600;
  static constexpr int kExpandHeight = kCompactHeight + 60;
  bool isCompact() const { return compact_; }
  /// The token view and the cost panel (under the loss and routing panels, or a tab of their own when compact).
  QWidget* lowerPanels() const { return lower_; }

 protected:
  void showEvent(QShowEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

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
  void rebuildHealth();
  void updateAlerts();
  void setTitle(const QString& title);
  double x(double step, double wall) const;
  void rebuildFlopsAxis();
  double wallOrigin() const;
  std::vector<bool> routedLayers() const;
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
  QStringList alertEpisode_;  ///< what the alerts last logged said (a stall by its kind: its seconds count up)
  QElapsedTimer clock_;
  QTimer* reloadTimer_ = nullptr;
  QTimer* alertTimer_ = nullptr;
  QTimer* routingTimer_ = nullptr;
  bool routingPending_ = false;  ///< live routing arrived since the last redraw
  QTimer* metricsTimer_ = nullptr;
  QElapsedTimer readClock_;  ///< since the first request of the store read in flight (invalid: none)
  qint64 lastReadMs_ = 0;
  bool colourChosen_ = false;  ///< the user picked a colour mode (else TAGAT probes default to expert ids)

  QLabel* titleLabel_ = nullptr;
  QComboBox* xAxisCombo_ = nullptr;
  AlertBarWidget* alerts_ = nullptr;
  LossPlotWidget* loss_ = nullptr;
  FigureView* bars_ = nullptr;
  FigureView* history_ = nullptr;
  TokenRoutingWidget* tokens_ = nullptr;
  Figure tokenFigure_;
  QSlider* probeSlider_ = nullptr;
  QLabel* probeLabel_ = nullptr;
  QComboBox* colourBy_ = nullptr;
  FigureView* cost_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  RunMetricsView* metrics_ = nullptr;
  RunTokenRouting* tokenRouting_ = nullptr;
  QSplitter* rows_ = nullptr;   ///< the Routing tab: upper panels over lower_
  QWidget* lower_ = nullptr;
  bool compact_ = false;
  QPointer<QWidget> room_;      ///< what the dashboard is shown in (a scroll area's viewport), watched for resizes

  /// Compact or not for the height there is to show the dashboard in.
  void fitToRoom();
  void setCompact(bool compact);
};

}  // namespace routelab
