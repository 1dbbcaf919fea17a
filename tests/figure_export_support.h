// Helpers of test_figure_export: sample panels (lines, bars, heat maps) and figures, and readers of exported files
// (pdffonts, pdfinfo, pdftotext, pdfimages, SVG lengths) through the poppler tools.
#pragma once
#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QSizeF>
#include <QStandardPaths>
#include <QString>
#include <QStringList>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/report/figure/figure.h"

namespace test_figure_export {

using routelab::Figure;
using routelab::FigurePanel;
using routelab::FigureSeries;

// Included by test_figure_export.cpp alone: internal linkage keeps these out of the other suites' unity batches.
namespace {

constexpr double kPtPerCm = 72.0 / 2.54;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

FigureSeries curve(const std::string& label, int color, int dash, double scale, std::size_t n = 40) {
  FigureSeries s;
  s.label = label;
  s.color = color;
  s.dash = dash;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = 100.0 * static_cast<double>(i + 1);
    s.x.push_back(x);
    s.y.push_back(scale * (2.0 + 3.0 / std::sqrt(static_cast<double>(i + 1))));
  }
  return s;
}

FigurePanel linesPanel(bool logAxes) {
  FigurePanel p;
  p.title = logAxes ? "log-log" : "validation loss";
  p.x_label = "step";
  p.y_label = "loss (nats/token)";
  p.log_x = p.log_y = logAxes;
  FigureSeries raw = curve("", 0, 0, 1.05);
  raw.faint = true;
  p.series.push_back(raw);
  FigureSeries dense = curve("dense", 0, 0, 1.0);
  for (double y : dense.y) {
    dense.y_lo.push_back(y - 0.1);
    dense.y_hi.push_back(y + 0.1);
  }
  p.series.push_back(dense);
  p.series.push_back(curve("MoD 12.5%", 1, 1, 0.97));
  FigureSeries points = curve("DTRNet", 2, 2, 0.95, 8);
  points.kind = routelab::SeriesKind::Points;
  points.y[3] = kNaN;  // a gap
  p.series.push_back(points);
  FigureSeries front = curve("Pareto front", 3, 3, 0.9, 5);
  front.marked = true;
  p.series.push_back(front);
  return p;
}

FigurePanel barsPanel() {
  FigurePanel p;
  p.title = "routed tokens per layer";
  p.x_label = "layer";
  p.y_label = "routed (%)";
  p.bars.categories = {"L0", "L1", "L2", "L3", "L4", "L5"};
  routelab::FigureBars::Member a;
  a.label = "inference";
  a.values = {100, 12.5, 13.1, kNaN, 12.0, 11.8};
  a.errors = {0, 1.0, 1.5, kNaN, 0.5, 0.7};
  routelab::FigureBars::Member b;
  b.label = "training";
  b.color = 1;
  b.values = {100, 12.5, 12.5, 12.5, 12.5, 12.5};
  routelab::FigureBars::Member dense;
  dense.label = "dense layer";
  dense.color = 7;
  dense.hatched = true;
  dense.values = {100, kNaN, kNaN, kNaN, kNaN, kNaN};
  p.bars.members = {a, b, dense};
  return p;
}

FigurePanel heatmapPanel(bool diverging) {
  FigurePanel p;
  p.title = diverging ? "gate difference" : "router gate per token";
  p.y_label = "layer";
  auto& h = p.heatmap;
  h.rows = 4;
  h.cols = 24;
  for (std::size_t r = 0; r < h.rows; ++r) {
    std::string label = "L";  // appended, not "L" + to_string: GCC 12 warns falsely on that (-Wrestrict, PR 105651)
    h.row_labels.push_back(label += std::to_string(r));
    for (std::size_t c = 0; c < h.cols; ++c)
      h.values.push_back(diverging ? std::sin(0.3 * static_cast<double>(c + r)) : static_cast<double>((c * 7 + r * 3) % 11) / 10.0);
  }
  h.values[5] = kNaN;  // an empty cell
  const char* tokens[] = {"The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", "\n",
                          " dog", ".", " A", " very_long_token_label", " is", " cut", "!", " and", " so",
                          " on", " to", " the", " end", " of", " it"};
  for (const char* t : tokens) h.col_labels.push_back(t);
  h.lo = diverging ? -1 : 0;
  h.hi = 1;
  h.colour_label = diverging ? "difference" : "gate";
  h.diverging = diverging;
  return p;
}

Figure figureOf(std::vector<FigurePanel> panels, int columns, double widthCm, double heightCm, double fontPt = 8) {
  Figure f;
  f.name = "test";
  f.panels = std::move(panels);
  f.columns = columns;
  f.width_cm = widthCm;
  f.height_cm = heightCm;
  f.font_pt = fontPt;
  return f;
}

/// Runs a poppler tool; skips the test when it is not installed.
QString runTool(const QString& tool, const QStringList& args, int* exitCode = nullptr) {
  const QString exe = QStandardPaths::findExecutable(tool);
  if (exe.isEmpty()) return QString();
  QProcess process;
  process.start(exe, args);
  if (!process.waitForFinished(60000)) return QString();
  if (exitCode != nullptr) *exitCode = process.exitCode();
  return QString::fromUtf8(process.readAllStandardOutput());
}

#define REQUIRE_TOOL(tool)                                                                          \
  do {                                                                                              \
    if (QStandardPaths::findExecutable(QStringLiteral(tool)).isEmpty())                             \
      QSKIP(tool " is not installed (poppler-utils)");                                              \
  } while (false)

struct PdfFont {
  QString name, type, emb;
};

/// pdffonts' table, cut at the columns of its dashed header line.
QList<PdfFont> pdfFonts(const QString& pdf) {
  const QStringList lines = runTool(QStringLiteral("pdffonts"), {pdf}).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  QList<PdfFont> fonts;
  if (lines.size() < 2) return fonts;
  // "---------- ---- ..." gives the column extents.
  QList<QPair<int, int>> columns;
  const QString& dashes = lines[1];
  for (int i = 0; i < dashes.size();) {
    if (dashes[i] != QLatin1Char('-')) {
      ++i;
      continue;
    }
    int j = i;
    while (j < dashes.size() && dashes[j] == QLatin1Char('-')) ++j;
    columns.append({i, j - i});
    i = j;
  }
  for (int k = 2; k < lines.size(); ++k) {
    auto cell = [&](int c) { return lines[k].mid(columns[c].first, columns[c].second).trimmed(); };
    if (columns.size() < 4) break;
    fonts.append({cell(0), cell(1), cell(3)});
  }
  return fonts;
}

QSizeF pdfPageSizePt(const QString& pdf) {
  const QString info = runTool(QStringLiteral("pdfinfo"), {pdf});
  const auto m = QRegularExpression(QStringLiteral("Page size:\\s+([0-9.]+) x ([0-9.]+) pts")).match(info);
  if (!m.hasMatch()) return {};
  return {m.captured(1).toDouble(), m.captured(2).toDouble()};
}

/// Heights (pt) of the words pdftotext finds, and the words themselves.
QList<QPair<QString, double>> pdfWords(const QString& pdf) {
  const QString html = runTool(QStringLiteral("pdftotext"), {QStringLiteral("-bbox"), pdf, QStringLiteral("-")});
  QList<QPair<QString, double>> words;
  const QRegularExpression re(
      QStringLiteral("<word xMin=\"([0-9.]+)\" yMin=\"([0-9.]+)\" xMax=\"([0-9.]+)\" yMax=\"([0-9.]+)\">([^<]*)</word>"));
  for (auto it = re.globalMatch(html); it.hasNext();) {
    const auto m = it.next();
    words.append({m.captured(5), m.captured(4).toDouble() - m.captured(2).toDouble()});
  }
  return words;
}

/// pdfimages -list without its two header lines: one line per image XObject.
QStringList pdfImages(const QString& pdf) {
  QStringList lines =
      runTool(QStringLiteral("pdfimages"), {QStringLiteral("-list"), pdf}).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  return lines.mid(2);
}

double svgLengthPt(const QString& value) {
  const auto m = QRegularExpression(QStringLiteral("^([0-9.]+)\\s*(mm|cm|pt|in|px)?$")).match(value.trimmed());
  if (!m.hasMatch()) return -1;
  const double v = m.captured(1).toDouble();
  const QString unit = m.captured(2);
  if (unit == QLatin1String("mm")) return v / 10.0 * kPtPerCm;
  if (unit == QLatin1String("cm")) return v * kPtPerCm;
  if (unit == QLatin1String("in")) return v * 72.0;
  if (unit == QLatin1String("pt")) return v;
  return v * 0.75;  // CSS px
}

bool writeText(const QString& path, const std::string& text) {
  std::ofstream out(path.toStdString());
  out << text;
  return static_cast<bool>(out);
}

QString renderBinary() {
  return QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("../app/routelab-render"));
}

}  // namespace

}  // namespace test_figure_export
