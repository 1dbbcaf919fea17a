// The files of a figure bundle that need no renderer: tidy CSV of every plotted number, a pgfplots picture that
// reads it, and the JSON sidecar (core/report/figure/figure.h's to_json), written next to each other. The PDF, SVG
// and PNG come from the GUI's renderer (ui/figure_render.h) over the same Figure. No Torch, no Qt.
#pragma once
#include <string>
#include <vector>

#include "core/report/figure/figure.h"

namespace routelab {

/// Tidy CSV of every plotted number, one row per point with one header for all kinds:
/// panel,x,y,y_lo,y_hi,value,kind,series,category (RFC 4180 quoting; NaN and not applicable written "nan";
/// the text columns come last so pgfplots, which knows no quoting, still reads the numbers of every row).
///  - "line"/"points"/"step": series = label, x and y, y_lo and y_hi the band (mean -+ std) when there is one;
///  - "bar": series = member, category = the category, x = its index, y = the value, y_lo/y_hi = y -+ error;
///  - "cell": series = row label, category = column label, x = column index, y = row index, value = the cell.
/// Rows come panel by panel: each panel's series, then its bar members, then its heat map cells.
std::string figure_to_csv(const Figure& figure);
/// A pgfplots `tikzpicture` (groupplots for several panels) that reads `csv_file` (the CSV above; each line, band
/// and bar plot takes its rows by index; heat maps carry their cells inline, since a matrix plot cannot read a
/// slice of a file) with the figure's width, height and font size. The file compiles alone with pdflatex
/// (it opens its own article document when read before any \documentclass) and can be \input into a paper that
/// loads pgfplots with \usepgfplotslibrary{groupplots,fillbetween} and \usetikzlibrary{patterns}.
/// The picture writes every label itself (LaTeX-escaped; characters beyond ASCII shown as '?', the tokenizers'
/// line-break and tab marks as \n and \t); a label with a line break in the CSV would split its row for pgfplots.
std::string figure_to_pgfplots(const Figure& figure, const std::string& csv_file);

/// Writes `<stem>.csv`, `<stem>.tex` (pgfplots) and `<stem>.json` (sidecar) next to each other; returns the paths
/// written. Errors name the file.
std::vector<std::string> write_figure_data_files(const Figure& figure, const std::string& stem);

}  // namespace routelab
