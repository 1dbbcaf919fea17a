// Plot colours that follow the application palette: the dashboard plots take the window's base and text
// colours, so a dark system palette gives dark plots, and they change when the palette does. Exports always paint
// the light theme (a paper's figure is black on white).
#pragma once
#include <QPalette>

class QCustomPlot;

namespace routelab {

/// Background, axes, ticks, labels, grid, legend and text elements of `plot` from `palette` (Base and Text).
void applyPlotTheme(QCustomPlot* plot, const QPalette& palette);
/// Applies the plot's own palette now and again whenever the palette changes (system theme switch, a style
/// sheet, QApplication::setPalette).
void followPalette(QCustomPlot* plot);
/// True for a plot that followPalette() was called on.
bool followsPalette(const QCustomPlot* plot);
/// Black on white, whatever the system's palette: what exports paint.
QPalette lightPlotPalette();
/// True when `palette`'s base colour is darker than its text colour.
bool isDarkPalette(const QPalette& palette);

}  // namespace routelab
