// RunDashboard: merges the last store read with the live points newer than it, renders each part from the
// merged data, and appends live points between reads (each widget coalesces its replots).
#include "ui/run_dashboard.h"

#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSlider>
#include <QSplitter>
#include <QTabWidget>
#include <QTimer>
#include <QVBoxLayout>

#include <cmath>
#include <limits>

#include "core/util/logging.h"
#include "ui/dashboard_loader.h"
#include "ui/routing_cost.h"
#include "ui/run_controller.h"
#include "ui/run_metrics_view.h"
#include "ui/store_service.h"
#include "widgets/alert_bar_widget.h"
#include "widgets/color_maps.h"
#include "widgets/loss_plot_widget.h"
#include "widgets/routing_bars_widget.h"
#include "widgets/routing_heatmap_widget.h"
#include "widgets/xy_curves_widget.h"

namespace routelab {
namespace {

constexpr int kAlertCheckMs = 1000;

QString siFlops(double v) {
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (std::abs(v) >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  return QStringLiteral("%1 %2FLOPs").arg(v, 0, 'g', 4).arg(QLatin1String(units[i]));
}

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
  loss_->setTitle(tr("loss"));
  bars_ = new RoutingBarsWidget(this);
  heatmap_ = new RoutingHeatmapWidget(this);

  tokens_ = new TokenRoutingWidget(this);
  probeSlider_ = new QSlider(Qt::Horizontal, this);
  probeSlider_->setObjectName(QStringLiteral("probeSlider"));
  probeSlider_->setRange(0, 0);
  probeSlider_->setToolTip(tr("Scrub the stored evaluations: the probe text's routing at each"));
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

  flops_ = new XyCurvesWidget(this);
  flops_->setObjectName(QStringLiteral("flopsCurves"));
  flops_->setAxes(tr("sequence length (tokens)"), tr("forward FLOPs / sequence"), true, true);
  flops_->setValueFormatter(siFlops);
  kv_ = new XyCurvesWidget(this);
  kv_->setObjectName(QStringLiteral("kvCurves"));
  kv_->setAxes(tr("sequence length (tokens)"), tr("KV cache (MiB) / sequence"), true, true);
  kv_->setValueFormatter([](double v) { return QStringLiteral("%1 MiB").arg(v, 0, 'g', 4); });

  auto* routing = new QSplitter(Qt::Vertical, this);
  routing->addWidget(titled(bars_, this));
  routing->addWidget(titled(heatmap_, this));
  auto* cost = new QSplitter(Qt::Horizontal, this);
  cost->addWidget(titled(flops_, this));
  kvPanel_ = titled(kv_, this);
  cost->addWidget(kvPanel_);
  auto* top = new QSplitter(Qt::Horizontal, this);
  top->addWidget(titled(loss_, this));
  top->addWidget(routing);
  auto* bottom = new QSplitter(Qt::Horizontal, this);
  bottom->addWidget(tokenPanel);
  bottom->addWidget(cost);
  bottom->setStretchFactor(0, 3);
  bottom->setStretchFactor(1, 2);
  auto* rows = new QSplitter(Qt::Vertical, this);
  rows->addWidget(top);
  rows->addWidget(bottom);
  rows->setStretchFactor(0, 1);
  rows->setStretchFactor(1, 1);
  top->setStretchFactor(0, 1);
  top->setStretchFactor(1, 1);

  metrics_ = new RunMetricsView(this);
  tabs_ = new QTabWidget(this);
  tabs_->setObjectName(QStringLiteral("dashboardTabs"));
  tabs_->setDocumentMode(true);
  tabs_->addTab(rows, tr("Routing"));
  tabs_->addTab(metrics_, tr("Metrics"));

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
  alertTimer_ = new QTimer(this);
  alertTimer_->setInterval(kAlertCheckMs);
  connect(alertTimer_, &QTimer::timeout, this, &RunDashboard::updateAlerts);
  metricsTimer_ = new QTimer(this);
  metricsTimer_->setInterval(kLiveMetricsReloadMs);
  connect(metricsTimer_, &QTimer::timeout, this, [this] {
    if (live_ && tabs_->currentWidget() == metrics_) reload();
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

void RunDashboard::reload() { store_->requestDashboard(runId_); }

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
    Q_EMIT dataLoaded();
    return;
  }
  stored_ = data;
  loadedOnce_ = true;
  // Live samples the store now holds are not needed for later merges: keep only the newer ones.
  const double lastTrain = lastOr(stored_.trainSteps, -1), lastRouting = lastOr(stored_.routing.steps, -1);
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
  if (!colourChosen_ && !data_.probes.isEmpty() && data_.probes.back().experts()) {
    const QSignalBlocker blocker(colourBy_);  // TAGAT: which experts each token went to, by default
    colourBy_->setCurrentIndex(colourBy_->findData(QStringLiteral("expert")));
  }
  renderLoss();
  renderRouting();
  renderProbe();
  renderCost();
  metrics_->setData(data_.metrics, data_.task);
  rebuildHealth();
  updateAlerts();
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
  if (!s.routedFraction.isEmpty() && (data_.routing.steps.isEmpty() || step > data_.routing.steps.back())) {
    data_.routing.steps.push_back(step);
    data_.routing.fraction.push_back(s.routedFraction);
  }
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

QVector<double> RunDashboard::maskDense(const QVector<double>& column) const {
  const EvalSnapshot* eval = latestEval();
  if (!eval || eval->routed.isEmpty()) return column;
  QVector<double> out = column;
  for (qsizetype l = 0; l < out.size(); ++l)
    if (!eval->routed.value(l, false)) out[l] = std::nan("");
  return out;
}

const EvalSnapshot* RunDashboard::latestEval() const {
  return data_.evals.isEmpty() ? nullptr : &data_.evals.back();
}

int RunDashboard::evalCount() const { return static_cast<int>(data_.evals.size()); }

void RunDashboard::renderRouting() {
  QVector<QVector<double>> columns;
  for (const auto& column : data_.routing.fraction) columns.push_back(maskDense(column));
  heatmap_->setHistory(data_.routing.steps, columns);
  const EvalSnapshot* eval = latestEval();
  const QVector<double> train = data_.routing.fraction.isEmpty() ? QVector<double>() : data_.routing.fraction.back();
  const bool anyRouted = eval && std::any_of(eval->routed.begin(), eval->routed.end(), [](bool r) { return r; });
  if (eval && !eval->routed.isEmpty() && !anyRouted) {
    bars_->setShares(eval->routedFraction, train, eval->routed, tr("every layer is dense: nothing is routed"));
    heatmap_->setCaption(tr("routed-token % per layer over training: no routed layer"));
    return;
  }
  QString caption = tr("routed-token % per layer");
  if (eval) caption += tr(" · inference at eval step %1").arg(eval->step);
  if (!data_.routing.steps.isEmpty()) caption += tr(" · training at step %1").arg(data_.routing.steps.back());
  bars_->setShares(eval ? eval->routedFraction : QVector<double>(), train, eval ? eval->routed : QVector<bool>(), caption);
  heatmap_->setCaption(tr("routed-token % per layer over training (training mode, logged steps)"));
}

qint64 RunDashboard::shownProbeStep() const {
  const int index = probeSlider_->value();
  return index >= 0 && index < probeCount() ? data_.probes[index].step : -1;
}

void RunDashboard::showProbe(int index) { probeSlider_->setValue(index); }

QVector<TokenRoutingWidget::Row> probeRows(const ProbeSnapshot& probe, const QString& colourBy) {
  const ProbeSnapshot::Series* experts = probe.experts();
  const QString mode = colourBy == QLatin1String("expert") && !experts ? QStringLiteral("gate") : colourBy;
  const bool byGate = mode == QLatin1String("gate");
  QVector<TokenRoutingWidget::Row> rows;
  for (const ProbeSnapshot::Layer& layer : probe.layers) {
    const bool haveGate = !layer.gate.isEmpty(), haveDecision = !layer.decision.isEmpty();
    if (!haveGate && !haveDecision) continue;  // a dense layer: nothing to colour
    TokenRoutingWidget::Row row;
    if ((byGate && haveGate) || !haveDecision) {
      row.label = QObject::tr("L%1 %2 gate").arg(layer.layer).arg(layer.kind);
      row.valueName = QObject::tr("gate (routed-path probability)");
      row.values = layer.gate;
      row.scale = TokenRoutingWidget::Scale::Unit;
    } else {
      row.label = QObject::tr("L%1 %2 decision").arg(layer.layer).arg(layer.kind);
      row.valueName = QObject::tr("decision");
      row.values = layer.decision;
      row.scale = TokenRoutingWidget::Scale::Binary;
    }
    rows.push_back(row);
  }
  // TAGAT: the gate (T, L, N) and the chosen experts (T, L, k) as one row per layer and expert (gate mode) or
  // per layer and rank (expert mode), coloured over the expert ids 0..N-1.
  int numExperts = 0;
  for (const ProbeSnapshot::Series& s : probe.tokenData)
    if (s.name == QLatin1String("gate") && s.shape.size() == 2) numExperts = s.shape[1];
  // Per-token data of any shape the model reports (exit layer, depth, path per step, gate mixtures, ...).
  for (const ProbeSnapshot::Series& series : probe.tokenData) {
    const bool perLayer = experts && series.shape.size() == 2;
    if (perLayer && &series == experts && mode != QLatin1String("expert")) continue;
    if (perLayer && series.name == QLatin1String("gate") && mode == QLatin1String("expert")) continue;
    const int components = static_cast<int>(series.components.size());
    for (int c = 0; c < components; ++c) {
      TokenRoutingWidget::Row row;
      if (perLayer && &series == experts) {
        const int layer = c / series.shape[1], rank = c % series.shape[1];
        row.label = QObject::tr("L%1 expert #%2").arg(layer).arg(rank + 1);
        row.valueName = QObject::tr("expert id (rank %1 of the top-%2)").arg(rank + 1).arg(series.shape[1]);
      } else if (perLayer) {
        row.label = QObject::tr("L%1 E%2 %3").arg(c / series.shape[1]).arg(c % series.shape[1]).arg(series.name);
        row.valueName = row.label;
      } else {
        row.label = components == 1 ? series.name : QStringLiteral("%1[%2]").arg(series.name).arg(c);
        row.valueName = row.label;
      }
      row.values = series.components[c];
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (double v : row.values)
        if (std::isfinite(v)) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
      if (!series.integral && lo >= 0 && hi <= 1) {
        row.scale = TokenRoutingWidget::Scale::Unit;
      } else {
        row.scale = TokenRoutingWidget::Scale::Integer;
        // Integral data: negative values mean "none" (e.g. -1 after an exit); the scale spans 0 .. max.
        row.lo = series.integral ? 0 : (std::isfinite(lo) ? lo : 0);
        row.hi = std::isfinite(hi) ? hi : 1;
        if (perLayer && &series == experts && numExperts > 1) row.hi = numExperts - 1;  // stable colour per id
      }
      rows.push_back(row);
    }
  }
  if (!probe.nextLogprob.isEmpty()) {
    TokenRoutingWidget::Row row;
    row.label = QObject::tr("p(next token)");
    row.valueName = QObject::tr("model probability of the next token");
    for (double lp : probe.nextLogprob) row.values.push_back(std::exp(lp));
    row.scale = TokenRoutingWidget::Scale::Unit;
    rows.push_back(row);
  }
  return rows;
}

void RunDashboard::renderProbe() {
  const int index = probeSlider_->value();
  if (index < 0 || index >= probeCount()) {
    tokens_->clear();
    probeLabel_->setText(tr("no probe yet"));
    tokens_->setCaption(tr("The probe text's routing appears at the first evaluation."));
    return;
  }
  const ProbeSnapshot& probe = data_.probes[index];
  const int n = static_cast<int>(probe.tokens.size());
  tokens_->setData(probe.tokens, probeRows(probe, colourBy_->currentData().toString()));
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

void RunDashboard::renderClassifierCost() {
  // A classifier encodes each pair once: no KV cache to hold, no sequence-length axis to price. What its routing
  // saves is the FLOPs ratio each evaluation measured from the real decisions.
  kvPanel_->setVisible(false);
  flops_->setAxes(tr("step"), tr("forward FLOPs ratio"), false, false);
  flops_->setValueFormatter([](double v) { return QString::number(v, 'f', 3); });
  QVector<double> steps, ratios;
  for (const EvalSnapshot& e : data_.evals)
    if (std::isfinite(e.flopsRatio)) steps.push_back(static_cast<double>(e.step)), ratios.push_back(e.flopsRatio);
  flops_->setCurves({{tr("measured"), steps, ratios, viridis(0.70), false, true}});
  const QString last = ratios.isEmpty() ? tr("no evaluation yet") : QString::number(ratios.back(), 'f', 3);
  flops_->setCaption(tr("forward FLOPs ratio per evaluation · last %1").arg(last),
                     tr("Forward FLOPs of the routed layers on the validation split, priced from the real routing "
                        "decisions, over their dense reference: for TAGAT every expert on every real token (the "
                        "dense oracle); 1 for unrouted models."));
}

void RunDashboard::renderCost() {
  if (data_.task == QLatin1String("classification")) {
    renderClassifierCost();
    return;
  }
  const EvalSnapshot* eval = latestEval();
  if (!data_.cost.valid) {
    flops_->setCurves({});
    kv_->setCurves({});
    flops_->setCaption(tr("FLOPs and KV curves unavailable: %1").arg(data_.cost.error));
    kv_->setCaption(QString());
    return;
  }
  const CostCurves c = costCurves(data_.cost, eval);
  const bool routed = !c.routedFlops.isEmpty();
  const QColor denseColor(120, 120, 120), routedColor = viridis(0.30), measuredColor = viridis(0.70);
  QVector<XyCurvesWidget::Curve> flopCurves{{tr("dense"), c.seqLen, c.denseFlops, denseColor, true, false}};
  QVector<XyCurvesWidget::Curve> kvCurves{{tr("dense"), c.seqLen, c.denseKvMiB, denseColor, true, false}};
  if (routed) {
    flopCurves.push_back({tr("routed"), c.seqLen, c.routedFlops, routedColor, false, false});
    kvCurves.push_back({tr("routed"), c.seqLen, c.routedKvMiB, routedColor, false, false});
    // The ratio the evaluation measured from the real decisions, on the dense curve's scale at the run's context.
    if (c.contextDenseFlops > 0)
      flopCurves.push_back({tr("measured"), {static_cast<double>(data_.cost.context)},
                            {eval->flopsRatio * c.contextDenseFlops}, measuredColor, false, true});
  }
  flops_->setCurves(flopCurves);
  kv_->setCurves(kvCurves);
  const QString when = !eval ? tr("no evaluation yet: dense")
                       : routed ? tr("routing of eval step %1").arg(eval->step)
                                : tr("eval step %1 not priced (%2): dense").arg(eval->step).arg(c.error);
  const QString how = tr("Forward FLOPs of all layers for one sequence (2 FLOPs per multiply-add of every matrix "
                        "product executed, work computed and then masked included), priced by the architecture's "
                        "FLOPs model at the per-layer shares the %1 measured: the same numbers as the cost-length "
                        "figure. The diamond is the ratio the evaluation measured from the real decisions, at the "
                        "run's context.")
                         .arg(when);
  flops_->setCaption(tr("FLOPs / sequence · %1 · measured %2 vs priced %3 at T=%4")
                         .arg(when)
                         .arg(eval ? eval->flopsRatio : 1.0, 0, 'f', 3)
                         .arg(c.contextRatio, 0, 'f', 3)
                         .arg(data_.cost.context),
                     how);
  kv_->setCaption(tr("KV cache / sequence · %1").arg(when),
                  tr("Keys and values each layer caches after a prompt of that length, by the architecture's KV "
                     "rule, %1 bytes per value, all layers.")
                      .arg(data_.cost.bytesPerValue));
}

void RunDashboard::rebuildHealth() {
  health_.reset();
  for (qsizetype i = 0; i < data_.trainSteps.size(); ++i)
    health_.add_train_loss(data_.trainSteps[i], data_.trainLoss[i]);
  for (qsizetype i = 0; i < data_.valSteps.size(); ++i)
    health_.add_validation_loss(data_.valSteps[i], data_.valLoss[i]);
  for (const EvalSnapshot& e : data_.evals) addEvaluation(health_, e);
  if (live_ && !liveSteps_.isEmpty()) health_.note_progress(clock_.elapsed() / 1000.0);
}

void RunDashboard::updateAlerts() {
  QStringList errors, warnings;
  for (const HealthAlert& a : health_.alerts(clock_.elapsed() / 1000.0))
    (a.severity == HealthAlert::Severity::Error ? errors : warnings) << QString::fromStdString(a.message);
  if (!live_ && stored_.status == QLatin1String("failed") && !stored_.message.isEmpty())
    warnings.prepend(tr("run failed: %1").arg(stored_.message));
  const bool changed = errors != alerts_->errors() || warnings != alerts_->warnings();
  alerts_->setAlerts(errors, warnings);
  if (changed)
    for (const QString& a : errors + warnings) logger("ui")->warn("run {}: {}", runId_, a.toStdString());
}

void RunDashboard::onProgress(const ProgressBatch& batch) {
  bool evaluated = false;
  QVector<double> tx, ty, vx, vy;
  for (const StepSample& s : batch.steps) {
    liveSteps_.push_back(s);
    health_.add_train_loss(static_cast<double>(s.step), s.loss);
    health_.note_progress(clock_.elapsed() / 1000.0);
  }
  for (const EvalSample& e : batch.evals) {
    liveEvals_.push_back(e);
    evaluated = true;
  }
  if (batch.steps.isEmpty() && batch.evals.isEmpty()) return;
  // Append the new points to the merged data (O(new points)) and only those to the plots.
  const qsizetype trainBefore = data_.trainSteps.size(), valBefore = data_.valSteps.size();
  const qsizetype routingBefore = data_.routing.steps.size(), evalsBefore = data_.evals.size();
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
  for (qsizetype i = routingBefore; i < data_.routing.steps.size(); ++i)
    heatmap_->appendColumn(data_.routing.steps[i], maskDense(data_.routing.fraction[i]));
  for (qsizetype i = evalsBefore; i < data_.evals.size(); ++i) addEvaluation(health_, data_.evals[i]);
  if (data_.routing.steps.size() != routingBefore || data_.evals.size() != evalsBefore) renderRouting();
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
