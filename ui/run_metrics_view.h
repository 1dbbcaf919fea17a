// RunMetricsView: the dashboard's metrics tab: a run's metrics besides the loss (learning rate, gradient norm,
// tokens/s, auxiliary loss, router entropy, accuracy and macro-F1 for classifiers, ...) as small multiples, one
// figure per quantity with its train and val series, and the expert loads per layer at the last evaluation (TAGAT)
// against the uniform share. Each is a panel of the catalogue figures "metrics" and "expert-loads"
// (core/report/figure/metric_panels.h), drawn by the one renderer with its own "Export figure…".
#pragma once
#include <QMap>
#include <QStringList>
#include <QWidget>

#include "ui/dashboard_data.h"

class QGridLayout;
class QLabel;

namespace routelab {

class FigureView;

class RunMetricsView : public QWidget {
  Q_OBJECT

 public:
  explicit RunMetricsView(QWidget* parent = nullptr);
  ~RunMetricsView() override;

  /// Replaces what the tab shows; the views are rebuilt only when the set of panels changes.
  void setData(qint64 runId, const RunMetricsData& metrics);

  /// The quantities shown, in order (e.g. "lr", "grad_norm", "accuracy").
  QStringList panelIds() const;
  FigureView* panel(const QString& id) const { return views_.value(id, nullptr); }
  /// The expert-load bars (hidden when the run reports no per-expert loads).
  FigureView* expertLoads() const { return loads_; }
  /// What `routelab-cli figure` takes to draw the panel of `id` ("all": every panel) or the expert loads.
  FigureRequest panelRequest(const QString& id) const;
  FigureRequest expertLoadsRequest() const;

 private:
  QLabel* summary_ = nullptr;
  QGridLayout* grid_ = nullptr;
  FigureView* loads_ = nullptr;
  qint64 runId_ = 0;
  QStringList ids_;
  QMap<QString, FigureView*> views_;
};

}  // namespace routelab
