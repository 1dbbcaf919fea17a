// Exports any QCustomPlot to PDF (vector, embedded TrueType fonts), SVG or PNG at a physical size given in cm,
// with every text at a given size in points, so the file drops into LaTeX without rescaling; plus the
// "Export plot…" context menu and the size dialog every plot shares.
#pragma once
#include <QString>

class QCustomPlot;
class QWidget;

namespace routelab {

/// Physical size of an exported plot. The logical unit of an export is one PostScript point (1/72 inch), so
/// pens, paddings and tick lengths of a plot are read as points.
struct PlotExportSettings {
  double widthCm = 8.5;   ///< one column of a two-column paper
  double heightCm = 6.0;
  double fontPt = 8.0;    ///< every text of the plot; <= 0 keeps each font's own size
  int dpi = 300;          ///< PNG only
};

/// Writes what `plot` draws to `path`, chosen by its extension (.pdf, .svg, .png): `widthCm` x `heightCm`,
/// fonts temporarily set to `fontPt` points (restored afterwards), PNG at `dpi` (round(cm / 2.54 * dpi) pixels).
/// Returns "" on success, else a message naming the file.
QString exportPlot(QCustomPlot* plot, const QString& path, double widthCm, double heightCm, double fontPt,
                   int dpi = 300);
QString exportPlot(QCustomPlot* plot, const QString& path, const PlotExportSettings& settings);

/// The file extensions exportPlot understands, lower case without the dot: pdf, svg, png.
bool isPlotExportFormat(const QString& suffix);

/// Shows a small modal dialog for width, height (cm), font size (pt) and DPI, starting from `settings`, or from
/// the values last accepted (QSettings "plotExport/...") when `remembered` is true. Returns false on cancel;
/// accepted values are remembered.
bool askPlotExportSettings(QWidget* parent, PlotExportSettings& settings, bool remembered = true);

/// File dialog (PDF, SVG, PNG) then size dialog, then exportPlot; a failure is shown in a message box.
/// Returns the path written, or "" when cancelled or failed.
QString exportPlotWithDialog(QCustomPlot* plot, QWidget* parent);

/// Gives `plot` a context menu with "Export plot…" (exportPlotWithDialog, dialogs parented to `owner`).
void addExportMenu(QCustomPlot* plot, QWidget* owner);

}  // namespace routelab
