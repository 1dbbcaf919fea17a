// Draws the renderer-neutral figures of core/report/figure/figure.h with QCustomPlot: on screen (FigureView, the
// compare view's canvas) and to files at a physical size (PDF with embedded non-Type-3 fonts, SVG, PNG at a
// chosen DPI), so an exported figure drops into LaTeX without rescaling.
#pragma once
#include <QString>
#include <QWidget>

#include "core/report/figure/figure.h"

class QCustomPlot;
class QLabel;
class QTimer;

namespace routelab {

struct FigureExportOptions {
  double widthCm = 0;   ///< 0 = the figure's own width_cm
  double heightCm = 0;  ///< 0 = the figure's own height_cm
  double fontPt = 0;    ///< 0 = the figure's own font_pt
  int dpi = 300;        ///< PNG only
};

/// Where a figure is drawn: a file gets every point; on screen a line of many times more points than its panel is
/// wide is handed to QCustomPlot thinned to each few points' lowest and highest (the pixels drawn are the same).
enum class RenderTarget { File, Screen };

/// Clears `plot` and draws `figure` into it: one axis rect per panel in a grid, palette colours, dash styles,
/// bands, grouped bars, heat maps (viridis, or a diverging map) with a colour scale, legends, log axes.
void renderFigure(QCustomPlot* plot, const Figure& figure, RenderTarget target = RenderTarget::File);

/// Writes `figure` to `path`, chosen by its extension: .pdf, .svg or .png. Returns "" on success, else a
/// message naming the file.
QString exportFigure(const Figure& figure, const QString& path, const FigureExportOptions& options = {});

/// Writes the whole bundle `<stem>.pdf`, `<stem>.svg`, `<stem>.png` and the data files of
/// write_figure_data_files (`.csv`, `.tex` pgfplots, `.json` sidecar). Returns "" or the first error.
QString exportFigureBundle(const Figure& figure, const QString& stem, const FigureExportOptions& options = {});

/// A figure on screen under a caption line (what it shows; a tooltip for how it was computed), with a button and a
/// context menu "Export figure…" (file dialog: PDF, SVG, PNG or a bundle; width in cm, font size in pt, DPI).
class FigureView : public QWidget {
  Q_OBJECT

 public:
  explicit FigureView(QWidget* parent = nullptr);

  void setFigure(Figure figure);
  const Figure& figure() const { return figure_; }
  void setCaption(const QString& caption, const QString& toolTip = QString());
  QString caption() const;
  QCustomPlot* plot() const { return plot_; }

 public Q_SLOTS:
  /// Asks for a file and the physical size, then exports.
  void exportWithDialog();

 Q_SIGNALS:
  void exported(const QString& path);

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  /// Draws figure_ laid out for the size it has on screen (legend columns, headroom, shortened labels and titles
  /// follow the panel's width); exports lay it out at the figure's own physical size.
  void render();

  QTimer* relayout_ = nullptr;  ///< a resize re-lays the figure out once it settles
  Figure figure_;
  QCustomPlot* plot_ = nullptr;
  QLabel* caption_ = nullptr;
};

}  // namespace routelab
