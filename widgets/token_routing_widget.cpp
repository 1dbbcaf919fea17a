// TokenRoutingWidget: a custom-painted grid (label column, one cell per token and row) in a scroll area.
#include "widgets/captioned_layout.h"
#include "widgets/token_routing_widget.h"

#include <QEvent>
#include <QHelpEvent>
#include <QLabel>
#include <QPainter>
#include <QScrollArea>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "widgets/color_maps.h"

namespace routelab {
namespace {

constexpr int kRowHeight = 20;
constexpr int kRowGap = 2;
constexpr int kLabelWidth = 96;
constexpr int kMinCell = 12;
constexpr int kPad = 4;

/// Control characters and spaces made visible (a char-level probe is mostly spaces and letters).
QString visibleToken(const QString& token) {
  QString out;
  for (const QChar c : token) {
    if (c == QLatin1Char(' ')) out += QChar(0x2423);        // ␣
    else if (c == QLatin1Char('\n')) out += QChar(0x23CE);  // ⏎
    else if (c == QLatin1Char('\t')) out += QChar(0x21E5);  // ⇥
    else if (c.unicode() < 0x20) out += QChar(0xFFFD);
    else out += c;
  }
  return out.isEmpty() ? QStringLiteral("∅") : out;
}

QColor cellColor(const TokenRoutingWidget::Row& row, double value) {
  if (!std::isfinite(value)) return QColor();
  switch (row.scale) {
    case TokenRoutingWidget::Scale::Unit: return viridis(value);
    case TokenRoutingWidget::Scale::Binary: return viridis(value > 0.5 ? 0.85 : 0.12);
    case TokenRoutingWidget::Scale::Integer:
      if (value < row.lo) return QColor(215, 215, 215);
      return viridis(row.hi > row.lo ? (value - row.lo) / (row.hi - row.lo) : 0.5);
  }
  return QColor();
}

QString valueText(const TokenRoutingWidget::Row& row, double value) {
  if (!std::isfinite(value)) return QObject::tr("none");
  switch (row.scale) {
    case TokenRoutingWidget::Scale::Unit: return QString::number(value, 'f', 3);
    case TokenRoutingWidget::Scale::Binary: return value > 0.5 ? QObject::tr("1 (routed)") : QObject::tr("0 (skipped)");
    case TokenRoutingWidget::Scale::Integer:
      return value < row.lo ? QObject::tr("%1 (none)").arg(value) : QString::number(value);
  }
  return QString::number(value);
}

}  // namespace

class TokenRoutingWidget::Grid : public QWidget {
 public:
  explicit Grid(QWidget* parent) : QWidget(parent) {
    setMouseTracking(true);
    setObjectName(QStringLiteral("tokenGrid"));
  }

  void setData(const QStringList& tokens, const QVector<Row>& rows) {
    tokens_ = tokens;
    shown_.clear();
    for (const QString& t : tokens) shown_.push_back(visibleToken(t));
    rows_ = rows;
    layoutCells();
    update();
  }

  QRect cellRect(int row, int token) const {
    if (row < 0 || row >= rows_.size() || token < 0 || token >= x_.size()) return {};
    return QRect(x_[token], top(row), widths_[token], kRowHeight);
  }

  QString toolTipAt(const QPoint& pos) const {
    if (pos.y() < kRowHeight + kRowGap || pos.x() < kLabelWidth) return {};
    const int row = (pos.y() - (kRowHeight + kRowGap)) / (kRowHeight + kRowGap);
    if (row < 0 || row >= rows_.size()) return {};
    const auto it = std::upper_bound(x_.begin(), x_.end(), pos.x());
    const int token = static_cast<int>(it - x_.begin()) - 1;
    if (token < 0 || token >= tokens_.size() || pos.x() >= x_[token] + widths_[token]) return {};
    const Row& r = rows_[row];
    const double value = token < r.values.size() ? r.values[token] : std::nan("");
    return QObject::tr("token %1 '%2'\n%3: %4 = %5")
        .arg(token)
        .arg(shown_[token], r.label, r.valueName.isEmpty() ? QObject::tr("value") : r.valueName, valueText(r, value));
  }

  const QStringList& tokens() const { return tokens_; }
  const QVector<Row>& rows() const { return rows_; }

 protected:
  bool event(QEvent* e) override {
    if (e->type() == QEvent::ToolTip) {
      auto* help = static_cast<QHelpEvent*>(e);
      const QString text = toolTipAt(help->pos());
      if (text.isEmpty()) QToolTip::hideText();
      else QToolTip::showText(help->globalPos(), text, this);
      return true;
    }
    return QWidget::event(e);
  }

  void paintEvent(QPaintEvent*) override {
    QPainter p(this);
    p.fillRect(rect(), palette().base());
    const QFontMetrics fm = fontMetrics();
    // Header: the tokens themselves.
    p.setPen(palette().color(QPalette::Text));
    for (int t = 0; t < shown_.size(); ++t)
      p.drawText(QRect(x_[t], 0, widths_[t], kRowHeight), Qt::AlignCenter, shown_[t]);
    for (int r = 0; r < rows_.size(); ++r) {
      const Row& row = rows_[r];
      const int y = top(r);
      p.setPen(palette().color(QPalette::Text));
      p.drawText(QRect(2, y, kLabelWidth - 6, kRowHeight), Qt::AlignVCenter | Qt::AlignLeft,
                 fm.elidedText(row.label, Qt::ElideRight, kLabelWidth - 6));
      for (int t = 0; t < shown_.size(); ++t) {
        const QRect cell(x_[t], y, widths_[t] - 1, kRowHeight);
        const double value = t < row.values.size() ? row.values[t] : std::nan("");
        const QColor color = cellColor(row, value);
        if (!color.isValid()) {
          p.fillRect(cell, palette().color(QPalette::AlternateBase));
          continue;
        }
        p.fillRect(cell, color);
        p.setPen(textColorOn(color));
        p.drawText(cell, Qt::AlignCenter, shown_[t]);
      }
    }
  }

 private:
  int top(int row) const { return (row + 1) * (kRowHeight + kRowGap); }

  void layoutCells() {
    const QFontMetrics fm = fontMetrics();
    x_.clear();
    widths_.clear();
    int x = kLabelWidth;
    for (const QString& s : shown_) {
      const int w = std::max(kMinCell, fm.horizontalAdvance(s) + 2 * kPad);
      x_.push_back(x);
      widths_.push_back(w);
      x += w;
    }
    setFixedSize(std::max(x + kPad, kLabelWidth + 40),
                 (static_cast<int>(rows_.size()) + 1) * (kRowHeight + kRowGap) + kPad);
  }

  QStringList tokens_, shown_;
  QVector<Row> rows_;
  QVector<int> x_, widths_;
};

TokenRoutingWidget::TokenRoutingWidget(QWidget* parent) : QWidget(parent) {
  grid_ = new Grid(this);
  scroll_ = new QScrollArea(this);
  scroll_->setWidget(grid_);
  scroll_->setWidgetResizable(false);
  scroll_->setBackgroundRole(QPalette::Base);
  caption_ = addCaptionAbove(this, scroll_);
  caption_->setObjectName(QStringLiteral("tokenCaption"));
  grid_->setData({}, {});
}

TokenRoutingWidget::~TokenRoutingWidget() = default;

void TokenRoutingWidget::setData(const QStringList& tokens, const QVector<Row>& rows) { grid_->setData(tokens, rows); }

void TokenRoutingWidget::clear() { grid_->setData({}, {}); }

void TokenRoutingWidget::setCaption(const QString& caption) {
  caption_->setText(caption);
  caption_->setVisible(!caption.isEmpty());
}

int TokenRoutingWidget::tokenCount() const { return static_cast<int>(grid_->tokens().size()); }

int TokenRoutingWidget::rowCount() const { return static_cast<int>(grid_->rows().size()); }

const TokenRoutingWidget::Row& TokenRoutingWidget::row(int index) const { return grid_->rows().at(index); }

QString TokenRoutingWidget::toolTipAt(const QPoint& pos) const { return grid_->toolTipAt(pos); }

QWidget* TokenRoutingWidget::grid() const { return grid_; }

QRect TokenRoutingWidget::cellRect(int row, int token) const { return grid_->cellRect(row, token); }

}  // namespace routelab
