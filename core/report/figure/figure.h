// A figure as data: panels of lines (with optional mean +- std bands), grouped bars and heat maps, with the
// axis labels, scales and styles a renderer needs. Built from stored runs by core/report/builders/catalog.h, drawn by
// the GUI's QCustomPlot renderer (ui/figure_render.h) or by pgfplots, and kept as the JSON sidecar of a figure
// bundle so it can be re-rendered or restyled later. No Torch, no Qt.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace routelab {

/// How a series is drawn.
enum class SeriesKind { Line, Points, Step };

/// The colour-blind-safe qualitative palette every renderer uses, as "#rrggbb": Okabe & Ito's eight (2008), then
/// four of Paul Tol's muted scheme for architectures beyond them; a series' `color` indexes it modulo its size.
const std::vector<std::string>& figure_palette();

struct FigureSeries {
  std::string label;              ///< legend entry; "" = not in the legend
  std::vector<double> x, y;       ///< NaN y = a gap
  std::vector<double> y_lo, y_hi; ///< a shaded band (mean -+ std); empty, or the size of y
  SeriesKind kind = SeriesKind::Line;
  int color = 0;                  ///< palette index: one colour per architecture
  int dash = 0;                   ///< 0 solid, 1 dashed, 2 dotted, 3 dash-dot: one style per variant
  bool faint = false;             ///< drawn light and thin (the raw series under a smoothed one)
  bool marked = false;            ///< drawn with emphasised markers (e.g. the Pareto front)
};

/// Grouped bars: one group of bars per category, one bar per group member, e.g. routed % per layer
/// (categories = layers) for several runs (members).
struct FigureBars {
  std::vector<std::string> categories;
  struct Member {
    std::string label;
    std::vector<double> values;   ///< one per category; NaN = no bar
    std::vector<double> errors;   ///< empty, or one std per category (error bars)
    int color = 0;
    bool hatched = false;         ///< e.g. layers that never route
    bool faint = false;           ///< drawn light, beside a solid member (e.g. training- beside inference-mode)
  };
  std::vector<Member> members;
};

/// A heat map of rows x cols cells drawn as raster cells inside vector axes, with a colour scale.
struct FigureHeatmap {
  std::size_t rows = 0, cols = 0;
  std::vector<double> values;               ///< row-major, rows * cols; NaN = an empty cell
  std::vector<std::string> row_labels;      ///< empty, or one per row (e.g. "L3")
  std::vector<std::string> col_labels;      ///< empty, or one per column (e.g. the probe's tokens)
  double lo = 0, hi = 1;                    ///< colour range
  std::string colour_label;                 ///< the colour scale's title, e.g. "gate"
  bool diverging = false;                   ///< a diverging map centred on 0 (differences), else viridis
  /// Per-row colour ranges (a token map mixes gates in [0, 1] with layer numbers and expert ids): empty, or one
  /// lo and hi per row, each row coloured over its own range; [lo, hi] is then the scale those map onto.
  std::vector<double> row_lo, row_hi;
  /// Empty, or one text per cell (row-major; "" = none) written inside it where the cells are wide enough: a
  /// grid of results read as numbers (a sweep's means).
  std::vector<std::string> cell_text;

  /// The number a renderer colours cell (r, c) by on the [lo, hi] scale: the value itself, or with row ranges the
  /// value placed on the scale by its row's range (below the row's lo: NaN, "none", e.g. no exit).
  double colour_value(std::size_t r, std::size_t c) const;
};

struct FigurePanel {
  std::string title;
  std::string x_label, y_label;
  bool log_x = false, log_y = false;
  std::vector<FigureSeries> series;
  FigureBars bars;                          ///< used when it has members
  FigureHeatmap heatmap;                    ///< used when it has cells
  bool legend = true;
};

struct Figure {
  std::string name;                         ///< catalogue name, e.g. "dtrnet-fig5" or "curves"
  std::string title;                        ///< human title (not drawn: papers caption their figures)
  std::vector<FigurePanel> panels;          ///< laid out in a grid of `columns` columns, row by row
  int columns = 0;                          ///< 0 = all panels in one row
  double width_cm = 8.5;                    ///< physical size of the exported figure (one paper column)
  double height_cm = 6.0;
  double font_pt = 8.0;                     ///< every text of the figure, so LaTeX needs no rescaling
  nlohmann::json meta = nlohmann::json::object();  ///< run ids, settings, smoothing, RouteLab version

  bool empty() const;                       ///< no panel has any data
};

/// "L3": layer 3 as every figure labels it (an axis category, a heat map row, a series).
std::string layer_label(std::int64_t layer);

std::string to_string(SeriesKind kind);
/// "line", "points" or "step"; anything else is a ConfigError naming `key`.
SeriesKind parse_series_kind(const std::string& text, const std::string& key);

/// The JSON sidecar of a figure (every field above; NaN written as null).
nlohmann::json to_json(const Figure& figure);
/// Reads a sidecar back; a missing or mistyped field is a ConfigError naming `origin` and the key path.
Figure figure_from_json(const nlohmann::json& doc, const std::string& origin);

}  // namespace routelab
