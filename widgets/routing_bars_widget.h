// RoutingBarsWidget: routed-token % per layer as bars (seed 000 Figure 5), inference-mode share of the last
// evaluation next to the training-mode share of the last logged step; layers without routing drawn as a grey
// "dense" stub. Hover shows the numbers. Plain data in.
#pragma once
#include <QString>
#include <QVector>
#include <QWidget>

class QCustomPlot;
class QCPBars;
class QLabel;

namespace routelab {

class RoutingBarsWidget : public QWidget {
  Q_OBJECT

 public:
  explicit RoutingBarsWidget(QWidget* parent = nullptr);
  ~RoutingBarsWidget() override;

  /// Shares in [0, 1] per layer; NaN = the layer does not route (dense). Either vector may be empty.
  /// `routed` (same length as the longer vector, or empty = all routed) marks the layers that make decisions.
  void setShares(const QVector<double>& evalShare, const QVector<double>& trainShare, const QVector<bool>& routed,
                 const QString& caption);
  void clear();

  int layerCount() const { return layers_; }
  QVector<double> evalShare() const { return eval_; }
  QVector<double> trainShare() const { return train_; }
  QString toolTipForLayer(int layer) const;
  QCustomPlot* plot() const { return plot_; }

 private:
  QCustomPlot* plot_ = nullptr;
  QCPBars* evalBars_ = nullptr;
  QCPBars* trainBars_ = nullptr;
  QCPBars* denseBars_ = nullptr;
  QLabel* caption_ = nullptr;
  QVector<double> eval_, train_;
  QVector<bool> routed_;
  int layers_ = 0;
};

}  // namespace routelab
