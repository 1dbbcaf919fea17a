// XyCurvesWidget: a few named curves y(x) on one QCustomPlot with optional log axes, dashed reference lines and
// marker-only series; hover shows the nearest point of each curve. Used for FLOPs and KV memory against sequence
// length (seed 000 Figures 4 and 6). Plain data in.
#pragma once
#include <QColor>
#include <QString>
#include <QVector>
#include <QWidget>

#include <functional>

class QCustomPlot;
class QLabel;

namespace routelab {

class XyCurvesWidget : public QWidget {
  Q_OBJECT

 public:
  struct Curve {
    QString name;
    QVector<double> x, y;
    QColor color;
    bool dashed = false;   ///< a reference (e.g. the dense model)
    bool markers = false;  ///< points only (e.g. a measured value)
  };

  explicit XyCurvesWidget(QWidget* parent = nullptr);
  ~XyCurvesWidget() override;

  void setAxes(const QString& xLabel, const QString& yLabel, bool logX, bool logY);
  void setCaption(const QString& caption, const QString& toolTip = QString());
  /// Replaces every curve; non-finite and (on a log axis) non-positive points are left out.
  void setCurves(const QVector<Curve>& curves);
  /// Formats hover values (default: 4 significant digits).
  void setValueFormatter(std::function<QString(double)> formatY);

  int curveCount() const { return static_cast<int>(curves_.size()); }
  const Curve& curve(int index) const { return curves_.at(index); }
  QString caption() const;
  QString toolTipAtX(double x) const;
  QCustomPlot* plot() const { return plot_; }

 private:
  QCustomPlot* plot_ = nullptr;
  QLabel* caption_ = nullptr;
  QVector<Curve> curves_;
  bool logX_ = false, logY_ = false;
  std::function<QString(double)> formatY_;
};

}  // namespace routelab
