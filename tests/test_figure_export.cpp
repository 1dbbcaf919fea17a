// Qt Test suite (offscreen) for figure rendering and physical-size export: PDFs with embedded, non-Type-3 fonts
// at the requested page size and font size (pdffonts, pdfinfo, pdftotext), heat maps as raster images inside
// vector axes (pdfimages), SVG width/height, PNG pixels at a DPI, exportPlot on a live loss plot, the bundle,
// routelab-render on good and malformed sidecars, and every catalogue figure of two short runs of each registered
// architecture drawn to PDF and PNG.
#include <QApplication>
#include <QDialog>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QRegularExpression>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTimer>
#include <QXmlStreamReader>
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/models/registry.h"
#include "core/report/builders/catalog.h"
#include "core/report/figure/figure.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "tests/figure_export_support.h"
#include "tests/suite.h"
#include "tests/train_test_support.h"
#include "ui/figure_render.h"
#include "widgets/loss_plot_widget.h"
#include "widgets/plot_export.h"
#include "widgets/qcustomplot_include.h"

Q_DECLARE_METATYPE(routelab::Figure)

namespace test_figure_export {

using Series = routelab::LossPlotWidget::Series;

class TestFigureExport : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    QCoreApplication::setOrganizationName(QStringLiteral("RouteLabTest"));
  }

  /// A dark palette gives a dark plot (and back); an export still paints black on white.
  void dashboardPlotsFollowThePalette() {
    routelab::LossPlotWidget widget;
    widget.appendTrain({0, 1, 2, 3}, {4, 3, 2, 1});
    QCustomPlot* plot = widget.plot();
    const QColor lightText = plot->xAxis->tickLabelColor();
    QPalette dark = widget.palette();
    dark.setColor(QPalette::Base, QColor(30, 30, 30));
    dark.setColor(QPalette::Text, QColor(230, 230, 230));
    widget.setPalette(dark);  // propagates to the plot as a PaletteChange
    QCOMPARE(plot->xAxis->tickLabelColor(), QColor(230, 230, 230));
    QCOMPARE(plot->yAxis->basePen().color(), QColor(230, 230, 230));

    const QString png = dir_.filePath(QStringLiteral("dark-palette.png"));
    const QString error = routelab::exportPlot(plot, png, 8.5, 6.0, 8.0, 100);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    const QImage image(png);
    QVERIFY(!image.isNull());
    QCOMPARE(image.pixelColor(2, 2), QColor(Qt::white));  // the export's background
    QCOMPARE(plot->xAxis->tickLabelColor(), QColor(230, 230, 230));  // and the screen is dark again

    widget.setPalette(QPalette());
    QCOMPARE(plot->xAxis->tickLabelColor(), lightText);
  }

  /// Not a timed assertion: prints how long a live plot takes to take and draw a million points per series.
  void millionPointsPerSeriesAreMeasured() {
    routelab::LossPlotWidget widget;
    widget.resize(900, 500);
    widget.show();
    QVERIFY(QTest::qWaitForWindowExposed(&widget));
    constexpr int kPoints = 1'000'000, kBatch = 1000;
    QElapsedTimer clock;
    clock.start();
    double longestAppendMs = 0;
    for (int start = 0; start < kPoints; start += kBatch) {  // as a live run delivers them, in batches
      QVector<double> steps(kBatch), loss(kBatch);
      for (int i = 0; i < kBatch; ++i) {
        steps[i] = start + i + 1;
        loss[i] = 4.0 / std::sqrt(1.0 + 0.001 * (start + i)) + 0.05 * std::sin(0.37 * (start + i));
      }
      QElapsedTimer one;
      one.start();
      widget.appendTrain(steps, loss);
      longestAppendMs = std::max(longestAppendMs, one.nsecsElapsed() / 1e6);
    }
    const double appendMs = clock.nsecsElapsed() / 1e6;
    QCOMPARE(widget.pointCount(Series::TrainRaw), kPoints);
    QCOMPARE(widget.pointCount(Series::TrainSmoothed), kPoints);
    for (int i = 0; i < widget.plot()->graphCount(); ++i) QVERIFY(widget.plot()->graph(i)->adaptiveSampling());
    std::vector<double> replots;
    for (int r = 0; r < 5; ++r) {
      clock.restart();
      widget.plot()->replot(QCustomPlot::rpImmediateRefresh);
      replots.push_back(clock.nsecsElapsed() / 1e6);
    }
    std::sort(replots.begin(), replots.end());
    qInfo().noquote() << QStringLiteral("1M points per series (raw + smoothed): appended in %1 ms (longest batch of "
                                        "%2: %3 ms); full replot median %4 ms, max %5 ms")
                             .arg(appendMs, 0, 'f', 0).arg(kBatch).arg(longestAppendMs, 0, 'f', 2)
                             .arg(replots[2], 0, 'f', 1).arg(replots.back(), 0, 'f', 1);
  }

  void pdfFontsEmbeddedNotType3_data() {
    QTest::addColumn<Figure>("figure");
    QTest::newRow("lines+band") << figureOf({linesPanel(false)}, 0, 8.5, 6.0);
    QTest::newRow("bars") << figureOf({barsPanel()}, 0, 8.5, 6.0);
    QTest::newRow("heatmap") << figureOf({heatmapPanel(false)}, 0, 8.5, 4.0);
    QTest::newRow("grid2x2") << figureOf({linesPanel(false), barsPanel(), heatmapPanel(true), linesPanel(true)}, 2,
                                         17.5, 11.0, 9);
    QTest::newRow("log axes") << figureOf({linesPanel(true)}, 0, 8.5, 6.0);
  }

  void pdfFontsEmbeddedNotType3() {
    REQUIRE_TOOL("pdffonts");
    QFETCH(Figure, figure);
    const QString pdf = dir_.filePath(QStringLiteral("fonts_%1.pdf").arg(QTest::currentDataTag()).replace(' ', '_'));
    const QString error = routelab::exportFigure(figure, pdf);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    const QList<PdfFont> fonts = pdfFonts(pdf);
    QVERIFY2(!fonts.isEmpty(), "the PDF has no fonts: text was drawn as paths or not at all");
    for (const PdfFont& f : fonts) {
      qInfo().noquote() << "pdffonts:" << f.name << "|" << f.type << "| emb" << f.emb;
      QVERIFY2(f.emb == QLatin1String("yes"), qPrintable(f.name + QStringLiteral(" is not embedded")));
      QVERIFY2(!f.type.contains(QLatin1String("Type 3")), qPrintable(f.name + QStringLiteral(" is a Type 3 font")));
    }
  }

  void pdfPageSizeIsRequested_data() {
    QTest::addColumn<double>("widthCm");
    QTest::addColumn<double>("heightCm");
    QTest::newRow("one column 8.5 x 6") << 8.5 << 6.0;
    QTest::newRow("two columns 17.5 x 7.3") << 17.5 << 7.3;
  }

  void pdfPageSizeIsRequested() {
    REQUIRE_TOOL("pdfinfo");
    QFETCH(double, widthCm);
    QFETCH(double, heightCm);
    const Figure figure = figureOf({linesPanel(false), barsPanel()}, 0, 8.5, 6.0);
    routelab::FigureExportOptions options;
    options.widthCm = widthCm;
    options.heightCm = heightCm;
    const QString pdf = dir_.filePath(QStringLiteral("size_%1.pdf").arg(widthCm));
    const QString error = routelab::exportFigure(figure, pdf, options);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    const QSizeF page = pdfPageSizePt(pdf);
    qInfo() << "pdfinfo page size (pt):" << page << "requested" << widthCm * kPtPerCm << heightCm * kPtPerCm;
    QVERIFY(std::abs(page.width() - widthCm * kPtPerCm) <= 0.5);
    QVERIFY(std::abs(page.height() - heightCm * kPtPerCm) <= 0.5);
  }

  /// The text in the PDF is the requested point size: word boxes scale with font_pt and match it.
  void pdfTextIsFontPt() {
    REQUIRE_TOOL("pdftotext");
    QList<double> medians;
    for (double pt : {8.0, 12.0}) {
      const Figure figure = figureOf({linesPanel(false)}, 0, 8.5, 6.0, pt);
      const QString pdf = dir_.filePath(QStringLiteral("font_%1.pdf").arg(pt));
      const QString error = routelab::exportFigure(figure, pdf);
      QVERIFY2(error.isEmpty(), qPrintable(error));
      const auto words = pdfWords(pdf);
      QVERIFY2(words.size() >= 5, "expected tick labels, axis labels and legend text in the PDF");
      bool foundLabel = false;
      QList<double> heights;
      for (const auto& w : words) {
        heights.append(w.second);
        if (w.first == QLatin1String("validation")) foundLabel = true;
      }
      QVERIFY2(foundLabel, "the panel title is real text");
      std::sort(heights.begin(), heights.end());
      const double median = heights[heights.size() / 2];
      qInfo() << "font" << pt << "pt: median word box height" << median << "pt";
      // A glyph box is ascent + descent of the font: about 1.0 to 1.25 em for sans fonts.
      QVERIFY(median >= 0.9 * pt && median <= 1.4 * pt);
      medians.append(median);
    }
    QVERIFY(std::abs(medians[1] / medians[0] - 1.5) < 0.08);
  }

  void heatmapIsRasterInVectorAxes() {
    REQUIRE_TOOL("pdfimages");
    REQUIRE_TOOL("pdftotext");
    const QString heat = dir_.filePath(QStringLiteral("heat.pdf"));
    QVERIFY(routelab::exportFigure(figureOf({heatmapPanel(false)}, 0, 8.5, 4.0), heat).isEmpty());
    const QStringList images = pdfImages(heat);
    QVERIFY2(!images.isEmpty(), "the heat map cells are an image XObject");
    for (const QString& image : images) {
      qInfo().noquote() << "pdfimages:" << image.simplified();
      QVERIFY2(!image.contains(QLatin1String(" jpeg ")), "cells are stored lossless, not as JPEG");
    }
    // Axes and labels stay vector: the layer labels are text, not pixels.
    bool rowLabel = false;
    for (const auto& w : pdfWords(heat)) rowLabel = rowLabel || w.first == QLatin1String("L3");
    QVERIFY(rowLabel);
    const QString lines = dir_.filePath(QStringLiteral("lines_only.pdf"));
    QVERIFY(routelab::exportFigure(figureOf({linesPanel(false)}, 0, 8.5, 6.0), lines).isEmpty());
    QCOMPARE(pdfImages(lines).size(), 0);
    // Cell texts (a sweep grid's means) are text inside their cells where each fits, and none where one does not.
    FigurePanel grid;
    auto& cells = grid.heatmap;
    cells.rows = 2, cells.cols = 3, cells.lo = 2.4, cells.hi = 3.1;
    cells.values = {2.9, 2.5, 3.1, 2.4, kNaN, 2.7};
    cells.row_labels = {"0.25", "0.5"}, cells.col_labels = {"1e-3", "3e-3", "1e-2"};
    cells.cell_text = {"2.9", "2.5", "3.1", "[2.4]", "", "2.7"};
    const auto words = [&](const FigurePanel& panel, double width_cm) {
      const QString path = dir_.filePath(QStringLiteral("grid.pdf"));
      QStringList out;
      if (routelab::exportFigure(figureOf({panel}, 0, width_cm, 4.0), path).isEmpty())
        for (const auto& w : pdfWords(path)) out << w.first;
      return out;
    };
    for (const char* text : {"2.9", "[2.4]", "3.1", "2.7"}) QVERIFY2(words(grid, 8.5).contains(text), text);
    QVERIFY(!words(grid, 2.0).contains(QStringLiteral("[2.4]")));  // cells narrower than the text
  }

  void svgHasPhysicalSize() {
    const Figure figure = figureOf({linesPanel(false), heatmapPanel(false)}, 1, 8.5, 9.0);
    for (double widthCm : {8.5, 12.0}) {
      routelab::FigureExportOptions options;
      options.widthCm = widthCm;
      const QString svg = dir_.filePath(QStringLiteral("figure_%1.svg").arg(widthCm));
      const QString error = routelab::exportFigure(figure, svg, options);
      QVERIFY2(error.isEmpty(), qPrintable(error));
      QFile file(svg);
      QVERIFY(file.open(QIODevice::ReadOnly));
      const QByteArray content = file.readAll();
      QXmlStreamReader xml(content);
      while (!xml.atEnd() && !(xml.isStartElement() && xml.name() == QLatin1String("svg"))) xml.readNext();
      QVERIFY(xml.isStartElement());
      const double w = svgLengthPt(xml.attributes().value(QLatin1String("width")).toString());
      const double h = svgLengthPt(xml.attributes().value(QLatin1String("height")).toString());
      qInfo() << "SVG" << xml.attributes().value(QLatin1String("width")) << "x"
              << xml.attributes().value(QLatin1String("height"));
      QVERIFY(std::abs(w - widthCm * kPtPerCm) <= 0.5);
      QVERIFY(std::abs(h - 9.0 * kPtPerCm) <= 0.5);
      QVERIFY(content.contains("<path") || content.contains("<polyline"));
      QVERIFY(content.contains("<text"));
      QVERIFY(content.contains("<image"));  // the heat map
    }
  }

  /// In the SVG each legend line ends before its label starts (QCustomPlot draws a graph's legend line 5 units past
  /// its icon: with a tight icon-text padding it crossed the label's first letters).
  void svgLegendLinesEndBeforeTheirLabels() {
    const Figure figure = figureOf({linesPanel(false)}, 1, 8.5, 6.0);
    const QString svg = dir_.filePath(QStringLiteral("legend.svg"));
    const QString error = routelab::exportFigure(figure, svg);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QFile file(svg);
    QVERIFY(file.open(QIODevice::ReadOnly));
    const QString content = QString::fromUtf8(file.readAll());
    // Horizontal two-point polylines (legend lines, in the same coordinates as the text) and the texts.
    struct Line { double x1, x2, y; };
    QList<Line> lines;
    const QRegularExpression polyline(QStringLiteral(R"re(points="([-\d.]+),([-\d.]+) ([-\d.]+),([-\d.]+) ")re"));
    for (auto it = polyline.globalMatch(content); it.hasNext();) {
      const auto m = it.next();
      if (m.captured(2) == m.captured(4)) lines.append({m.captured(1).toDouble(), m.captured(3).toDouble(), m.captured(2).toDouble()});
    }
    const QRegularExpression text(QStringLiteral(R"re(<text[^>]* x="([-\d.]+)" y="([-\d.]+)"[^>]*>([^<]*)</text>)re"));
    int checked = 0;
    for (const char* label : {"dense", "MoD 12.5%", "DTRNet", "Pareto front"}) {
      for (auto it = text.globalMatch(content); it.hasNext();) {
        const auto m = it.next();
        if (m.captured(3) != QLatin1String(label)) continue;
        const double x = m.captured(1).toDouble(), baseline = m.captured(2).toDouble();
        for (const Line& line : lines)  // the legend line left of the label, on its row
          if (line.y < baseline && line.y > baseline - 10 && line.x1 < x && line.x1 > x - 40) {
            QVERIFY2(line.x2 < x, qPrintable(QStringLiteral("'%1': its legend line ends at %2, the label starts at %3")
                                                 .arg(QLatin1String(label)).arg(line.x2).arg(x)));
            ++checked;
          }
      }
    }
    QVERIFY(checked >= 2);  // points-only series draw a marker, not a line
  }

  void pngHasPixelsForDpi_data() {
    QTest::addColumn<double>("widthCm");
    QTest::addColumn<int>("dpi");
    QTest::newRow("8.5 cm at 150 dpi") << 8.5 << 150;
    QTest::newRow("8.5 cm at 300 dpi") << 8.5 << 300;
    QTest::newRow("17.5 cm at 200 dpi") << 17.5 << 200;
  }

  void pngHasPixelsForDpi() {
    QFETCH(double, widthCm);
    QFETCH(int, dpi);
    routelab::FigureExportOptions options;
    options.widthCm = widthCm;
    options.heightCm = 6.0;
    options.dpi = dpi;
    const QString png = dir_.filePath(QStringLiteral("figure_%1_%2.png").arg(widthCm).arg(dpi));
    const QString error = routelab::exportFigure(figureOf({linesPanel(false), barsPanel()}, 0, 8.5, 6.0), png, options);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QImage image(png);
    QVERIFY(!image.isNull());
    QCOMPARE(image.width(), static_cast<int>(std::lround(widthCm / 2.54 * dpi)));
    QCOMPARE(image.height(), static_cast<int>(std::lround(6.0 / 2.54 * dpi)));
    QVERIFY(std::abs(image.dotsPerMeterX() * 0.0254 - dpi) < 1);
    // Something of the first palette colour (#0072B2) is drawn.
    bool blue = false;
    for (int y = 0; y < image.height() && !blue; y += 2)
      for (int x = 0; x < image.width() && !blue; x += 2) blue = image.pixelColor(x, y) == QColor(0x00, 0x72, 0xB2);
    QVERIFY(blue);
  }

  void exportPlotOnLossPlot() {
    REQUIRE_TOOL("pdfinfo");
    routelab::LossPlotWidget widget;
    widget.resize(640, 400);
    QVector<double> steps, losses;
    for (int i = 1; i <= 200; ++i) {
      steps.push_back(i);
      losses.push_back(3.0 + 2.0 / std::sqrt(i));
    }
    widget.setCurves(steps, losses, {50, 100, 150, 200}, {3.4, 3.25, 3.2, 3.15});
    QCustomPlot* plot = widget.plot();
    const QFont before = plot->xAxis->labelFont();
    const QSize iconBefore = plot->legend->iconSize();
    QFont itemFont = plot->legend->item(0)->font();
    itemFont.setItalic(true);  // differs from the legend's own font: must survive the export
    plot->legend->item(0)->setFont(itemFont);
    const QString pdf = dir_.filePath(QStringLiteral("loss.pdf"));
    const QString error = routelab::exportPlot(plot, pdf, 8.5, 5.0, 9.0, 300);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    const QSizeF page = pdfPageSizePt(pdf);
    QVERIFY(std::abs(page.width() - 8.5 * kPtPerCm) <= 0.5);
    QVERIFY(std::abs(page.height() - 5.0 * kPtPerCm) <= 0.5);
    QCOMPARE(plot->xAxis->labelFont(), before);  // the live plot keeps its fonts and legend geometry
    QCOMPARE(plot->legend->iconSize(), iconBefore);
    QCOMPARE(plot->legend->item(0)->font(), itemFont);
    if (!QStandardPaths::findExecutable(QStringLiteral("pdffonts")).isEmpty()) {
      const auto fonts = pdfFonts(pdf);
      QVERIFY(!fonts.isEmpty());
      for (const auto& f : fonts) QVERIFY(f.emb == QLatin1String("yes") && !f.type.contains(QLatin1String("Type 3")));
    }
    const QString png = dir_.filePath(QStringLiteral("loss.png"));
    QVERIFY(routelab::exportPlot(plot, png, 8.5, 5.0, 9.0, 150).isEmpty());
    QCOMPARE(QImage(png).width(), static_cast<int>(std::lround(8.5 / 2.54 * 150)));
  }

  void exportErrorsNameTheFile() {
    const Figure figure = figureOf({linesPanel(false)}, 0, 8.5, 6.0);
    const QString unknown = dir_.filePath(QStringLiteral("figure.bmpx"));
    const QString e1 = routelab::exportFigure(figure, unknown);
    QVERIFY(e1.contains(QStringLiteral("figure.bmpx")));
    QVERIFY(e1.contains(QStringLiteral("extension")));
    const QString unwritable = dir_.filePath(QStringLiteral("no/such/dir/figure.pdf"));
    const QString e2 = routelab::exportFigure(figure, unwritable);
    QVERIFY(e2.contains(QStringLiteral("figure.pdf")));
    QVERIFY(!QFile::exists(unwritable));
  }

  void bundleWritesAllFiles() {
    const Figure figure = figureOf({linesPanel(false), barsPanel()}, 0, 17.5, 6.0);
    const QString stem = dir_.filePath(QStringLiteral("bundle/fig"));
    QVERIFY(QDir().mkpath(dir_.filePath(QStringLiteral("bundle"))));
    const QString error = routelab::exportFigureBundle(figure, stem);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    for (const char* suffix : {".pdf", ".svg", ".png", ".csv", ".tex", ".json"})
      QVERIFY2(QFileInfo(stem + QLatin1String(suffix)).size() > 0, suffix);
  }

  void renderCommandLine() {
    const QString exe = renderBinary();
    if (!QFileInfo(exe).isExecutable()) QSKIP("routelab-render is not built next to the tests");
    const QString sidecar = dir_.filePath(QStringLiteral("sidecar.json"));
    const Figure figure = figureOf({linesPanel(false), heatmapPanel(false)}, 1, 8.5, 9.0);
    QVERIFY(writeText(sidecar, routelab::to_json(figure).dump()));
    const QString pdf = dir_.filePath(QStringLiteral("rendered.pdf"));
    QProcess process;
    process.start(exe, {sidecar, QStringLiteral("--out"), pdf, QStringLiteral("--width-cm"), QStringLiteral("12")});
    QVERIFY(process.waitForFinished(60000));
    QVERIFY2(process.exitCode() == 0, process.readAllStandardError().constData());
    QVERIFY(QString::fromUtf8(process.readAllStandardOutput()).contains(QStringLiteral("rendered.pdf")));
    QFile file(pdf);
    QVERIFY(file.open(QIODevice::ReadOnly));
    QVERIFY(file.read(5) == "%PDF-");
    if (!QStandardPaths::findExecutable(QStringLiteral("pdfinfo")).isEmpty())
      QVERIFY(std::abs(pdfPageSizePt(pdf).width() - 12 * kPtPerCm) <= 0.5);

    // A malformed sidecar: exit 2 and the key path on stderr.
    nlohmann::json bad = routelab::to_json(figure);
    bad["panels"][0]["series"][1]["dash"] = 9;
    const QString badPath = dir_.filePath(QStringLiteral("bad.json"));
    QVERIFY(writeText(badPath, bad.dump()));
    process.start(exe, {badPath, QStringLiteral("--out"), dir_.filePath(QStringLiteral("bad.pdf"))});
    QVERIFY(process.waitForFinished(60000));
    QCOMPARE(process.exitCode(), 2);
    const QString err = QString::fromUtf8(process.readAllStandardError());
    QVERIFY2(err.contains(QStringLiteral("figure.panels[0].series[1].dash")), qPrintable(err));
    QVERIFY2(err.contains(QStringLiteral("bad.json")), qPrintable(err));
    QVERIFY(!QFile::exists(dir_.filePath(QStringLiteral("bad.pdf"))));

    QVERIFY(writeText(badPath, "{\"panels\": [ {"));
    process.start(exe, {badPath, QStringLiteral("--out"), dir_.filePath(QStringLiteral("bad.pdf"))});
    QVERIFY(process.waitForFinished(60000));
    QCOMPARE(process.exitCode(), 2);
  }

  /// The size dialog starts from the values last accepted and remembers new ones; cancel changes nothing.
  void sizeDialogRemembersSettings() {
    QSettings().remove(QStringLiteral("plotExport"));
    QTimer::singleShot(0, this, [] {
      auto* dialog = qobject_cast<QDialog*>(QApplication::activeModalWidget());
      QVERIFY(dialog != nullptr);
      const auto spins = dialog->findChildren<QDoubleSpinBox*>();
      QCOMPARE(spins.size(), 3);  // width, height, font
      QCOMPARE(spins[0]->value(), 8.5);
      spins[0]->setValue(12.0);
      spins[2]->setValue(9.5);
      dialog->accept();
    });
    routelab::PlotExportSettings settings;
    QVERIFY(routelab::askPlotExportSettings(nullptr, settings));
    QCOMPARE(settings.widthCm, 12.0);
    QCOMPARE(settings.fontPt, 9.5);
    double shownWidth = 0;
    QTimer::singleShot(0, this, [&shownWidth] {
      auto* dialog = qobject_cast<QDialog*>(QApplication::activeModalWidget());
      QVERIFY(dialog != nullptr);
      shownWidth = dialog->findChildren<QDoubleSpinBox*>().value(0)->value();
      dialog->reject();
    });
    routelab::PlotExportSettings fresh;
    QVERIFY(!routelab::askPlotExportSettings(nullptr, fresh));
    QCOMPARE(shownWidth, 12.0);
    QSettings().remove(QStringLiteral("plotExport"));
  }

  void everyFigureRendersForEveryArchitecture_data() {
    QTest::addColumn<QString>("arch");
    for (const auto& entry : routelab::architectures())
      QTest::newRow(entry.id.c_str()) << QString::fromStdString(entry.id);
  }
  /// The conformance suite's figure check drawn for real: every catalogue figure that two short runs of an
  /// architecture give data for exports to PDF and PNG, and the PNG shows more than the background.
  void everyFigureRendersForEveryArchitecture() {
    QFETCH(QString, arch);
    qputenv("ROUTELAB_HOME", dir_.filePath(QStringLiteral("home")).toUtf8());
    const auto& entry = routelab::architecture(arch.toStdString());
    const auto db = dir_.filePath(QStringLiteral("render-%1.sqlite").arg(arch)).toStdString();
    std::vector<std::int64_t> runs;
    for (const int seed : {1, 2}) {
      const auto outcome = routelab::train({routelab::test::short_run_config(entry, seed), db, "render", ""});
      QVERIFY(outcome.status == routelab::RunStatus::Finished);
      runs.push_back(outcome.run_id);
    }
    routelab::RunStore store(db);
    int rendered = 0;
    for (const auto& info : routelab::figure_catalog()) {
      routelab::FigureRequest request;
      request.name = info.name;
      request.run_ids = runs;
      Figure figure;
      try {
        figure = routelab::build_figure(store, request);
      } catch (const routelab::ConfigError&) {
        continue;  // refusals are the conformance suite's to check
      } catch (const routelab::DataError&) {
        continue;
      }
      const auto stem = dir_.filePath(QStringLiteral("%1-%2").arg(arch, QString::fromStdString(info.name)));
      for (const char* ext : {".pdf", ".png"}) {
        const QString path = stem + QString::fromLatin1(ext);
        const auto error = routelab::exportFigure(figure, path);
        QVERIFY2(error.isEmpty(), qPrintable(error));
        QVERIFY2(QFileInfo(path).size() > 0, qPrintable(path));
      }
      QImage image(stem + QStringLiteral(".png"));
      QVERIFY(!image.isNull());
      const auto background = image.pixel(0, 0);
      bool drawn = false;
      for (int y = 0; y < image.height() && !drawn; y += 2)
        for (int x = 0; x < image.width() && !drawn; x += 2) drawn = image.pixel(x, y) != background;
      QVERIFY2(drawn, qPrintable(stem + QStringLiteral(".png is blank")));
      ++rendered;
    }
    qInfo("%s: %d figures rendered", qPrintable(arch), rendered);
    QVERIFY(rendered >= 3);  // curves, matched and pareto apply to every run
  }

  void legendsCoverNoData_data() {
    QTest::addColumn<QSize>("pixels");
    QTest::newRow("exported column, 8.5 x 6 cm at 96 dpi") << QSize(321, 227);
    QTest::newRow("dashboard panel") << QSize(420, 260);
    QTest::newRow("compare view") << QSize(900, 480);
  }
  /// A loss spike at the end of a curve (where the top-right legend sits) and bars to 100%: each legend is placed
  /// where no point, line segment or bar top lies under it.
  void legendsCoverNoData() {
    QFETCH(QSize, pixels);
    FigurePanel lines = linesPanel(false);
    lines.series[2].y.back() = 9.0;  // the spike
    Figure figure = figureOf({lines, barsPanel()}, 2, 17.0, 6.0);
    QCustomPlot plot;
    plot.resize(pixels.width() * 2, pixels.height());
    routelab::renderFigure(&plot, figure);
    plot.replot();
    QList<QCPLegend*> legends;
    for (QCPAxisRect* rect : plot.axisRects())
      for (int i = 0; i < rect->insetLayout()->elementCount(); ++i)
        if (auto* legend = qobject_cast<QCPLegend*>(rect->insetLayout()->elementAt(i))) legends << legend;
    QVERIFY(!legends.isEmpty());
    // The lines panel has point series (markers): its x axis leaves a margin beyond the first and last x (100, 4000)
    // so that they are drawn whole.
    QVERIFY(plot.graphCount() > 0);
    const QCPRange x = plot.graph(0)->keyAxis()->range();
    QVERIFY2(x.lower < 100 && x.upper > 4000, qPrintable(QStringLiteral("%1 .. %2").arg(x.lower).arg(x.upper)));
    int checked = 0;
    for (QCPLegend* legend : legends) {
      const QRectF box = legend->outerRect();
      for (int i = 0; i < plot.graphCount(); ++i) {
        const QCPGraph* graph = plot.graph(i);
        if (!graph->visible() || graph->keyAxis()->axisRect()->rect().intersected(box.toRect()).isEmpty()) continue;
        for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
          if (!std::isfinite(it->value)) continue;
          const QPointF point = graph->coordsToPixels(it->key, it->value);
          QVERIFY2(!box.contains(point), qPrintable(QStringLiteral("a point of '%1' at (%2, %3) under the legend")
                                                          .arg(graph->name()).arg(it->key).arg(it->value)));
          ++checked;
        }
      }
      for (int i = 0; i < plot.plottableCount(); ++i) {
        auto* bars = qobject_cast<QCPBars*>(plot.plottable(i));
        if (!bars || bars->keyAxis()->axisRect()->rect().intersected(box.toRect()).isEmpty()) continue;
        for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it) {
          if (!std::isfinite(it->value)) continue;
          const QPointF top = bars->coordsToPixels(it->key, it->value);
          QVERIFY2(!box.contains(top), qPrintable(QStringLiteral("bar '%1' at %2 under the legend").arg(bars->name()).arg(it->key)));
          ++checked;
        }
      }
    }
    QVERIFY(checked > 0);
  }

  /// A heat map with more rows than room for their labels: the rows that hold data are the labelled ones (routed
  /// layers 1, 3, 5 of 8 were drawn under the labels L0, L2, L4, L6).
  void heatmapLabelsTheRowsWithData() {
    FigurePanel p;
    p.title = "routed share";
    auto& h = p.heatmap;
    h.rows = 8;
    h.cols = 10;
    for (std::size_t r = 0; r < h.rows; ++r) {
      std::string label = "L";
      h.row_labels.push_back(label += std::to_string(r));
      for (std::size_t c = 0; c < h.cols; ++c) h.values.push_back(r % 2 == 1 ? 0.1 * static_cast<double>(c) : kNaN);
    }
    QCustomPlot plot;
    plot.resize(400, 120);
    routelab::renderFigure(&plot, figureOf({p}, 1, 10.0, 3.2));
    plot.replot();
    QCPAxis* y = plot.axisRect(0)->axis(QCPAxis::atLeft);
    const auto ticker = y->ticker().dynamicCast<QCPAxisTickerText>();
    QVERIFY(ticker);
    QStringList labels;
    for (auto it = ticker->ticks().constBegin(); it != ticker->ticks().constEnd(); ++it) labels << it.value();
    QVERIFY2(labels.size() < 8, qPrintable(labels.join(QLatin1Char(' '))));  // too little room for all eight
    QCOMPARE(labels, (QStringList{"L1", "L3", "L5", "L7"}));
  }

  void figureViewShowsFigure() {
    routelab::FigureView view;
    view.resize(600, 400);
    view.setFigure(figureOf({linesPanel(false), barsPanel(), heatmapPanel(false)}, 2, 17.5, 11.0));
    QCOMPARE(view.plot()->axisRectCount(), 3);
    QVERIFY(view.plot()->graphCount() >= 6);  // band pair + five series
    QVERIFY(view.findChild<QAction*>(QStringLiteral("exportFigure")) != nullptr);
  }

 private:
  QTemporaryDir dir_;
};

}  // namespace test_figure_export

ROUTELAB_TEST_SUITE(test_figure_export, TestFigureExport)
#include "test_figure_export.moc"
