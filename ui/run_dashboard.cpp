// RunDashboard: merges the last store read with the live points newer than it, renders each part from the
// merged data, and appends live points between reads (each widget coalesces its replots).
#include "ui/run_dashboard.h"

#include <QComboBox>
#include <QEvent>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSlider>
#include <QSplitter>
#include <QTabWidget>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/report/figure/run_panels.h"
#include "core/util/logging.h"
#include "ui/dashboard_loader.h"
#include "ui/figure_render.h"
#include "ui/loss_smoothing.h"
#include "ui/run_controller.h"
#include "ui/run_metrics_view.h"
#include "ui/run_token_routing.h"
#include "ui/store_service.h"
#include "widgets/alert_bar_widget.h"
#include "widgets/loss_plot_widget.h"

namespace routelab {
namespace {

constexpr int kAlertCheckMs = 1000;

double lastOr(const QVector<double>& v, double fallback) { return v.isEmpty() ? fallback : v.back(); }

void addEvaluation(RunHealth& health, const EvalSnapshot& e) {
  // Explicit ranges: braces around two QList<bool> iterators would make a two-element initializer list of bools.
  const std::vector<double> shares(e.routedFraction.cbegin(), e.routedFraction.cend());
  const std::vector<bool> routed(e.routed.cbegin(), e.routed.cend());
  health.add_evaluation(static_cast<double>(e.step), shares, routed);
}

QWidget* titled(QWidget* content, QWidget* parent) {
  auto* box = new QWidget(parent);
  auto* layout = new QVBoxLayout(box);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(content);
  return box;
}

}  // namespace

RunDashboard::RunDashboard(qint64 runId, StoreService* store, QWidget* parent)
    : QWidget(parent), runId_(runId), store_(store) {
  setObjectName(QStringLiteral("runDashboard%1").arg(runId));
  clock_.start();

  titleLabel_ = new QLabel(this);
  QFont bold = titleLabel_->font();
  bold.setBold(true);
  titleLabel_->setFont(bold);
  titleLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  xAxisCombo_ = new QComboBox(this);
  xAxisCombo_->setObjectName(QStringLiteral("xAxisCombo"));
  xAxisCombo_->addItem(tr("step"), static_cast<int>(XAxis::Step));
  xAxisCombo_->addItem(tr("tokens seen"), static_cast<int>(XAxis::Tokens));
  xAxisCombo_->addItem(tr("wall time"), static_cast<int>(XAxis::WallTime));
  xAxisCombo_->addItem(tr("training FLOPs"), static_cast<int>(XAxis::Flops));
  xAxisCombo_->setToolTip(tr("x axis of the loss curves; training FLOPs: the layers' cumulative FLOPs, each step "
                             "priced at 3x the dense forward times the FLOPs ratio measured from its routing"));
  auto* header = new QHBoxLayout;
  header->addWidget(titleLabel_, 1);
  header->addWidget(new QLabel(tr("x axis"), this));
  header->addWidget(xAxisCombo_);

  alerts_ = new AlertBarWidget(this);
  loss_ = new LossPlotWidget(this);
  useDebiasedEma(loss_);
  loss_->setTitle(tr("loss"));
  bars_ = new FigureView(this);
  bars_->setObjectName(QStringLiteral("routedLayersView"));
  history_ = new FigureView(this);
  history_->setObjectName(QStringLiteral("routingHistoryView"));

  tokens_ = new TokenRoutingWidget(this);
  probeSlider_ = new QSlider(Qt::Horizontal, this);
  probeSlider_->setObjectName(QStringLiteral("probeSlider"));
  probeSlider_->setRange(0, 0);
  probeSlider_->setToolTip(tr("Scrub the stored evaluations: the probe text's routing at each"));
  probeSlider_->setMinimumWidth(100);  // a handle to drag, not a stub, in a narrow panel
  probeLabel_ = new QLabel(tr("no probe yet"), this);
  colourBy_ = new QComboBox(this);
  colourBy_->setObjectName(QStringLiteral("colourBy"));
  colourBy_->addItem(tr("gate value"), QStringLiteral("gate"));
  colourBy_->addItem(tr("hard decision"), QStringLiteral("decision"));
  colourBy_->addItem(tr("expert id (TAGAT)"), QStringLiteral("expert"));
  colourBy_->setToolTip(tr("What colours the layers' rows; per-token data (exit layer, depth, path, ...) is always shown"));
  auto* probeControls = new QHBoxLayout;
  probeControls->addWidget(new QLabel(tr("evaluation"), this));
  probeControls->addWidget(probeSlider_, 1);
  probeControls->addWidget(probeLabel_);
  probeControls->addWidget(new QLabel(tr("colour by"), this));
  probeControls->addWidget(colourBy_);
  auto* tokenPanel = new QWidget(this);
  auto* tokenLayout = new QVBoxLayout(tokenPanel);
  tokenLayout->setContentsMargins(2, 2, 2, 2);
  tokenLayout->addLayout(probeControls);
  tokenLayout->addWidget(tokens_, 1);

  cost_ = new FigureView(this);
  cost_->setObjectName(QStringLiteral("costView"));

  auto* routing = new QSplitter(Qt::Vertical, this);
  routing->addWidget(titled(bars_, this));
  routing->addWidget(titled(history_, this));
  auto* top = new QSplitter(Qt::Horizontal, this);
  top->addWidget(titled(loss_, this));
  top->addWidget(routing);
  auto* bottom = new QSplitter(Qt::Horizontal, this);
  bottom->addWidget(tokenPanel);
  bottom->addWidget(titled(cost_, this));
  bottom->setStretchFactor(0, 3);
  bottom->setStretchFactor(1, 2);
  auto* rows = new QSplitter(Qt::Vertical, this);
  rows->addWidget(top);
  rows->addWidget(bottom);
  rows->setStretchFactor(0, 1);
  rows->setStretchFactor(1, 1);
  rows_ = rows;
  lower_ = bottom;
  top->setStretchFactor(0, 1);
  top->setStretchFactor(1, 1);
  // Shares of the width from the start, not from the panels' size hints (the token view's is its whole text).
  top->setSizes({500, 500});
  bottom->setSizes({600, 400});

  metrics_ = new RunMetricsView(this);
  tabs_ = new QTabWidget(this);
  tabs_->setObjectName(QStringLiteral("dashboardTabs"));
  tabs_->setDocumentMode(true);
  tabs_->addTab(rows, tr("Routing"));
  tabs_->addTab(metrics_, tr("Metrics"));
  tokenRouting_ = new RunTokenRouting(runId_, store_->dbPath(), this);
  tabs_->addTab(tokenRouting_, tr("By token"));
  tabs_->setTabToolTip(tabs_->indexOf(tokenRouting_),
                       tr("What the routers route: each token group's share on the routed path, per routed layer, "
                          "from the run's checkpoints"));

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->setSpacing(4);
  layout->addLayout(header);
  layout->addWidget(alerts_);
  layout->addWidget(tabs_, 1);

  reloadTimer_ = new QTimer(this);
  reloadTimer_->setSingleShot(true);
  reloadTimer_->setInterval(kReloadAfterEvalMs);
  connect(reloadTimer_, &QTimer::timeout, this, &RunDashboard::reload);
  routingTimer_ = new QTimer(this);
  routingTimer_->setSingleShot(true);
  routingTimer_->setInterval(kRoutingRedrawMs);
  connect(routingTimer_, &QTimer::timeout, this, [this] {
    if (!routingPending_) return;
    routingPending_ = false;
    renderRouting();
    routingTimer_->start();
  });
  alertTimer_ = new QTimer(this);
  alertTimer_->setInterval(kAlertCheckMs);
  connect(alertTimer_, &QTimer::timeout, this, &RunDashboard::updateAlerts);
  metricsTimer_ = new QTimer(this);
  metricsTimer_->setInterval(kLiveMetricsReloadMs);
  connect(metricsTimer_, &QTimer::timeout, this, [this] {
    // The metrics tab follows the run's curves; the By-token tab its checkpoints.
    if (live_ && (tabs_->currentWidget() == metrics_ || tabs_->currentWidget() == tokenRouting_)) reload();
  });

  connect(xAxisCombo_, qOverload<int>(&QComboBox::currentIndexChanged), this,
          [this](int index) { setXAxis(static_cast<XAxis>(xAxisCombo_->itemData(index).toInt())); });
  connect(probeSlider_, &QSlider::valueChanged, this, [this](int) { renderProbe(); });
  connect(colourBy_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int) {
    colourChosen_ = true;
    renderProbe();
  });
  connect(store_, &StoreService::dashboardLoaded, this, [this](const RunDashboardData& data) {
    if (data.runId == runId_) onLoaded(data);
  });

  setTitle(tr("run %1 (loading…)").arg(runId_));
  reload();
}

RunDashboard::~RunDashboard() = default;

void RunDashboard::reload() {
  if (!readClock_.isValid()) readClock_.start();  // a request while one is in flight joins its read's time
  store_->requestDashboard(runId_);
}

int RunDashboard::liveMetricsReloadMs(qint64 lastReadMs) {
  return static_cast<int>(std::max<qint64>(kLiveMetricsReloadMs, kLiveReadShareInverse * lastReadMs));
}

int RunDashboard::metricsReloadIntervalMs() const { return metricsTimer_->interval(); }

void RunDashboard::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (QWidget* room = parentWidget(); room && room != room_) {
    if (room_) room_->removeEventFilter(this);
    room_ = room;
    room->installEventFilter(this);
  }
  fitToRoom();
}

bool RunDashboard::eventFilter(QObject* watched, QEvent* event) {
  if (watched == room_ && event->type() == QEvent::Resize) fitToRoom();
  return QWidget::eventFilter(watched, event);
}

void RunDashboard::fitToRoom() {
  // The room, not the dashboard's own height: in a scroll area the dashboard never gets smaller than its minimum.
  const int room = room_ ? room_->height() : height();
  if (!compact_ && room < kCompactHeight) setCompact(true);
  else if (compact_ && room >= kExpandHeight) setCompact(false);
}

void RunDashboard::setCompact(bool compact) {
  compact_ = compact;
  if (compact) {
    tabs_->insertTab(1, lower_, tr("Tokens and cost"));  // taken out of the Routing tab's splitter
  } else {
    tabs_->removeTab(tabs_->indexOf(lower_));
    rows_->addWidget(lower_);
    lower_->show();  // the tab widget had hidden it
    rows_->setSizes({500, 500});
  }
}

void RunDashboard::followLive(RunController* controller) {
  live_ = true;
  health_.set_live(true);
  alertTimer_->start();
  metricsTimer_->start();
  connect(controller, &RunController::progressReceived, this, [this, controller](const ProgressBatch& batch) {
    if (live_ && controller->currentRunId() == runId_) onProgress(batch);
  });
  connect(controller, &RunController::runFinished, this, [this](const RunResult& result) {
    if (live_ && result.runId == runId_) onLiveFinished(result);
  });
}

void RunDashboard::setTitle(const QString& title) {
  title_ = title;
  titleLabel_->setText(title);
  Q_EMIT titleChanged(title);
}

void RunDashboard::onLoaded(const RunDashboardData& data) {
  if (!data.found) {
    setTitle(data.message.isEmpty() ? tr("run %1 is not in the store").arg(runId_)
                                    : tr("run %1: %2").arg(runId_).arg(data.message));
    readClock_.invalidate();
    Q_EMIT dataLoaded();
    return;
  }
  stored_ = data;
  loadedOnce_ = true;
  // Live samples the store now holds are not needed for later merges: keep only the newer ones.
  const double lastTrain = lastOr(stored_.trainSteps, -1);
  const double lastRouting = stored_.routing.empty() ? -1 : static_cast<double>(stored_.routing.steps.back());
  const double lastVal = lastOr(stored_.valSteps, -1);
  const double lastEval = stored_.evals.isEmpty() ? -1 : static_cast<double>(stored_.evals.back().step);
  liveSteps_.removeIf([&](const StepSample& s) {
    const double step = static_cast<double>(s.step);
    return step <= lastTrain && (s.routedFraction.isEmpty() || step <= lastRouting);
  });
  liveEvals_.removeIf([&](const EvalSample& e) {
    return static_cast<double>(e.step) <= lastVal && static_cast<double>(e.step) <= lastEval;
  });
  setTitle(tr("run %1 · %2 · %3 · %4").arg(runId_).arg(data.name, data.arch, live_ ? tr("running") : data.status));
  mergeLive();
  const bool atEnd = probeSlider_->value() >= probeSlider_->maximum();
  {
    const QSignalBlocker blocker(probeSlider_);
    probeSlider_->setRange(0, std::max(0, probeCount() - 1));
    if (atEnd) probeSlider_->setValue(probeSlider_->maximum());
  }
  if (!colourChosen_ && !data_.probes.isEmpty() && has_expert_ids(data_.probes.back().record)) {
    const QSignalBlocker blocker(colourBy_);  // TAGAT: which experts each token went to, by default
    colourBy_->setCurrentIndex(colourBy_->findData(QStringLiteral("expert")));
  }
  renderLoss();
  renderRouting();
  renderProbe();
  renderCost();
  metrics_->setData(data_.runId, data_.metrics);
  // A classifier's routing is its experts' (the Metrics tab's expert loads); token groups are a language model's.
  tabs_->setTabVisible(tabs_->indexOf(tokenRouting_), data.task != QStringLiteral("classification"));
  tokenRouting_->setCheckpoints(data.checkpointSteps);
  rebuildHealth();
  updateAlerts();
  if (readClock_.isValid()) {  // the read's time, request to applied, sets how often live reads come
    lastReadMs_ = readClock_.elapsed();
    readClock_.invalidate();
    if (const int interval = liveMetricsReloadMs(lastReadMs_); interval != metricsTimer_->interval())
      metricsTimer_->setInterval(interval);  // restarts an active timer
  }
  Q_EMIT dataLoaded();
}

void RunDashboard::mergeLive() {
  data_ = stored_;
  for (const StepSample& s : liveSteps_) appendLiveStep(s);
  for (const EvalSample& e : liveEvals_) appendLiveEval(e);
}

void RunDashboard::appendLiveStep(const StepSample& s) {
  const double step = static_cast<double>(s.step);
  if (data_.trainSteps.isEmpty() || step > data_.trainSteps.back()) {
    data_.trainSteps.push_back(step);
    data_.trainLoss.push_back(s.loss);
    data_.trainWall.push_back(s.wallTime);
  }
  if (!s.routedFraction.isEmpty())
    data_.routing.append(s.step, std::vector<double>(s.routedFraction.cbegin(), s.routedFraction.cend()));
  if (std::isfinite(s.flopsRatio) && (data_.flopsRatioSteps.isEmpty() || step > data_.flopsRatioSteps.back())) {
    data_.flopsRatioSteps.push_back(step);
    data_.flopsRatios.push_back(s.flopsRatio);
  }
  if (data_.tokensPerStep <= 0 && s.step > 0)
    data_.tokensPerStep = static_cast<double>(s.tokensSeen) / static_cast<double>(s.step);
}

void RunDashboard::appendLiveEval(const EvalSample& e) {
  const double step = static_cast<double>(e.step);
  if (data_.valSteps.isEmpty() || step > data_.valSteps.back()) {
    data_.valSteps.push_back(step);
    data_.valLoss.push_back(e.valLoss);
    data_.valWall.push_back(e.wallTime);
  }
  if (data_.evals.isEmpty() || e.step > data_.evals.back().step) {
    EvalSnapshot snap;
    snap.step = e.step;
    snap.valLoss = e.valLoss;
    snap.flopsRatio = e.flopsRatio;
    snap.routedFraction = e.routedFraction;
    if (!e.layers.empty()) {
      setEvalLayers(snap, e.layers);
    } else if (!stored_.evals.isEmpty()) {  // the layers' flags do not change during a run
      snap.routed = stored_.evals.back().routed;
      snap.kinds = stored_.evals.back().kinds;
    }
    data_.evals.push_back(snap);
  }
}

double RunDashboard::wallOrigin() const {
  if (stored_.found && stored_.createdAt > 0) return stored_.createdAt;
  if (!liveSteps_.isEmpty()) return liveSteps_.front().wallTime - liveSteps_.front().elapsedSeconds;
  return 0;
}

double RunDashboard::x(double step, double wall) const {
  switch (xAxis_) {
    case XAxis::Step: return step;
    case XAxis::Tokens: return step * data_.tokensPerStep;
    case XAxis::WallTime: return std::max(0.0, wall - wallOrigin());
    case XAxis::Flops: return flopsAxis_.at(static_cast<std::int64_t>(step));
  }
  return step;
}

void RunDashboard::setXAxis(XAxis axis) {
  if (xAxisCombo_->currentIndex() != static_cast<int>(axis)) {
    const QSignalBlocker blocker(xAxisCombo_);
    xAxisCombo_->setCurrentIndex(static_cast<int>(axis));
  }
  xAxis_ = axis;
  renderLoss();
}

void RunDashboard::rebuildFlopsAxis() {
  if (xAxis_ != XAxis::Flops) return;
  std::vector<std::int64_t> steps;
  for (double s : data_.flopsRatioSteps) steps.push_back(static_cast<std::int64_t>(s));
  flopsAxis_ = CumulativeFlops(data_.denseStepFlops, std::move(steps),
                               std::vector<double>(data_.flopsRatios.begin(), data_.flopsRatios.end()));
  if (data_.denseStepFlops <= 0)
    loss_->setXAxisLabel(tr("training FLOPs: unavailable (the run's config cannot be priced)"), false);
}

void RunDashboard::renderLoss() {
  switch (xAxis_) {
    case XAxis::Step: loss_->setXAxisLabel(tr("step"), true); break;
    case XAxis::Tokens: loss_->setXAxisLabel(tr("tokens seen"), false); break;
    case XAxis::WallTime: loss_->setXAxisLabel(tr("wall time (s since the run was created)"), false); break;
    case XAxis::Flops: loss_->setXAxisLabel(tr("training FLOPs (layers, measured routing)"), false); break;
  }
  rebuildFlopsAxis();
  QVector<double> tx, vx;
  for (qsizetype i = 0; i < data_.trainSteps.size(); ++i) tx.push_back(x(data_.trainSteps[i], data_.trainWall[i]));
  for (qsizetype i = 0; i < data_.valSteps.size(); ++i) vx.push_back(x(data_.valSteps[i], data_.valWall[i]));
  const bool follow = loss_->autoFollow();
  loss_->setCurves(tx, data_.trainLoss, vx, data_.valLoss);
  loss_->setExpectedSteps(xAxis_ == XAxis::Step ? static_cast<double>(data_.totalSteps) : 0);
  loss_->setAutoFollow(follow);
}

std::vector<bool> RunDashboard::routedLayers() const {
  const EvalSnapshot* eval = latestEval();
  return eval ? std::vector<bool>(eval->routed.cbegin(), eval->routed.cend()) : std::vector<bool>();
}

const EvalSnapshot* RunDashboard::latestEval() const {
  return data_.evals.isEmpty() ? nullptr : &data_.evals.back();
}

int RunDashboard::evalCount() const { return static_cast<int>(data_.evals.size()); }

void RunDashboard::renderRouting() {
  // The catalogue's "routed-layers" (metric "both") and "routing-history" figures of this run, from the data
  // shown now: the last evaluation and the training-mode columns logged since, live ones included.
  const EvalSnapshot* eval = latestEval();
  RoutedLayersGroup group;
  group.label = data_.style.label;
  group.color = data_.style.color;
  group.routed = routedLayers();
  if (eval) group.inference.push_back(std::vector<double>(eval->routedFraction.cbegin(), eval->routedFraction.cend()));
  if (const auto* column = data_.routing.column_at(0, &group.training_step)) group.training = *column;
  Figure bars;
  bars.name = "routed-layers";
  if (eval || !group.training.empty()) bars.panels.push_back(routed_layers_panel({group}));
  bars_->setFigure(std::move(bars));
  const bool anyRouted = std::any_of(group.routed.begin(), group.routed.end(), [](bool r) { return r; });
  QString caption = tr("routed-token % per layer");
  if (!eval && group.training.empty()) caption = tr("routed-token % per layer: no routing logged yet");
  else if (eval && !group.routed.empty() && !anyRouted) caption = tr("every layer is dense: nothing is routed");
  else if (eval) caption += tr(" · inference at eval step %1").arg(eval->step);
  if (!group.training.empty() && (anyRouted || !eval))
    caption += tr(" · training at step %1 (faint)").arg(group.training_step);
  bars_->setCaption(caption, tr("Inference mode: the evaluation's share of tokens each layer routed; training mode: "
                                "the share at the last logged step. Hatched: layers that do not route. "
                                "Export: the catalogue figure \"routed-layers\" with metric \"both\"."));
  Figure history;
  history.name = "routing-history";
  if (!data_.routing.empty())
    history.panels.push_back(routing_history_panel(data_.style.label, data_.routing, group.routed));
  history_->setFigure(std::move(history));
  const QString historyCaption = tr("routed-token % per layer over training (training mode, logged steps)");
  history_->setCaption(data_.routing.empty()  ? tr("routed-token % over training: nothing logged yet")
                       : anyRouted || !eval ? historyCaption
                                            : tr("routed-token % over training: no routed layer"));
}

qint64 RunDashboard::shownProbeStep() const {
  const int index = probeSlider_->value();
  return index >= 0 && index < probeCount() ? data_.probes[index].step : -1;
}

void RunDashboard::showProbe(int index) { probeSlider_->setValue(index); }

QVector<TokenRoutingWidget::Row> tokenRows(const FigureHeatmap& map) {
  QVector<TokenRoutingWidget::Row> rows;
  for (std::size_t r = 0; r < map.rows; ++r) {
    TokenRoutingWidget::Row row;
    row.label = QString::fromStdString(map.row_labels.at(r));
    row.valueName = row.label;
    for (std::size_t c = 0; c < map.cols; ++c) row.values.push_back(map.values[r * map.cols + c]);
    row.lo = r < map.row_lo.size() ? map.row_lo[r] : map.lo;
    row.hi = r < map.row_hi.size() ? map.row_hi[r] : map.hi;
    const bool unit = row.lo == 0 && row.hi == 1;
    const bool binary = unit && std::all_of(row.values.begin(), row.values.end(),
                                            [](double v) { return !std::isfinite(v) || v == 0 || v == 1; });
    row.scale = binary ? TokenRoutingWidget::Scale::Binary
                : unit ? TokenRoutingWidget::Scale::Unit
                       : TokenRoutingWidget::Scale::Integer;
    rows.push_back(std::move(row));
  }
  return rows;
}

QVector<TokenRoutingWidget::Row> probeRows(const ProbeSnapshot& probe, const QString& colourBy) {
  const auto colour = parse_token_map_colour(colourBy.toStdString(), "colour by");
  return tokenRows(token_map_panel("", probe.record, colour).heatmap);
}

void RunDashboard::renderProbe() {
  const int index = probeSlider_->value();
  if (index < 0 || index >= probeCount()) {
    tokenFigure_ = Figure();
    tokens_->clear();
    probeLabel_->setText(tr("no probe yet"));
    tokens_->setCaption(tr("The probe text's routing appears at the first evaluation."));
    return;
  }
  const ProbeSnapshot& probe = data_.probes[index];
  const int n = static_cast<int>(probe.tokens.size());
  // The catalogue's "token-map" figure of this probe, drawn as the text it read.
  tokenFigure_ = Figure();
  tokenFigure_.name = "token-map";
  tokenFigure_.panels.push_back(
      token_map_panel(data_.style.label + " (step " + std::to_string(probe.step) + ")", probe.record,
                      parse_token_map_colour(colourBy_->currentData().toString().toStdString(), "colour by")));
  tokens_->setData(probe.tokens, tokenRows(tokenFigure_.panels.front().heatmap));
  probeLabel_->setText(tr("step %1 (%2/%3)").arg(probe.step).arg(index + 1).arg(probeCount()));
  QString prediction;
  if (probe.task == QLatin1String("classification") && probe.predicted >= 0) {
    prediction = tr(" · predicted %1 (p %2)")
                     .arg(probe.labels.value(probe.predicted))
                     .arg(probe.classProbs.value(probe.predicted), 0, 'f', 3);
    if (probe.label >= 0) prediction += tr(", gold %1").arg(probe.labels.value(probe.label));
  }
  tokens_->setCaption(tr("Probe %1, %2 tokens, inference mode at step %3%4 · viridis 0 → 1 (gates, probabilities) · "
                         "decisions: yellow routed, purple skipped · integers (layers, depths, expert ids): viridis "
                         "over their range, grey none · hover for numbers")
                          .arg(probe.task == QLatin1String("classification") ? tr("example") : tr("text"))
                          .arg(n)
                          .arg(probe.step)
                          .arg(prediction));
}

void RunDashboard::renderCost() {
  cost_->setFigure(data_.cost);
  const EvalSnapshot* eval = latestEval();
  if (!data_.costError.isEmpty()) {
    cost_->setCaption(tr("cost panel unavailable: %1").arg(data_.costError));
    return;
  }
  if (data_.task == QLatin1String("classification")) {
    cost_->setCaption(tr("forward FLOPs ratio per evaluation · last %1")
                          .arg(eval ? QString::number(eval->flopsRatio, 'f', 3) : tr("none yet")),
                      tr("Forward FLOPs of the routed layers on the validation split, priced from the real routing "
                         "decisions, over their dense reference: for TAGAT every expert on every real token (the "
                         "dense oracle); 1 for unrouted models. A classifier encodes each pair once: no KV cache "
                         "and no length axis. Export: the catalogue figure \"curves\" of val/flops_ratio."));
    return;
  }
  cost_->setCaption(tr("FLOPs ratio and KV cache vs sequence length · routing of eval step %1 · measured %2")
                        .arg(eval ? eval->step : 0)
                        .arg(eval ? eval->flopsRatio : 1.0, 0, 'f', 3),
                    tr("Forward FLOPs of all layers for one sequence over a dense model's (2 FLOPs per "
                       "multiply-add of every matrix product executed, work computed and then masked included), "
                       "priced by the architecture's FLOPs model at the per-layer shares the last evaluation "
                       "measured; the point is the ratio the evaluation measured from the real decisions, at the "
                       "run's context. Right: the keys and values every layer caches after a prompt of that "
                       "length, by the architecture's KV rule. Export: the catalogue figure \"cost-length\"."));
}

FigureRequest RunDashboard::panelRequest(Panel panel) const {
  FigureRequest request;
  request.run_ids = {runId_};
  switch (panel) {
    case Panel::RoutedLayers:
      request.name = "routed-layers";
      request.metric = "both";
      break;
    case Panel::RoutingHistory: request.name = "routing-history"; break;
    case Panel::TokenMap:
      request.name = "token-map";
      request.metric = colourBy_->currentData().toString().toStdString();
      request.step = shownProbeStep();
      break;
    case Panel::Cost:
      request.name = data_.task == QLatin1String("classification") ? "curves" : "cost-length";
      if (data_.task == QLatin1String("classification")) request.metric = "val/flops_ratio";
      break;
  }
  return request;
}

const Figure& RunDashboard::panelFigure(Panel panel) const {
  switch (panel) {
    case Panel::RoutedLayers: return bars_->figure();
    case Panel::RoutingHistory: return history_->figure();
    case Panel::TokenMap: return tokenFigure_;
    case Panel::Cost: break;
  }
  return cost_->figure();
}

void RunDashboard::rebuildHealth() {
  health_.reset();
  for (qsizetype i = 0; i < data_.trainSteps.size(); ++i)
    health_.add_train_loss(data_.trainSteps[i], data_.trainLoss[i]);
  for (qsizetype i = 0; i < data_.valSteps.size(); ++i)
    health_.add_validation_loss(data_.valSteps[i], data_.valLoss[i]);
  for (const EvalSnapshot& e : data_.evals) addEvaluation(health_, e);
  if (live_ && !liveSteps_.isEmpty())
    health_.note_progress(clock_.elapsed() / 1000.0, static_cast<double>(liveSteps_.back().step));
}

void RunDashboard::updateAlerts() {
  QStringList errors, warnings, episode;
  for (const HealthAlert& a : health_.alerts(clock_.elapsed() / 1000.0)) {
    (a.severity == HealthAlert::Severity::Error ? errors : warnings) << QString::fromStdString(a.message);
    // A stall's message counts its seconds up: it is one episode until it ends, logged once.
    episode << QString::fromStdString(a.kind == "stalled" ? a.kind : a.message);
  }
  if (!live_ && stored_.status == QLatin1String("failed") && !stored_.message.isEmpty()) {
    warnings.prepend(tr("run failed: %1").arg(stored_.message));
    episode.prepend(warnings.front());
  }
  alerts_->setAlerts(errors, warnings);
  if (episode == alertEpisode_) return;
  alertEpisode_ = episode;
  for (const QString& a : errors + warnings) logger("ui")->warn("run {}: {}", runId_, a.toStdString());
}

void RunDashboard::onProgress(const ProgressBatch& batch) {
  bool evaluated = false;
  QVector<double> tx, ty, vx, vy;
  for (const StepSample& s : batch.steps) {
    liveSteps_.push_back(s);
    health_.add_train_loss(static_cast<double>(s.step), s.loss);
  }
  // One report per batch: the time since the last one is spread over the steps this batch covers.
  if (!batch.steps.isEmpty())
    health_.note_progress(clock_.elapsed() / 1000.0, static_cast<double>(batch.steps.back().step));
  for (const EvalSample& e : batch.evals) {
    liveEvals_.push_back(e);
    evaluated = true;
  }
  if (batch.steps.isEmpty() && batch.evals.isEmpty()) return;
  // Append the new points to the merged data (O(new points)) and only those to the plots.
  const qsizetype trainBefore = data_.trainSteps.size(), valBefore = data_.valSteps.size();
  const std::size_t routingBefore = data_.routing.steps.size();
  const qsizetype evalsBefore = data_.evals.size();
  for (const StepSample& s : batch.steps) appendLiveStep(s);
  for (const EvalSample& e : batch.evals) appendLiveEval(e);
  rebuildFlopsAxis();  // new ratios only price steps at or after them: the points drawn so far keep their x
  for (qsizetype i = trainBefore; i < data_.trainSteps.size(); ++i) {
    tx.push_back(x(data_.trainSteps[i], data_.trainWall[i]));
    ty.push_back(data_.trainLoss[i]);
  }
  for (qsizetype i = valBefore; i < data_.valSteps.size(); ++i) {
    vx.push_back(x(data_.valSteps[i], data_.valWall[i]));
    vy.push_back(data_.valLoss[i]);
    health_.add_validation_loss(data_.valSteps[i], data_.valLoss[i]);
  }
  loss_->appendTrain(tx, ty);
  loss_->appendValidation(vx, vy);
  if (xAxis_ == XAxis::Step && data_.totalSteps == 0 && !batch.steps.isEmpty())
    loss_->setExpectedSteps(static_cast<double>(batch.steps.back().totalSteps));
  for (qsizetype i = evalsBefore; i < data_.evals.size(); ++i) addEvaluation(health_, data_.evals[i]);
  // Redrawn at once, then at most every kRoutingRedrawMs (a live run logs faster than a heat map needs); the
  // timer draws what arrived in between.
  if (data_.routing.steps.size() != routingBefore || data_.evals.size() != evalsBefore) {
    if (routingTimer_->isActive()) {
      routingPending_ = true;
    } else {
      renderRouting();
      routingTimer_->start();
    }
  }
  if (evaluated) reloadTimer_->start();  // the probe and the eval's per-layer routing come from the store
  updateAlerts();
}

void RunDashboard::onLiveFinished(const RunResult& result) {
  live_ = false;
  health_.set_live(false);
  alertTimer_->stop();
  metricsTimer_->stop();
  setTitle(tr("run %1 · %2 · %3").arg(runId_).arg(stored_.name, result.status));
  reloadTimer_->stop();
  reload();
}

}  // namespace routelab
