// RunMetricsView: the "metrics" figure split into one FigureView per panel in a scrolled grid, and the
// "expert-loads" figure above it.
#include "ui/run_metrics_view.h"

#include <QGridLayout>
#include <QLabel>
#include <QScrollArea>
#include <QVBoxLayout>

#include <utility>

#include "ui/dashboard_loader.h"
#include "ui/figure_render.h"

namespace routelab {
namespace {

constexpr int kColumns = 3;

/// Panel `i` of the "metrics" figure as a figure of its own: what the catalogue builds for that one quantity.
Figure panelFigure(const Figure& all, std::size_t i, const std::string& id) {
  Figure one;  // the other panels are not copied (a long run's panels hold 200,000 points a series)
  one.name = all.name;
  one.title = all.title;
  one.width_cm = all.width_cm;
  one.height_cm = all.height_cm;
  one.font_pt = all.font_pt;
  one.meta = all.meta;
  one.panels = {all.panels[i]};
  one.columns = 1;
  one.meta["panel_ids"] = nlohmann::json::array({id});
  if (one.meta.contains("panel_keys")) one.meta["panel_keys"] = nlohmann::json::array({all.meta["panel_keys"][i]});
  if (one.meta.contains("request")) one.meta["request"]["metric"] = id;
  return one;
}

QStringList panelIdsOf(const Figure& figure) {
  QStringList ids;
  if (figure.meta.contains("panel_ids"))
    for (const auto& id : figure.meta["panel_ids"]) ids << QString::fromStdString(id.get<std::string>());
  return ids;
}

}  // namespace

RunMetricsView::RunMetricsView(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("runMetricsView"));
  summary_ = new QLabel(tr("No metrics yet."), this);
  summary_->setWordWrap(true);
  loads_ = new FigureView(this);
  loads_->setObjectName(QStringLiteral("expertLoads"));
  loads_->setMinimumHeight(220);
  loads_->setVisible(false);
  auto* content = new QWidget(this);
  grid_ = new QGridLayout(content);
  grid_->setContentsMargins(2, 2, 2, 2);
  grid_->setSpacing(6);
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  scroll->setWidget(content);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(summary_);
  layout->addWidget(loads_);
  layout->addWidget(scroll, 1);
}

RunMetricsView::~RunMetricsView() = default;

QStringList RunMetricsView::panelIds() const { return ids_; }

FigureRequest RunMetricsView::panelRequest(const QString& id) const { return metricsRequest(runId_, id.toStdString()); }

FigureRequest RunMetricsView::expertLoadsRequest() const { return routelab::expertLoadsRequest(runId_); }

void RunMetricsView::setData(qint64 runId, const RunMetricsData& metrics) {
  runId_ = runId;
  const QStringList ids = panelIdsOf(metrics.panels);
  if (ids != ids_) {
    for (FigureView* view : std::as_const(views_)) {
      grid_->removeWidget(view);
      delete view;
    }
    views_.clear();
    ids_ = ids;
    for (int i = 0; i < ids_.size(); ++i) {
      auto* view = new FigureView(grid_->parentWidget());
      view->setObjectName(QStringLiteral("metric:%1").arg(ids_[i]));
      view->setMinimumHeight(200);
      views_.insert(ids_[i], view);
      grid_->addWidget(view, i / kColumns, i % kColumns);
    }
  }
  for (int i = 0; i < ids_.size(); ++i) {
    const auto index = static_cast<std::size_t>(i);
    if (index >= metrics.panels.panels.size()) break;
    FigureView* view = views_.value(ids_[i]);
    const FigurePanel& panel = metrics.panels.panels[index];
    view->setFigure(panelFigure(metrics.panels, index, ids_[i].toStdString()));
    // The plot's title names the quantity; the caption says which stored series it draws.
    QStringList keys;
    if (metrics.panels.meta.contains("panel_keys"))
      for (const auto& key : metrics.panels.meta["panel_keys"][index])
        keys << QString::fromStdString(key.get<std::string>());
    view->setCaption(keys.join(QStringLiteral(" · ")),
                     tr("%1 against the training step: `routelab-cli figure metrics --runs %2 --metric %3`")
                         .arg(QString::fromStdString(panel.title)).arg(runId_).arg(ids_[i]));
  }

  const bool haveLoads = !metrics.loads.panels.empty();
  loads_->setVisible(haveLoads);
  if (haveLoads) {
    loads_->setFigure(metrics.loads);
    loads_->setCaption(tr("Expert loads: each expert's share of a layer's token-expert assignments at the last "
                          "evaluation (val/load/L·/E·); dashed: the uniform share"),
                       tr("`routelab-cli figure expert-loads --runs %1`").arg(runId_));
  }
  summary_->setText(ids_.isEmpty() && !haveLoads
                        ? (metrics.panelsError.isEmpty() ? tr("This run has stored no metrics besides the loss yet.")
                                                         : metrics.panelsError)
                        : tr("%1 metric keys · %2 plots").arg(metrics.keys.size()).arg(ids_.size()));
}

}  // namespace routelab
