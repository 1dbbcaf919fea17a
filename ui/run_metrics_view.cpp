// RunMetricsView: panels from the metric keys, one XyCurvesWidget each in a scrolled grid, and grouped bars of
// the last evaluation's expert loads.
#include "ui/run_metrics_view.h"

#include <QGridLayout>
#include <QHash>
#include <QLabel>
#include <QScrollArea>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "widgets/color_maps.h"
#include "widgets/grouped_bars_widget.h"
#include "widgets/xy_curves_widget.h"

namespace routelab {
namespace {

constexpr int kColumns = 3;

/// The quantity of a key ("train/epoch_accuracy" -> "accuracy") and the series' name in its panel.
std::pair<QString, QString> quantityOf(const QString& key) {
  const qsizetype slash = key.indexOf(QLatin1Char('/'));
  const QString split = key.left(slash), name = key.mid(slash + 1);
  if (name == QLatin1String("epoch_accuracy")) return {QStringLiteral("accuracy"), QStringLiteral("train (epoch)")};
  if (name == QLatin1String("epoch_loss")) return {QStringLiteral("epoch_loss"), QStringLiteral("train (epoch)")};
  return {name, split};
}

QString titleOf(const QString& id) {
  static const QMap<QString, QString> titles{
      {QStringLiteral("accuracy"), QStringLiteral("accuracy")},
      {QStringLiteral("macro_f1"), QStringLiteral("macro-F1")},
      {QStringLiteral("lr"), QStringLiteral("learning rate")},
      {QStringLiteral("grad_norm"), QStringLiteral("gradient norm (before clipping)")},
      {QStringLiteral("tokens_per_s"), QStringLiteral("tokens/s")},
      {QStringLiteral("aux_loss"), QStringLiteral("auxiliary loss")},
      {QStringLiteral("entropy"), QStringLiteral("router entropy")},
      {QStringLiteral("load_imbalance"), QStringLiteral("load imbalance")},
      {QStringLiteral("load_imbalance_per_layer"), QStringLiteral("load imbalance per layer (mean)")},
      {QStringLiteral("routing_change"), QStringLiteral("tokens whose top expert changed since the last evaluation")},
      {QStringLiteral("routing_change_set"), QStringLiteral("tokens whose expert set changed since the last evaluation")},
      {QStringLiteral("routed_fraction"), QStringLiteral("routed fraction")},
      {QStringLiteral("flops_ratio"), QStringLiteral("FLOPs ratio")},
      {QStringLiteral("ppl"), QStringLiteral("perplexity")},
      {QStringLiteral("bpc"), QStringLiteral("bits per character")},
      {QStringLiteral("epoch_loss"), QStringLiteral("epoch loss")},
  };
  return titles.value(id, id);
}

int rankOf(const QString& id, const QString& task) {
  static const QStringList lm{QStringLiteral("lr"),           QStringLiteral("grad_norm"),
                              QStringLiteral("tokens_per_s"), QStringLiteral("aux_loss"),
                              QStringLiteral("entropy"),      QStringLiteral("load_imbalance"),
                              QStringLiteral("load_imbalance_per_layer"),
                              QStringLiteral("routing_change"), QStringLiteral("routing_change_set"),
                              QStringLiteral("routed_fraction"), QStringLiteral("flops_ratio"),
                              QStringLiteral("ppl"),          QStringLiteral("bpc")};
  static const QStringList classification{QStringLiteral("accuracy"), QStringLiteral("macro_f1")};
  const bool classifier = task == QLatin1String("classification");
  if (const qsizetype i = classification.indexOf(id); i >= 0) return classifier ? static_cast<int>(i) : 50 + static_cast<int>(i);
  if (const qsizetype i = lm.indexOf(id); i >= 0) return 10 + static_cast<int>(i);
  return 100;
}

}  // namespace

QVector<RunMetricsView::Panel> RunMetricsView::panelsFor(const QVector<MetricCurve>& curves, const QString& task) {
  QVector<Panel> panels;
  for (const MetricCurve& c : curves) {
    if (c.steps.isEmpty()) continue;
    const QString id = quantityOf(c.key).first;
    auto it = std::find_if(panels.begin(), panels.end(), [&](const Panel& p) { return p.id == id; });
    if (it == panels.end()) {
      panels.push_back({id, titleOf(id), {}});
      it = panels.end() - 1;
    }
    it->keys.push_back(c.key);
  }
  std::stable_sort(panels.begin(), panels.end(), [&](const Panel& a, const Panel& b) {
    const int ra = rankOf(a.id, task), rb = rankOf(b.id, task);
    return ra != rb ? ra < rb : a.id < b.id;
  });
  for (Panel& p : panels) std::sort(p.keys.begin(), p.keys.end(), std::greater<>());  // train before val
  return panels;
}

RunMetricsView::RunMetricsView(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("runMetricsView"));
  summary_ = new QLabel(tr("No metrics yet."), this);
  summary_->setWordWrap(true);
  loads_ = new GroupedBarsWidget(this);
  loads_->setObjectName(QStringLiteral("expertLoads"));
  loads_->setMinimumHeight(200);
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

QStringList RunMetricsView::panelIds() const {
  QStringList ids;
  for (const Panel& p : panels_) ids << p.id;
  return ids;
}

void RunMetricsView::setData(const RunMetricsData& metrics, const QString& task) {
  const QVector<Panel> panels = panelsFor(metrics.curves, task);
  const bool same = panels.size() == panels_.size() &&
                    std::equal(panels.begin(), panels.end(), panels_.begin(), [](const Panel& a, const Panel& b) {
                      return a.id == b.id && a.keys == b.keys;
                    });
  if (!same) {
    for (XyCurvesWidget* plot : std::as_const(plots_)) {
      grid_->removeWidget(plot);
      delete plot;
    }
    plots_.clear();
    panels_ = panels;
    for (int i = 0; i < panels_.size(); ++i) {
      auto* plot = new XyCurvesWidget(grid_->parentWidget());
      plot->setObjectName(QStringLiteral("metric:%1").arg(panels_[i].id));
      plot->setMinimumHeight(190);
      plot->setAxes(tr("step"), panels_[i].title, false, false);
      plot->setCaption(panels_[i].title);
      plots_.insert(panels_[i].id, plot);
      grid_->addWidget(plot, i / kColumns, i % kColumns);
    }
  }
  QHash<QString, const MetricCurve*> byKey;
  for (const MetricCurve& c : metrics.curves) byKey.insert(c.key, &c);
  for (const Panel& p : panels_) {
    QVector<XyCurvesWidget::Curve> curves;
    for (int i = 0; i < p.keys.size(); ++i) {
      const MetricCurve* c = byKey.value(p.keys[i]);
      if (!c) continue;
      const QString name = quantityOf(c->key).second;
      const bool val = name == QLatin1String("val");
      // Validation points are few (one per evaluation): markers with a line; training series as lines.
      XyCurvesWidget::Curve curve{name, c->steps, c->values, viridis(val ? 0.72 : 0.25 + 0.2 * i), false, false};
      curves.push_back(curve);
    }
    plots_.value(p.id)->setCurves(curves);
  }

  // Expert loads of the last evaluation: one group per layer, one bar per expert, against 1/N.
  const bool haveLoads = !metrics.expertLoad.isEmpty();
  loads_->setVisible(haveLoads);
  if (haveLoads) {
    int experts = 0;
    for (const auto& row : metrics.expertLoad) experts = std::max(experts, static_cast<int>(row.size()));
    QStringList groups;
    for (int l = 0; l < metrics.expertLoad.size(); ++l) groups << tr("layer %1").arg(l);
    QVector<GroupedBarsWidget::Series> series;
    for (int e = 0; e < experts; ++e) {
      GroupedBarsWidget::Series s{tr("E%1").arg(e), {}, viridis(experts > 1 ? 0.1 + 0.8 * e / (experts - 1) : 0.5)};
      for (const auto& row : metrics.expertLoad) s.values.push_back(row.value(e, std::nan("")));
      series.push_back(s);
    }
    loads_->setBars(groups, series, tr("share of routed tokens"));
    loads_->setReference(experts > 0 ? 1.0 / experts : std::nan(""), tr("uniform 1/%1").arg(experts));
    loads_->setCaption(tr("Expert loads per layer at evaluation step %1 (val/load/L·/E·): the share of each "
                          "layer's token-expert assignments per expert; dashed: uniform")
                           .arg(metrics.loadStep));
  }
  const QStringList ids = panelIds();
  summary_->setText(panels_.isEmpty() && !haveLoads
                        ? tr("This run has stored no metrics besides the loss yet.")
                        : tr("%1 metric keys · %2 plots%3").arg(metrics.keys.size()).arg(panels_.size())
                              .arg(task == QLatin1String("classification") ? tr(" · classification: accuracy and F1 "
                                                                                "replace perplexity")
                                                                           : QString()));
}

}  // namespace routelab
