// The QCustomPlot renderer of the figure model: a grid of axis rects (one per panel) with lines, bands, grouped
// bars and heat maps in the figure's palette and font size; file export goes through widgets/plot_export (one
// size and font logic for figures and live plots). FigureView, the figure on screen: figure_view.cpp.
#include "ui/figure_render.h"

#include <QDir>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/report/builders/catalog.h"
#include "core/report/export/figure_files.h"
#include "core/util/errors.h"
#include "widgets/color_gradients.h"
#include "widgets/color_maps.h"
#include "widgets/plot_export.h"
#include "widgets/qcustomplot_include.h"

namespace routelab {
namespace {

// Line widths and lengths in points (the logical unit of an export; pixels on screen).
constexpr double kLinePt = 1.2;
constexpr double kFaintPt = 0.6;
constexpr double kAxisPt = 0.6;
constexpr double kGridPt = 0.35;
constexpr double kPtPerCm = 72.0 / 2.54;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::size_t kMaxLabelChars = 12;
/// A graph's legend line runs 5 units past its icon (QCPGraph::drawLegendIcon): its label starts 2 units after that.
constexpr int kLegendIconTextPadding = 7;
constexpr int kLegendIconPt = 14;         ///< a legend icon's width (its height is 6)
constexpr int kLegendMarginsPt = 6;       ///< a legend's left and right margins together
constexpr double kCharEm = 0.6;           ///< a label character's width in em, roughly (DejaVu Sans, a little over)

QString qs(const std::string& text) { return QString::fromStdString(text); }

QColor paletteColor(int index) {
  const auto& palette = figure_palette();
  const int n = static_cast<int>(palette.size());
  return QColor(qs(palette[static_cast<std::size_t>(((index % n) + n) % n)]));
}

QColor withAlpha(QColor color, int alpha) {
  color.setAlpha(alpha);
  return color;
}

/// Smallest and largest finite value seen (positive only on a log axis).
struct Extent {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  bool log = false;

  void add(double v) {
    if (!std::isfinite(v) || (log && v <= 0)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool valid() const { return lo <= hi; }

  /// The range with `pad` of its span added on both sides (in decades on a log axis).
  QCPRange range(double pad) const {
    if (!valid()) return log ? QCPRange(1, 10) : QCPRange(0, 1);
    if (log) {
      double a = std::log10(lo), b = std::log10(hi);
      if (b - a < 1e-9) a -= 0.5, b += 0.5;
      const double d = (b - a) * pad;
      return QCPRange(std::pow(10.0, a - d), std::pow(10.0, b + d));
    }
    double a = lo, b = hi;
    if (b - a < 1e-12 * std::max(1.0, std::abs(a))) {
      const double half = a != 0 ? std::abs(a) * 0.1 : 0.5;
      a -= half, b += half;
    }
    const double d = (b - a) * pad;
    return QCPRange(a - d, b + d);
  }
};

/// Values as a log axis can show them: non-positive values become gaps.
QVector<double> toAxis(const std::vector<double>& values, bool log) {
  QVector<double> out;
  out.reserve(static_cast<int>(values.size()));
  for (double v : values) out.push_back(log && !(v > 0) ? kNaN : v);
  return out;
}

QString displayLabel(const std::string& raw) {
  QString label = qs(raw);
  label.replace(QLatin1Char('\n'), QStringLiteral("\\n"));
  label.replace(QLatin1Char('\t'), QStringLiteral("\\t"));
  label.replace(QLatin1Char('\r'), QStringLiteral("\\r"));
  if (static_cast<std::size_t>(label.size()) > kMaxLabelChars)
    label = label.left(static_cast<int>(kMaxLabelChars) - 1) + QChar(0x2026);
  return label;
}

/// A text ticker for categories at positions first, first + 1, ...: labels thinned to every k-th one so that
/// they fit `axisPt` (each label needs `perLabelPt`).
QSharedPointer<QCPAxisTickerText> categoryTicker(const std::vector<std::string>& labels, double first,
                                                 double axisPt, double perLabelPt,
                                                 const std::vector<bool>& withData = {}) {
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  const double n = static_cast<double>(labels.size());
  const std::size_t stride =
      std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(n * perLabelPt / std::max(axisPt, 1.0))));
  // Too little room for every label: when the categories that hold data fit, they are the ones labelled (a heat
  // map of routed layers 1, 3, 5 would otherwise label the empty rows 0, 2, 4, 6 only).
  const auto room = static_cast<std::size_t>(std::max(1.0, std::floor(std::max(axisPt, 1.0) / perLabelPt)));
  const auto filled = static_cast<std::size_t>(std::count(withData.begin(), withData.end(), true));
  const bool byData = stride > 1 && withData.size() == labels.size() && filled > 0 && filled <= room;
  for (std::size_t i = 0; i < labels.size(); i += byData ? 1 : stride)
    if (!byData || withData[i]) ticker->addTick(first + static_cast<double>(i), displayLabel(labels[i]));
  ticker->setSubTickCount(0);
  return ticker;
}

/// `text` shortened to `chars` characters by an ellipsis in the middle (both ends usually say the most).
QString elideMiddle(const QString& text, int chars) {
  if (text.size() <= chars) return text;
  const int head = (chars - 1) / 2, tail = chars - 1 - head;
  return text.left(head) + QChar(0x2026) + text.right(tail);
}

/// Width of the longest label in points, roughly (kCharEm per character). `whole`: legend labels, drawn whole;
/// else tick labels, cut to kMaxLabelChars by displayLabel.
double labelWidthPt(const std::vector<std::string>& labels, double fontPt, bool whole = false) {
  std::size_t longest = 0;
  for (const auto& l : labels)
    longest = std::max(longest, static_cast<std::size_t>(whole ? qs(l).size() : displayLabel(l).size()));
  return kCharEm * fontPt * static_cast<double>(longest) + 2;
}

/// ColorBrewer RdBu (colour-blind safe), blue for negative, white at 0, red for positive.
QCPColorGradient divergingGradient() {
  static const char* const kStops[] = {"#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7",
                                       "#fddbc7", "#f4a582", "#d6604d", "#b2182b"};
  QCPColorGradient gradient;
  gradient.clearColorStops();
  for (int i = 0; i <= 8; ++i) gradient.setColorStopAt(i / 8.0, QColor(QLatin1String(kStops[i])));
  gradient.setNanHandling(QCPColorGradient::nhTransparent);
  gradient.setLevelCount(256);
  return gradient;
}

void styleAxis(QCPAxis* axis, const QFont& font) {
  const QPen pen(Qt::black, kAxisPt);
  axis->setBasePen(pen);
  axis->setTickPen(pen);
  axis->setSubTickPen(QPen(Qt::black, kAxisPt * 0.8));
  axis->setTickLength(0, 3);
  axis->setSubTickLength(0, 2);
  axis->setLabelFont(font);
  axis->setTickLabelFont(font);
  axis->setLabelPadding(2);
  axis->setTickLabelPadding(2);
  axis->setPadding(0);
  axis->grid()->setPen(QPen(QColor(225, 225, 225), kGridPt));
  axis->grid()->setZeroLinePen(Qt::NoPen);
  axis->grid()->setSubGridVisible(false);
}

/// The top and right axes close the box without ticks or labels.
void styleFrame(QCPAxisRect* rect) {
  for (auto type : {QCPAxis::atTop, QCPAxis::atRight}) {
    QCPAxis* axis = rect->axis(type);
    axis->setVisible(true);
    axis->setTicks(false);
    axis->setTickLabels(false);
    axis->setBasePen(QPen(Qt::black, kAxisPt));
    axis->grid()->setVisible(false);
  }
}

/// Log ticks labelled as plain numbers (0.01 ... 10000) where they are short, else as 10 with a Unicode
/// superscript exponent (real text in the PDF, no raised second label).
class PowerTicker : public QCPAxisTickerLog {
 public:
  explicit PowerTicker(bool plain) : plain_(plain) {}

 protected:
  QString getTickLabel(double tick, const QLocale& locale, QChar formatChar, int precision) override {
    if (plain_ || !(tick > 0)) return QString::number(tick, 'g', 6);
    const int exponent = static_cast<int>(std::lround(std::log10(tick)));
    if (std::abs(tick / std::pow(10.0, exponent) - 1) > 1e-6) return QString::number(tick, 'g', 3);
    static const char16_t kDigits[] = u"\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079";
    QString power;
    for (QChar c : QString::number(std::abs(exponent))) power += QChar(kDigits[c.digitValue()]);
    return QStringLiteral("10") + (exponent < 0 ? QString(QChar(0x207B)) : QString()) + power;
  }

 private:
  bool plain_;
};

/// The span (upper / lower) from which a log axis is ticked at powers of ten.
constexpr double kPowerTicksFrom = 20;

void setLog(QCPAxis* axis, const QCPRange& range) {
  axis->setScaleType(QCPAxis::stLogarithmic);
  // Within a decade or so there are too few powers of ten to label: keep linear tick positions there.
  if (range.upper / range.lower >= kPowerTicksFrom) {
    QSharedPointer<QCPAxisTickerLog> ticker(new PowerTicker(range.lower >= 1e-2 && range.upper <= 1e4));
    ticker->setSubTickCount(8);
    axis->setTicker(ticker);
  } else {
    axis->setNumberFormat(QStringLiteral("g"));
    axis->setNumberPrecision(3);
  }
}

QPen seriesPen(const FigureSeries& s) {
  QColor color = paletteColor(s.color);
  if (s.faint) color = withAlpha(color, 100);
  QPen pen(color, s.faint ? kFaintPt : kLinePt);
  pen.setCapStyle(Qt::FlatCap);
  pen.setJoinStyle(Qt::RoundJoin);
  // Dash lengths are in pen widths.
  switch (s.dash) {
    case 1: pen.setDashPattern({4.0, 2.0}); break;
    case 2: pen.setDashPattern({1.0, 1.6}); break;
    case 3: pen.setDashPattern({4.0, 1.6, 1.0, 1.6}); break;
    default: break;
  }
  return pen;
}

/// Sizes of one panel's axes in points, from the figure's physical size (for label thinning).
struct PanelGeometry {
  double widthPt = 0, heightPt = 0;
  /// On screen: lines of more points are thinned to this many buckets' lowest and highest (0: every point, files).
  std::size_t screenBuckets = 0;
};

/// A line's points (x sorted) as `buckets` runs of equal length, each given by its lowest and highest finite point
/// in their order, and its first gap (a non-finite y) where it has one: the pixels QCustomPlot's adaptive sampling
/// draws of the whole line when a bucket is narrower than a pixel, without handing it every point.
void thinLine(const QVector<double>& xs, const QVector<double>& ys, std::size_t buckets, QVector<double>& outX,
              QVector<double>& outY) {
  const auto n = static_cast<std::size_t>(xs.size());
  outX.clear();
  outY.clear();
  outX.reserve(static_cast<int>(3 * buckets));
  outY.reserve(static_cast<int>(3 * buckets));
  for (std::size_t b = 0; b < buckets; ++b) {
    const std::size_t first = b * n / buckets, last = (b + 1) * n / buckets;
    if (first >= last) continue;
    std::size_t lo = n, hi = n, gap = n;
    for (std::size_t i = first; i < last; ++i) {
      const double y = ys[static_cast<int>(i)];
      if (!std::isfinite(y)) {
        if (gap == n) gap = i;
        continue;
      }
      if (lo == n || y < ys[static_cast<int>(lo)]) lo = i;
      if (hi == n || y > ys[static_cast<int>(hi)]) hi = i;
    }
    std::size_t picks[3] = {lo, hi, gap};
    std::sort(std::begin(picks), std::end(picks));
    for (std::size_t k = 0; k < 3; ++k)
      if (picks[k] != n && (k == 0 || picks[k] != picks[k - 1])) {
        outX.push_back(xs[static_cast<int>(picks[k])]);
        outY.push_back(ys[static_cast<int>(picks[k])]);
      }
  }
}

class PanelRenderer {
 public:
  PanelRenderer(QCustomPlot* plot, QCPAxisRect* rect, const FigurePanel& panel, const QFont& font, double fontPt,
                PanelGeometry geometry)
      : plot_(plot), rect_(rect), panel_(panel), font_(font), fontPt_(fontPt), geometry_(geometry) {
    x_ = rect->axis(QCPAxis::atBottom);
    y_ = rect->axis(QCPAxis::atLeft);
    styleAxis(x_, font_);
    styleAxis(y_, font_);
    styleFrame(rect_);
    x_->setLabel(qs(panel.x_label));
    y_->setLabel(qs(panel.y_label));
  }

  /// Draws the panel's data; returns the colour scale the caller places next to the axis rect, if any.
  QCPColorScale* render() {
    QCPColorScale* scale = nullptr;
    if (!panel_.heatmap.values.empty() && panel_.heatmap.rows > 0 && panel_.heatmap.cols > 0) {
      scale = heatmap();
    } else {
      Extent ex{}, ey{};
      ex.log = panel_.log_x && panel_.bars.members.empty();
      ey.log = panel_.log_y;
      if (!panel_.bars.members.empty()) bars(ey);
      series(ex, ey);
      if (panel_.bars.members.empty()) {
        // Lines reach the axes; markers at the first and last x need a margin to be drawn whole.
        const bool markers = std::any_of(panel_.series.begin(), panel_.series.end(), [](const FigureSeries& s) {
          return s.kind == SeriesKind::Points || s.marked;
        });
        const QCPRange xr = ex.range(markers ? 0.02 : 0.0);
        x_->setRange(xr);
        if (ex.log) setLog(x_, xr);
        // QCustomPlot's 5 ticks overlap their labels in a narrow panel (a grid of a layer each): as many as fit
        // (a log axis within a decade or so keeps linear tick positions: the same there).
        if (!ex.log || xr.upper / xr.lower < kPowerTicksFrom) {
          const auto chars =
              std::max(QString::number(xr.lower, 'g', 4).size(), QString::number(xr.upper, 'g', 4).size());
          const double labelPt = static_cast<double>(chars + 2) * 0.6 * fontPt_;
          x_->ticker()->setTickCount(std::clamp(static_cast<int>(geometry_.widthPt / labelPt), 2, 5));
        }
      }
      QCPRange yr = ey.range(0.05);
      // Bars reach the top of the data: a legend row above them, in headroom, rather than over the bars.
      if (barLegend() && !ey.log) yr.upper += (yr.upper - yr.lower) * 0.2 * legendRows();
      // A curve under the top-right legend: headroom so that the legend sits above every curve.
      if (panel_.bars.members.empty() && !ey.log) yr.upper += lineLegendHeadroom(ex.range(0.0), ex.log, yr);
      y_->setRange(yr);
      if (ey.log) setLog(y_, yr);
    }
    legend();
    return scale;
  }

 private:
  void series(Extent& ex, Extent& ey) {
    // Bands first so that every line lies on top of every band.
    for (const auto& s : panel_.series) {
      if (s.y_lo.empty() || s.x.empty()) continue;
      const QVector<double> xs = toAxis(s.x, ex.log);
      QCPGraph* lo = plot_->addGraph(x_, y_);
      QCPGraph* hi = plot_->addGraph(x_, y_);
      const bool sorted = std::is_sorted(xs.cbegin(), xs.cend());  // steps: QCustomPlot need not sort them again
      lo->setData(xs, toAxis(s.y_lo, ey.log), sorted);
      hi->setData(xs, toAxis(s.y_hi, ey.log), sorted);
      for (QCPGraph* g : {lo, hi}) {
        g->setPen(Qt::NoPen);
        if (s.kind == SeriesKind::Step) g->setLineStyle(QCPGraph::lsStepLeft);
      }
      hi->setBrush(withAlpha(paletteColor(s.color), s.faint ? 25 : 55));
      hi->setChannelFillGraph(lo);
      for (std::size_t i = 0; i < s.x.size(); ++i) {
        if (!std::isfinite(s.y_lo[i]) || !std::isfinite(s.y_hi[i])) continue;
        ex.add(s.x[i]);
        ey.add(s.y_lo[i]);
        ey.add(s.y_hi[i]);
      }
    }
    // Faint series under the others, marked series on top.
    std::vector<const FigureSeries*> order;
    for (const auto& s : panel_.series) order.push_back(&s);
    std::stable_sort(order.begin(), order.end(), [](const FigureSeries* a, const FigureSeries* b) {
      auto rank = [](const FigureSeries* s) { return s->faint ? 0 : s->marked ? 2 : 1; };
      return rank(a) < rank(b);
    });
    for (const FigureSeries* sp : order) {
      const FigureSeries& s = *sp;
      if (s.x.empty()) continue;
      QCPGraph* g = plot_->addGraph(x_, y_);
      const QVector<double> xs = toAxis(s.x, ex.log), ys = toAxis(s.y, ey.log);
      const bool sorted = std::is_sorted(xs.cbegin(), xs.cend());
      const std::size_t buckets = geometry_.screenBuckets;
      if (buckets > 0 && sorted && s.kind == SeriesKind::Line && !s.marked && s.x.size() > 3 * buckets) {
        QVector<double> thinX, thinY;
        thinLine(xs, ys, buckets, thinX, thinY);
        g->setData(thinX, thinY, true);
      } else {
        g->setData(xs, ys, sorted);
      }
      const QPen pen = seriesPen(s);
      const QColor color = paletteColor(s.color);
      g->setPen(pen);
      g->setAntialiased(true);
      switch (s.kind) {
        case SeriesKind::Line: break;
        case SeriesKind::Step: g->setLineStyle(QCPGraph::lsStepLeft); break;
        case SeriesKind::Points:
          g->setLineStyle(QCPGraph::lsNone);
          g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, pen.color(), 3.5));
          break;
      }
      if (s.marked) {
        QCPScatterStyle marker(QCPScatterStyle::ssDiamond, QPen(color.darker(130), 0.6), QBrush(color), 6);
        g->setScatterStyle(marker);
      }
      g->setName(qs(s.label));
      bool drawn = false;
      for (std::size_t i = 0; i < s.x.size(); ++i) {
        if (!std::isfinite(s.y[i]) || (ey.log && !(s.y[i] > 0)) || (ex.log && !(s.x[i] > 0))) continue;
        ex.add(s.x[i]);
        ey.add(s.y[i]);
        drawn = true;
      }
      if (!s.label.empty() && drawn) labelled_.push_back(g);
    }
  }

  void bars(Extent& ey) {
    const FigureBars& b = panel_.bars;
    const std::size_t n = b.categories.size();
    const double members = static_cast<double>(b.members.size());
    auto* group = new QCPBarsGroup(plot_);
    group->setSpacingType(QCPBarsGroup::stAbsolute);
    group->setSpacing(1);
    const double width = 0.8 / members;
    if (!ey.log) ey.add(0);
    for (const auto& m : b.members) {
      auto* bars = new QCPBars(x_, y_);
      QVector<double> keys, values, errors;
      for (std::size_t i = 0; i < n && i < m.values.size(); ++i) {
        const double v = m.values[i];
        if (!std::isfinite(v) || (ey.log && v <= 0)) continue;
        keys.push_back(static_cast<double>(i));  // the category's index, as in the CSV (x of a "bar" row)
        values.push_back(v);
        const double e = i < m.errors.size() ? m.errors[i] : kNaN;
        errors.push_back(std::isfinite(e) ? e : kNaN);
        ey.add(v);
        if (std::isfinite(e)) {
          ey.add(v + e);
          ey.add(v - e);
        }
      }
      bars->setData(keys, values, true);
      bars->setWidth(width);
      if (members > 1) bars->setBarsGroup(group);
      const QColor color = paletteColor(m.color);
      bars->setPen(QPen(color.darker(120), 0.5));
      const QColor fill = m.faint ? withAlpha(color, 90) : color;
      bars->setBrush(m.hatched ? QBrush(fill, Qt::BDiagPattern) : QBrush(fill));
      bars->setName(qs(m.label));
      if (ey.log) bars->setBaseValue(1e-300);
      if (!m.label.empty()) labelled_.push_back(bars);
      if (!m.errors.empty()) {
        auto* err = new QCPErrorBars(x_, y_);
        err->setDataPlottable(bars);
        err->setData(errors);
        err->setPen(QPen(Qt::black, 0.6));
        const double barPt = width * geometry_.widthPt / std::max<double>(1, n);
        err->setWhiskerWidth(std::clamp(0.4 * barPt, 2.0, 8.0));
      }
    }
    x_->setRange(-0.5, static_cast<double>(n) - 0.5);
    x_->grid()->setVisible(false);
    const double slot = geometry_.widthPt / std::max<double>(1, n);
    const double labelW = labelWidthPt(b.categories, fontPt_);
    const bool rotate = labelW > slot;
    x_->setTickLabelRotation(rotate ? -90 : 0);
    x_->setTicker(categoryTicker(b.categories, 0.0, geometry_.widthPt, rotate ? 1.3 * fontPt_ : labelW + 2));
  }

  QCPColorScale* heatmap() {
    const FigureHeatmap& h = panel_.heatmap;
    auto* map = new QCPColorMap(x_, y_);
    // A map one cell thin has no extent in QCustomPlot: draw such a dimension as two equal cells of half size.
    const int cols = static_cast<int>(h.cols), rows = static_cast<int>(h.rows);
    const int dataCols = std::max(cols, 2), dataRows = std::max(rows, 2);
    map->data()->setSize(dataCols, dataRows);
    map->data()->setRange(cols > 1 ? QCPRange(0, cols - 1) : QCPRange(-0.25, 0.25),
                          rows > 1 ? QCPRange(0, rows - 1) : QCPRange(-0.25, 0.25));
    for (int r = 0; r < dataRows; ++r)
      for (int c = 0; c < dataCols; ++c) {
        map->data()->setCell(c, r, h.colour_value(static_cast<std::size_t>(std::min(r, rows - 1)),
                                                   static_cast<std::size_t>(std::min(c, cols - 1))));
      }
    map->setInterpolate(false);
    map->setTightBoundary(false);
    const QCPColorGradient gradient = h.diverging ? divergingGradient() : viridisGradient();
    QCPRange range(h.lo, h.hi > h.lo ? h.hi : h.lo + 1);
    if (h.diverging) {
      double m = std::max(std::abs(h.lo), std::abs(h.hi));
      if (!(m > 0)) m = 1;
      range = QCPRange(-m, m);
    }
    map->setGradient(gradient);
    map->setDataRange(range);

    auto* scale = new QCPColorScale(plot_);
    scale->setType(QCPAxis::atRight);
    scale->setGradient(gradient);
    scale->setDataRange(range);
    scale->setBarWidth(6);
    styleAxis(scale->axis(), font_);
    scale->axis()->setLabel(qs(h.colour_label));
    scale->axis()->ticker()->setTickCount(3);
    scale->axis()->setSubTicks(false);
    map->setColorScale(scale);

    for (QCPAxis* axis : {x_, y_}) {
      axis->grid()->setVisible(false);
      axis->setSubTicks(false);
    }
    x_->setRange(-0.5, cols - 0.5);
    y_->setRange(-0.5, rows - 0.5);
    y_->setRangeReversed(true);  // row 0 on top, as in a table
    if (!h.col_labels.empty()) {
      const double slot = geometry_.widthPt / std::max(1, cols);
      const double labelW = labelWidthPt(h.col_labels, fontPt_);
      const bool rotate = labelW > slot;
      x_->setTickLabelRotation(rotate ? -90 : 0);
      x_->setTicker(categoryTicker(h.col_labels, 0.0, geometry_.widthPt, rotate ? 1.3 * fontPt_ : labelW + 2));
    } else {
      x_->setTicker(integerTicker());
    }
    if (!h.row_labels.empty()) {
      std::vector<bool> rowHasData(h.rows, false);
      for (std::size_t r = 0; r < h.rows; ++r)
        for (std::size_t c = 0; c < h.cols && !rowHasData[r] && r * h.cols + c < h.values.size(); ++c)
          rowHasData[r] = std::isfinite(h.values[r * h.cols + c]);
      y_->setTicker(categoryTicker(h.row_labels, 0.0, geometry_.heightPt, 1.3 * fontPt_, rowHasData));
    } else {
      y_->setTicker(integerTicker());
    }
    cellTexts(gradient, range);
    return scale;
  }

  /// Writes each cell's text inside it, dark on light cells and white on dark ones, where every text fits its cell
  /// (else none: a grid of some numbers reads as a pattern that is not there).
  void cellTexts(QCPColorGradient gradient, const QCPRange& range) {
    const FigureHeatmap& h = panel_.heatmap;
    if (h.cell_text.size() != h.rows * h.cols) return;
    const double cellW = geometry_.widthPt / static_cast<double>(h.cols);
    const double cellH = geometry_.heightPt / static_cast<double>(h.rows);
    if (labelWidthPt(h.cell_text, fontPt_, /*whole=*/true) > cellW || 1.3 * fontPt_ > cellH) return;
    for (std::size_t r = 0; r < h.rows; ++r)
      for (std::size_t c = 0; c < h.cols; ++c) {
        const auto& text = h.cell_text[r * h.cols + c];
        if (text.empty()) continue;
        const double v = h.colour_value(r, c);
        const QColor fill = std::isfinite(v) ? QColor(gradient.color(v, range)) : QColor(Qt::white);
        const double luminance = 0.299 * fill.red() + 0.587 * fill.green() + 0.114 * fill.blue();
        auto* item = new QCPItemText(plot_);
        item->setClipAxisRect(rect_);
        item->position->setAxes(x_, y_);
        item->position->setCoords(static_cast<double>(c), static_cast<double>(r));
        item->setPositionAlignment(Qt::AlignCenter);
        item->setFont(font_);
        item->setColor(luminance < 140 ? Qt::white : Qt::black);
        item->setText(qs(text));
      }
  }

  static QSharedPointer<QCPAxisTicker> integerTicker() {
    QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
    ticker->setTickStep(1);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    return ticker;
  }

  /// Bar panels lay their legend out across the top in rows of up to kBarLegendColumns entries, fewer when the
  /// panel is too narrow for them (icon, padding and the longest label per entry).
  static constexpr int kBarLegendColumns = 4;
  bool barLegend() const { return panel_.legend && !panel_.bars.members.empty() && !panel_.bars.members[0].label.empty(); }
  int barLegendColumns() const {
    std::vector<std::string> labels;
    for (const auto& m : panel_.bars.members) labels.push_back(m.label);
    return std::clamp(static_cast<int>(geometry_.widthPt / legendEntryPt(labels)), 1, kBarLegendColumns);
  }
  /// One legend entry's width: icon, icon-text padding, the longest label, margins (as legend() sets them up).
  double legendEntryPt(const std::vector<std::string>& labels) const {
    return kLegendIconPt + kLegendIconTextPadding + labelWidthPt(labels, fontPt_, /*whole=*/true) + kLegendMarginsPt;
  }
  int legendRows() const {
    const int entries = static_cast<int>(panel_.bars.members.size());
    return (entries + barLegendColumns() - 1) / barLegendColumns();
  }

  /// The y headroom that keeps the top-right legend clear of the curves: 0 when no curve passes under its
  /// estimated box (entries x 1.25 em high, icon + padding + longest label wide), else enough to lift the data
  /// below it.
  double lineLegendHeadroom(const QCPRange& xr, bool logX, const QCPRange& yr) const {
    if (!panel_.legend || labelled_.empty() || xr.size() <= 0 || yr.size() <= 0) return 0;
    if (logX && !(xr.lower > 0)) return 0;
    std::vector<std::string> labels;
    for (const auto& series : panel_.series)
      if (!series.label.empty()) labels.push_back(series.label);
    const double hf = std::min(0.6, (static_cast<double>(labelled_.size()) * 1.25 * fontPt_ + 4) / geometry_.heightPt);
    const double wf = std::min(1.0, legendEntryPt(labels) / geometry_.widthPt);
    // Where x lies across the axis: linearly, or on a log axis by its logarithm.
    const auto across = [&](double x) {
      return logX ? std::log(x / xr.lower) / std::log(xr.upper / xr.lower) : (x - xr.lower) / xr.size();
    };
    const auto under = [&](double x, double y) {
      return std::isfinite(x) && std::isfinite(y) && across(x) >= 1 - wf && (y - yr.lower) / yr.size() >= 1 - hf;
    };
    for (const auto& series : panel_.series) {
      const std::size_t n = std::min(series.x.size(), series.y.size());
      // Each point, and 7 more along the segment to the next one.
      for (std::size_t i = 0; i < n; ++i)
        for (int k = 0; k < (i + 1 < n ? 8 : 1); ++k) {
          const double t = k / 8.0;
          const std::size_t j = std::min(i + 1, n - 1);
          const double x = logX ? series.x[i] * std::pow(series.x[j] / series.x[i], t)  // straight on the log axis
                                : series.x[i] + t * (series.x[j] - series.x[i]);
          if (under(x, series.y[i] + t * (series.y[j] - series.y[i])))
            return yr.size() * hf / (1 - hf);
        }
    }
    return 0;
  }

  void legend() {
    if (!panel_.legend || labelled_.empty()) return;
    auto* legend = new QCPLegend;
    rect_->insetLayout()->addElement(legend, barLegend() ? Qt::AlignTop | Qt::AlignHCenter : Qt::AlignTop | Qt::AlignRight);
    if (barLegend()) {
      legend->setFillOrder(QCPLegend::foColumnsFirst);
      legend->setWrap(barLegendColumns());
    }
    legend->setLayer(QStringLiteral("legend"));
    legend->setFont(font_);
    legend->setBrush(QColor(255, 255, 255, 215));
    legend->setBorderPen(QPen(QColor(190, 190, 190), 0.4));
    legend->setIconSize(kLegendIconPt, 6);
    legend->setIconTextPadding(kLegendIconTextPadding);
    legend->setRowSpacing(0);
    legend->setMargins(QMargins(3, 1, 3, 1));
    // An entry wider than the panel would be cut at the panel's edge: its label is shortened in the middle to fit,
    // deliberately (the hover readout, the CSV and the JSON sidecar keep the whole label).
    // (The inverse of legendEntryPt: the characters an entry as wide as the panel holds.)
    const double entryFrame = legendEntryPt({std::string()});
    const int maxChars = std::max(6, static_cast<int>((geometry_.widthPt * 0.95 - entryFrame) / (kCharEm * fontPt_)));
    for (QCPAbstractPlottable* p : labelled_) {
      if (p->name().size() > maxChars) {
        p->setProperty("fullName", p->name());
        p->setName(elideMiddle(p->name(), maxChars));
      }
      p->addToLegend(legend);
    }
    for (int i = 0; i < legend->itemCount(); ++i)
      if (QCPAbstractLegendItem* item = legend->item(i)) item->setFont(font_);  // wrapped rows leave empty cells
  }

  QCustomPlot* plot_;
  QCPAxisRect* rect_;
  const FigurePanel& panel_;
  QFont font_;
  double fontPt_;
  PanelGeometry geometry_;
  QCPAxis* x_ = nullptr;
  QCPAxis* y_ = nullptr;
  std::vector<QCPAbstractPlottable*> labelled_;
};

}  // namespace

void renderFigure(QCustomPlot* plot, const Figure& figure, RenderTarget target) {
  plot->clearItems();
  plot->clearPlottables();
  plot->plotLayout()->clear();
  for (QCPMarginGroup* group : plot->findChildren<QCPMarginGroup*>(QString(), Qt::FindDirectChildrenOnly))
    delete group;
  for (QCPBarsGroup* group : plot->findChildren<QCPBarsGroup*>(QString(), Qt::FindDirectChildrenOnly))
    delete group;
  plot->setAutoAddPlottableToLegend(false);
  plot->setBackground(Qt::white);

  // On screen the figure takes the plot's size (once laid out), not its physical size for files.
  double widthCm = figure.width_cm, heightCm = figure.height_cm;
  if (target == RenderTarget::Screen && plot->width() > 40 && plot->height() > 40) {
    widthCm = plot->width() * 2.54 / plot->logicalDpiX();
    heightCm = plot->height() * 2.54 / plot->logicalDpiY();
  }
  const double fontPt = figure.font_pt > 0 ? figure.font_pt : 8.0;
  QFont font = plot->font();
  font.setPointSizeF(fontPt);
  QFont titleFont = font;
  titleFont.setBold(true);

  QCPLayoutGrid* grid = plot->plotLayout();
  grid->setColumnSpacing(6);
  grid->setRowSpacing(4);
  if (figure.panels.empty()) {
    grid->addElement(0, 0, new QCPTextElement(plot, QObject::tr("(empty figure)"), font));
    return;
  }
  const int count = static_cast<int>(figure.panels.size());
  const int columns = figure.columns > 0 ? std::min(figure.columns, count) : count;
  const int rows = (count + columns - 1) / columns;
  const bool titled = std::any_of(figure.panels.begin(), figure.panels.end(),
                                  [](const FigurePanel& p) { return !p.title.empty(); });
  // Panel axes in points, roughly: the cell less the tick labels and the axis label around it.
  PanelGeometry geometry;
  geometry.widthPt = std::max(20.0, widthCm * kPtPerCm / columns - 4.5 * fontPt);
  geometry.heightPt = std::max(20.0, heightCm * kPtPerCm / rows - (titled ? 5.0 : 3.8) * fontPt);
  // Two buckets a point of width: at most a few points a pixel on any screen's density.
  if (target == RenderTarget::Screen) geometry.screenBuckets = static_cast<std::size_t>(2.0 * geometry.widthPt) + 1;

  // Bold title characters are ~0.65 em wide (the labels' 0.6 em, bolder).
  const int titleChars = std::max(8, static_cast<int>((widthCm * kPtPerCm / columns - 6.0) / (0.65 * fontPt)));
  // Axis rects of a column share left and right margins, those of a row top and bottom, so panels align.
  std::vector<QCPMarginGroup*> columnGroups, rowGroups;
  for (int c = 0; c < columns; ++c) columnGroups.push_back(new QCPMarginGroup(plot));
  for (int r = 0; r < rows; ++r) rowGroups.push_back(new QCPMarginGroup(plot));

  for (int i = 0; i < count; ++i) {
    const FigurePanel& panel = figure.panels[static_cast<std::size_t>(i)];
    const int row = i / columns, column = i % columns;
    auto* cell = new QCPLayoutGrid;
    grid->addElement(row, column, cell);
    cell->setRowSpacing(1);
    cell->setColumnSpacing(3);
    int rectRow = 0;
    if (titled) {
      // A title wider than its cell would run into the neighbour's: elided in the middle (the full text stays in
      // the figure's JSON sidecar and CSV).
      const QString text = elideMiddle(qs(panel.title), titleChars);
      auto* title = new QCPTextElement(plot, text.isEmpty() ? QStringLiteral(" ") : text, titleFont);
      title->setMargins(QMargins(0, 0, 0, 0));
      cell->addElement(0, 0, title);
      rectRow = 1;
    }
    auto* rect = new QCPAxisRect(plot, true);
    cell->addElement(rectRow, 0, rect);
    rect->setMinimumMargins(QMargins(1, 1, 1, 1));
    PanelRenderer renderer(plot, rect, panel, font, fontPt, geometry);
    QCPColorScale* scale = renderer.render();
    rect->setMarginGroup(QCP::msLeft | QCP::msRight, columnGroups[static_cast<std::size_t>(column)]);
    rect->setMarginGroup(QCP::msTop | QCP::msBottom, rowGroups[static_cast<std::size_t>(row)]);
    if (scale != nullptr) {
      cell->addElement(rectRow, 1, scale);
      scale->setMarginGroup(QCP::msTop | QCP::msBottom, rowGroups[static_cast<std::size_t>(row)]);
      cell->setColumnStretchFactor(1, 0.01);
    }
    if (titled) cell->setRowStretchFactor(0, 0.01);
  }
}

QString exportFigure(const Figure& figure, const QString& path, const FigureExportOptions& options) {
  Figure sized = figure;
  if (options.widthCm > 0) sized.width_cm = options.widthCm;
  if (options.heightCm > 0) sized.height_cm = options.heightCm;
  if (options.fontPt > 0) sized.font_pt = options.fontPt;
  QCustomPlot plot;
  plot.resize(std::max(1, qRound(sized.width_cm * kPtPerCm)), std::max(1, qRound(sized.height_cm * kPtPerCm)));
  renderFigure(&plot, sized);
  return exportPlot(&plot, path, sized.width_cm, sized.height_cm, sized.font_pt, options.dpi);
}

QString exportFigureBundle(const Figure& figure, const QString& stem, const FigureExportOptions& options) {
  for (const char* suffix : {".pdf", ".svg", ".png"}) {
    const QString error = exportFigure(figure, stem + QLatin1String(suffix), options);
    if (!error.isEmpty()) return error;
  }
  Figure sized = figure;
  if (options.widthCm > 0) sized.width_cm = options.widthCm;
  if (options.heightCm > 0) sized.height_cm = options.heightCm;
  if (options.fontPt > 0) sized.font_pt = options.fontPt;
  try {
    write_figure_data_files(sized, QDir::toNativeSeparators(stem).toStdString());
  } catch (const Error& e) {
    return QString::fromStdString(e.what());
  } catch (const std::exception& e) {
    return QObject::tr("cannot write the data files of '%1': %2").arg(stem, QString::fromUtf8(e.what()));
  }
  return QString();
}

}  // namespace routelab
