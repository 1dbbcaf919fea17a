// RunMetricsView: the dashboard's metrics tab: small-multiple plots of a run's metrics besides the loss (learning
// rate, gradient norm, tokens/s, auxiliary loss, router entropy, accuracy and macro-F1 for classifiers, model
// statistics), one plot per quantity with its train and val series, and the expert loads per layer at the last
// evaluation (TAGAT) as grouped bars against the uniform share. Built from the keys the run actually has.
#pragma once
#include <QMap>
#include <QStringList>
#include <QWidget>

#include "ui/dashboard_data.h"

class QGridLayout;
class QLabel;

namespace routelab {

class GroupedBarsWidget;
class XyCurvesWidget;

class RunMetricsView : public QWidget {
  Q_OBJECT

 public:
  /// One plot: a title and the metric keys it draws.
  struct Panel {
    QString id;     ///< the quantity, e.g. "lr", "accuracy"
    QString title;  ///< e.g. "learning rate"
    QStringList keys;
  };
  /// Groups the plotted keys into panels, in a fixed order of importance (accuracy and F1 first for
  /// classifiers, then lr, gradient norm, tokens/s, auxiliary loss, entropy, ...; the rest by name).
  static QVector<Panel> panelsFor(const QVector<MetricCurve>& curves, const QString& task);

  explicit RunMetricsView(QWidget* parent = nullptr);
  ~RunMetricsView() override;

  /// Replaces what the tab shows; plots are rebuilt only when the set of panels changes.
  void setData(const RunMetricsData& metrics, const QString& task);

  QStringList panelIds() const;
  XyCurvesWidget* panel(const QString& id) const { return plots_.value(id, nullptr); }
  /// The expert-load bars (hidden when the run reports no per-expert loads).
  GroupedBarsWidget* expertLoads() const { return loads_; }

 private:
  QLabel* summary_ = nullptr;
  QGridLayout* grid_ = nullptr;
  GroupedBarsWidget* loads_ = nullptr;
  QVector<Panel> panels_;
  QMap<QString, XyCurvesWidget*> plots_;
};

}  // namespace routelab
