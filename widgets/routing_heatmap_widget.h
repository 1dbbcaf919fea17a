// RoutingHeatmapWidget: the history of a per-layer share (routed-token %) as a layer x step heat map on viridis,
// with a colour scale. Columns are the logged steps; long histories are drawn step-held onto at most
// kMaxColumns cells (no interpolation between steps). Layers without routing (NaN) stay transparent.
#pragma once
#include <QString>
#include <QVector>
#include <QWidget>

class QCustomPlot;
class QCPColorMap;
class QLabel;

namespace routelab {

class RoutingHeatmapWidget : public QWidget {
  Q_OBJECT

 public:
  static constexpr int kMaxColumns = 600;

  explicit RoutingHeatmapWidget(QWidget* parent = nullptr);
  ~RoutingHeatmapWidget() override;

  /// Replaces the history: `columns[i]` holds one value in [0, 1] (or NaN) per layer at `steps[i]`.
  void setHistory(const QVector<double>& steps, const QVector<QVector<double>>& columns);
  /// Appends one column; a step at or before the last one is ignored. Redraws once per event-loop pass.
  void appendColumn(double step, const QVector<double>& values);
  void clear();
  void setCaption(const QString& caption);

  int columnCount() const { return static_cast<int>(steps_.size()); }
  int layerCount() const { return layers_; }
  /// The value shown at (step, layer): the last column at or before `step` (NaN when there is none).
  double valueAt(double step, int layer) const;
  QCustomPlot* plot() const { return plot_; }

 private:
  void scheduleRebuild();
  void rebuild();

  QCustomPlot* plot_ = nullptr;
  QCPColorMap* map_ = nullptr;
  QLabel* caption_ = nullptr;
  QVector<double> steps_;
  QVector<QVector<double>> columns_;
  int layers_ = 0;
  bool rebuildPending_ = false;
};

}  // namespace routelab
