// TokenRoutingWidget: a text's tokens in a row per layer (or per per-token quantity), each token coloured by a
// value: a gate probability, a hard decision, or an integer such as an exit layer, a depth or a layer on a path
// (the view of TSA Figure 4 and TAGAT Figure 4). Hovering a token shows its numbers. Plain data in.
#pragma once
#include <QStringList>
#include <QVector>
#include <QWidget>

class QLabel;
class QScrollArea;

namespace routelab {

class TokenRoutingWidget : public QWidget {
  Q_OBJECT

 public:
  /// How a row's values map to colours.
  enum class Scale {
    Unit,     ///< a probability in [0, 1] on viridis
    Binary,   ///< 0/1: skipped / routed
    Integer,  ///< categories lo..hi on viridis; values below lo (e.g. -1 "exited") drawn grey
  };

  struct Row {
    QString label;            ///< left of the row, e.g. "L3 gate"
    QString valueName;        ///< in the tooltip, e.g. "gate", "exit layer"
    QVector<double> values;   ///< one per token; NaN = no value (drawn blank)
    Scale scale = Scale::Unit;
    double lo = 0, hi = 1;    ///< Integer range
  };

  explicit TokenRoutingWidget(QWidget* parent = nullptr);
  ~TokenRoutingWidget() override;

  /// Replaces the view: tokens as text (control characters are shown as symbols) and the rows to colour them by.
  void setData(const QStringList& tokens, const QVector<Row>& rows);
  void clear();
  /// One line above the grid (e.g. "step 200 · colour: gate"); empty hides it.
  void setCaption(const QString& caption);

  int tokenCount() const;
  int rowCount() const;
  const Row& row(int index) const;
  /// The tooltip text of the cell under `pos` in the grid's own coordinates (empty outside a cell).
  QString toolTipAt(const QPoint& pos) const;
  /// The grid widget (inside a scroll area), for tests and export.
  QWidget* grid() const;
  /// The cell rectangle of (row, token) in grid coordinates.
  QRect cellRect(int row, int token) const;

 private:
  class Grid;
  Grid* grid_ = nullptr;
  QScrollArea* scroll_ = nullptr;
  QLabel* caption_ = nullptr;
};

}  // namespace routelab
