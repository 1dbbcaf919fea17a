// GroupedBarsWidget: bars in groups (e.g. one group per layer, one bar per expert) with an optional dashed
// reference level (e.g. the uniform load 1/N); hover shows the group's values. Plain data in.
#pragma once
#include <QColor>
#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>

class QCPBarsGroup;
class QCustomPlot;
class QLabel;

namespace routelab {

class GroupedBarsWidget : public QWidget {
  Q_OBJECT

 public:
  struct Series {
    QString name;            ///< legend entry, e.g. "E2"
    QVector<double> values;  ///< one per group; NaN = no bar
    QColor color;
  };

  explicit GroupedBarsWidget(QWidget* parent = nullptr);
  ~GroupedBarsWidget() override;

  /// Replaces the bars: `groups` label the x axis, each series adds one bar per group.
  void setBars(const QStringList& groups, const QVector<Series>& series, const QString& yLabel);
  /// A dashed horizontal line at `level` (NaN hides it), named in the legend.
  void setReference(double level, const QString& name);
  void setCaption(const QString& caption);

  int groupCount() const { return static_cast<int>(groups_.size()); }
  int seriesCount() const { return static_cast<int>(series_.size()); }
  const Series& series(int index) const { return series_.at(index); }
  QString caption() const;
  /// The hover text of group `index` (its values per series).
  QString toolTipForGroup(int index) const;
  QCustomPlot* plot() const { return plot_; }

 private:
  void rebuild();

  QCustomPlot* plot_ = nullptr;
  QCPBarsGroup* group_ = nullptr;
  QLabel* caption_ = nullptr;
  QStringList groups_;
  QVector<Series> series_;
  QString yLabel_;
  double reference_ = 0;
  QString referenceName_;
  bool hasReference_ = false;
};

}  // namespace routelab
