// RunTokenRouting: the controls, the figure and its status line; the builds go to a FigureWorker.
#include "ui/run_token_routing.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

#include <algorithm>

#include "ui/figure_render.h"
#include "ui/figure_worker.h"

namespace routelab {
namespace {

constexpr const char* kByToken = "routing-by-token";
constexpr const char* kHistoryFigure = "routing-by-token-history";
constexpr const char* kHistoryLayersFigure = "routing-by-token-history-layers";

}  // namespace

RunTokenRouting::RunTokenRouting(qint64 runId, const QString& dbPath, QWidget* parent)
    : QWidget(parent), runId_(runId), dbPath_(dbPath) {
  setObjectName(QStringLiteral("runTokenRouting"));

  grouping_ = new QComboBox(this);
  grouping_->setObjectName(QStringLiteral("tokenGrouping"));
  for (const auto& name : figure_info(kByToken).metric_choices) grouping_->addItem(QString::fromStdString(name));
  grouping_->setToolTip(
      tr("class: space, newline, punctuation, digit, word start, mid-word; position in the window; "
         "frequency in the training split; predictability and difficulty: quartiles of the model's "
         "p(token | past) and of its next-token loss"));
  checkpoint_ = new QComboBox(this);
  checkpoint_->setObjectName(QStringLiteral("tokenCheckpoint"));
  checkpoint_->setToolTip(
      tr("A checkpoint's breakdown (token groups x routed layers), or the routed share of each "
         "group over the checkpoints (the mean over the routed layers)"));
  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("tokenRoutingStatus"));
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  view_ = new FigureView(this);
  view_->setObjectName(QStringLiteral("tokenRoutingView"));

  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("groups"), this));
  controls->addWidget(grouping_);
  controls->addWidget(new QLabel(tr("checkpoint"), this));
  controls->addWidget(checkpoint_);
  controls->addWidget(status_, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addLayout(controls);
  layout->addWidget(view_, 1);

  setCheckpoints({});
  connect(grouping_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int) {
    stale_ = true;
    refresh();
  });
  connect(checkpoint_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int) {
    stale_ = true;
    refresh();
  });
}

RunTokenRouting::~RunTokenRouting() = default;

void RunTokenRouting::setCheckpoints(const QVector<qint64>& steps) {
  if (steps == steps_ && checkpoint_->count() > 0) return;
  steps_ = steps;
  const qint64 chosen = checkpoint_->count() > 0 ? checkpoint_->currentData().toLongLong() : 0;
  {
    const QSignalBlocker block(checkpoint_);
    checkpoint_->clear();
    checkpoint_->addItem(tr("latest"), qint64{0});
    checkpoint_->addItem(tr("over training"), kHistory);
    checkpoint_->addItem(tr("over training, per layer"), kHistoryPerLayer);
    for (auto it = steps_.crbegin(); it != steps_.crend(); ++it) checkpoint_->addItem(tr("step %1").arg(*it), *it);
    const int at = checkpoint_->findData(chosen);
    checkpoint_->setCurrentIndex(std::max(at, 0));  // a step no longer kept (keep_checkpoints): the latest
  }
  // The latest and the history follow the new checkpoints; a chosen step's figure stays what it was.
  const qint64 now = checkpoint_->currentData().toLongLong();
  if (now <= 0 || now != chosen) {
    stale_ = true;
    refresh();
  }
}

FigureRequest RunTokenRouting::request() const {
  FigureRequest request;
  const qint64 checkpoint = checkpoint_->currentData().toLongLong();
  request.name = checkpoint == kHistory           ? kHistoryFigure
                 : checkpoint == kHistoryPerLayer ? kHistoryLayersFigure
                                                  : kByToken;
  request.run_ids = {runId_};
  request.metric = grouping_->currentText().toStdString();
  request.step = std::max<qint64>(checkpoint, 0);
  return request;
}

void RunTokenRouting::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  refresh();
}

void RunTokenRouting::refresh() {
  if (!stale_ || !isVisible()) return;  // built when next shown
  stale_ = false;
  const FigureRequest wanted = request();
  if (steps_.isEmpty()) {
    // Nothing to build: the breakdown reads the run's weights.
    awaited_ = 0;
    figure_ = Figure{};
    view_->setFigure(figure_);
    status_->setText(
        tr("No checkpoint yet: the breakdown runs the model's checkpoint over validation text "
           "(train.checkpoint_every)."));
    Q_EMIT figureShown();
    return;
  }
  if (!worker_) {  // its thread starts when the tab is first shown, not with every dashboard
    worker_ = new FigureWorker(dbPath_, this);
    connect(worker_, &FigureWorker::built, this, &RunTokenRouting::onBuilt);
  }
  awaited_ = worker_->request(wanted);
  const bool history = wanted.name != kByToken;
  status_->setText(history ? tr("Breaking down the checkpoints (a forward over the sample for each not kept yet)…")
                           : tr("Breaking down %1 (a forward over the sample unless kept)…")
                                 .arg(wanted.step ? tr("step %1").arg(wanted.step) : tr("the latest checkpoint")));
}

void RunTokenRouting::onBuilt(const BuiltFigure& result) {
  if (result.serial != awaited_) return;  // an answer to a request since replaced
  awaited_ = 0;
  figure_ = result.error.isEmpty() ? result.figure : Figure{};
  view_->setFigure(figure_);
  const QString took = tr("%1 s").arg(result.seconds, 0, 'f', 2);
  if (!result.error.isEmpty()) {
    status_->setText(result.error);
  } else if (figure_.panels.empty()) {
    status_->setText(tr("This run routes no token: there is nothing to break down."));
  } else {
    const auto& meta = figure_.meta;
    const std::string id = std::to_string(runId_);
    QString what;
    if (meta.contains("checkpoint_step") && meta["checkpoint_step"].contains(id))
      what =
          tr("step %1, %2 tokens").arg(meta["checkpoint_step"][id].get<qint64>()).arg(meta["tokens"][id].get<qint64>());
    else if (meta.contains("checkpoint_steps") && meta["checkpoint_steps"].contains(id))
      what = tr("%1 checkpoints").arg(meta["checkpoint_steps"][id].size());
    status_->setText(tr("%1 · %2 · routelab-cli routing-breakdown %3 prints every group's label and count")
                         .arg(what, took)
                         .arg(runId_));
  }
  Q_EMIT figureShown();
}

}  // namespace routelab
