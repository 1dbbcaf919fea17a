// Physical-size export of a QCustomPlot. The plot is laid out in a logical space of one unit per point
// (viewport = size in pt) and drawn through a window transform onto the target device. Fonts are the subtle part:
// QCustomPlot measures text with QFontMetrics(font), which resolves point sizes at the screen's logical DPI (D),
// while drawing resolves them at the device's DPI. Every device here therefore runs at D (PDF and SVG resolution,
// the QImage's dots per metre while painting), and every font is set to fontPt * 72 / D points, i.e. fontPt
// logical units = fontPt points on paper. Measurement and drawing then agree, nothing is clipped, and the PDF
// holds real (embedded TrueType) text at fontPt.
#include "widgets/plot_export.h"

#include <QComboBox>
#include <QCoreApplication>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGuiApplication>
#include <QImage>
#include <QMenu>
#include <QMessageBox>
#include <QPageLayout>
#include <QPageSize>
#include <QPdfWriter>
#include <QScreen>
#include <QSettings>
#include <QSpinBox>
#include <QSvgGenerator>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "widgets/plot_theme.h"
#include "widgets/qcustomplot_include.h"

namespace routelab {
namespace {

QString tr(const char* text) { return QCoreApplication::translate("PlotExport", text); }

constexpr double kCmPerInch = 2.54;
constexpr double kPtPerInch = 72.0;

/// The DPI at which an unbound QFont resolves point sizes (Qt's qt_defaultDpiY): what QFontMetrics(font) uses.
int fontResolutionDpi() {
  if (QCoreApplication::testAttribute(Qt::AA_Use96Dpi)) return 96;
  if (const QScreen* screen = QGuiApplication::primaryScreen())
    return std::max(1, qRound(screen->logicalDotsPerInchY()));
  return 100;
}

/// Paints black on white for the duration of an export when the plot follows a dark palette, then restores it.
class LightTheme {
 public:
  explicit LightTheme(QCustomPlot* plot) : plot_(plot), dark_(followsPalette(plot) && isDarkPalette(plot->palette())) {
    if (dark_) applyPlotTheme(plot_, lightPlotPalette());
  }
  ~LightTheme() {
    if (dark_) applyPlotTheme(plot_, plot_->palette());
  }
  LightTheme(const LightTheme&) = delete;
  LightTheme& operator=(const LightTheme&) = delete;

 private:
  QCustomPlot* plot_;
  bool dark_;
};

/// Sets every text of a plot to one size (and legends to paper proportions) for the duration of an export,
/// and restores the old fonts and legend geometry after.
class FontOverride {
 public:
  FontOverride(QCustomPlot* plot, double fontPt, int dpi) : fontPt_(fontPt), dpi_(dpi) {
    const QList<QCPLayoutElement*> elements = plot->plotLayout()->elements(true);
    for (QCPLayoutElement* element : elements) {
      if (element == nullptr) continue;
      if (auto* rect = qobject_cast<QCPAxisRect*>(element)) {
        for (QCPAxis* axis : rect->axes()) override(axis);
      } else if (auto* scale = qobject_cast<QCPColorScale*>(element)) {
        override(scale->axis());
      } else if (auto* text = qobject_cast<QCPTextElement*>(element)) {
        apply(text->font(), [text](const QFont& f) { text->setFont(f); });
      } else if (auto* legend = qobject_cast<QCPLegend*>(element)) {
        compact(legend);
        // QCPLegend::setFont also sets its items, so the items are restored after the legend: restore runs in
        // reverse order, hence the items are overridden before it.
        for (int i = 0; i < legend->itemCount(); ++i) {
          QCPAbstractLegendItem* item = legend->item(i);
          if (item != nullptr) apply(item->font(), [item](const QFont& f) { item->setFont(f); });
        }
        apply(legend->font(), [legend](const QFont& f) { legend->setFont(f); });
      }
    }
    for (int i = 0; i < plot->itemCount(); ++i) {
      if (auto* text = qobject_cast<QCPItemText*>(plot->item(i)))
        apply(text->font(), [text](const QFont& f) { text->setFont(f); });
    }
  }

  ~FontOverride() {
    for (auto it = restore_.rbegin(); it != restore_.rend(); ++it) (*it)();
  }

  FontOverride(const FontOverride&) = delete;
  FontOverride& operator=(const FontOverride&) = delete;

 private:
  void override(QCPAxis* axis) {
    if (axis == nullptr) return;
    apply(axis->labelFont(), [axis](const QFont& f) { axis->setLabelFont(f); });
    apply(axis->tickLabelFont(), [axis](const QFont& f) { axis->setTickLabelFont(f); });
  }

  /// A screen legend (32 x 18 px icons, wide margins) would cover half of a one-column figure: shrink its
  /// geometry to paper proportions for the export, never growing what is already small.
  void compact(QCPLegend* legend) {
    const QSize icon = legend->iconSize();
    const int padding = legend->iconTextPadding();
    const int rowSpacing = legend->rowSpacing();
    const QMargins margins = legend->margins();
    legend->setIconSize(std::min(icon.width(), 14), std::min(icon.height(), 6));
    // Not below 7: a graph's legend line runs 5 units past its icon (QCPGraph::drawLegendIcon) and would cross
    // the first letters of its label.
    legend->setIconTextPadding(std::min(padding, 7));
    legend->setRowSpacing(std::min(rowSpacing, 0));
    legend->setMargins(QMargins(std::min(margins.left(), 3), std::min(margins.top(), 1), std::min(margins.right(), 3),
                                std::min(margins.bottom(), 1)));
    restore_.push_back([legend, icon, padding, rowSpacing, margins] {
      legend->setIconSize(icon);
      legend->setIconTextPadding(padding);
      legend->setRowSpacing(rowSpacing);
      legend->setMargins(margins);
    });
    for (int i = 0; i < legend->itemCount(); ++i) {
      QCPAbstractLegendItem* item = legend->item(i);
      if (item == nullptr) continue;
      const QMargins old = item->margins();
      item->setMargins(QMargins(std::min(old.left(), 2), std::min(old.top(), 1), std::min(old.right(), 2),
                                std::min(old.bottom(), 1)));
      restore_.push_back([item, old] { item->setMargins(old); });
    }
  }

  void apply(const QFont& old, std::function<void(const QFont&)> set) {
    double pt = fontPt_;
    if (!(pt > 0)) pt = old.pointSizeF() > 0 ? old.pointSizeF() : old.pixelSize() * kPtPerInch / dpi_;
    QFont font = old;
    font.setPointSizeF(pt * kPtPerInch / dpi_);
    // Unhinted outlines: the layout is measured at a few logical pixels per glyph; hinting would distort it.
    font.setHintingPreference(QFont::PreferNoHinting);
    set(font);
    restore_.push_back([set, old] { set(old); });
  }

  double fontPt_;
  int dpi_;
  std::vector<std::function<void()>> restore_;
};

QString failure(const QString& path, const QString& what) {
  return tr("cannot export '%1': %2").arg(QDir::toNativeSeparators(path), what);
}

}  // namespace

bool isPlotExportFormat(const QString& suffix) {
  const QString s = suffix.toLower();
  return s == QLatin1String("pdf") || s == QLatin1String("svg") || s == QLatin1String("png");
}

QString exportPlot(QCustomPlot* plot, const QString& path, double widthCm, double heightCm, double fontPt,
                   int dpi) {
  if (plot == nullptr) return failure(path, tr("no plot"));
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (!isPlotExportFormat(suffix))
    return failure(path, tr("unknown extension '%1' (known: pdf, svg, png)").arg(QFileInfo(path).suffix()));
  if (!(widthCm > 0) || !(heightCm > 0) || widthCm > 500 || heightCm > 500)
    return failure(path, tr("width and height must be in (0, 500] cm, got %1 x %2").arg(widthCm).arg(heightCm));
  if (suffix == QLatin1String("png") && (dpi < 10 || dpi > 2400))
    return failure(path, tr("dpi must be in [10, 2400], got %1").arg(dpi));

  QFile file(path);
  if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate)) return failure(path, file.errorString());

  const double widthPt = widthCm / kCmPerInch * kPtPerInch;
  const double heightPt = heightCm / kCmPerInch * kPtPerInch;
  // The plot's layout space: one unit per point (QCustomPlot's viewport is an integer rectangle).
  const QRect logical(0, 0, std::max(1, qRound(widthPt)), std::max(1, qRound(heightPt)));
  const int fontDpi = fontResolutionDpi();

  bool painted = false;
  QString error;
  {
    LightTheme light(plot);
    FontOverride fonts(plot, fontPt, fontDpi);
    QCPPainter painter;
    if (suffix == QLatin1String("pdf")) {
      QPdfWriter writer(&file);
      writer.setResolution(fontDpi);
      writer.setCreator(QStringLiteral("RouteLab"));
      writer.setTitle(QFileInfo(path).completeBaseName());
      writer.setPageLayout(QPageLayout(
          QPageSize(QSizeF(widthPt, heightPt), QPageSize::Point, QString(), QPageSize::ExactMatch),
          QPageLayout::Portrait, QMarginsF(0, 0, 0, 0), QPageLayout::Point));
      if (painter.begin(&writer)) {
        painter.setMode(QCPPainter::pmVectorized);
        painter.setMode(QCPPainter::pmNonCosmetic);
        // Heat-map cells and colour scales as Flate (lossless) images: Qt would use JPEG by default.
        painter.setRenderHint(QPainter::LosslessImageRendering);
        painter.setWindow(logical);
        plot->toPainter(&painter, logical.width(), logical.height());
        painted = painter.end();
      }
    } else if (suffix == QLatin1String("svg")) {
      QSvgGenerator generator;
      generator.setOutputDevice(&file);
      generator.setResolution(fontDpi);
      const QSize device(std::max(1, qRound(widthPt / kPtPerInch * fontDpi)),
                         std::max(1, qRound(heightPt / kPtPerInch * fontDpi)));
      generator.setSize(device);
      generator.setViewBox(QRect(QPoint(0, 0), device));
      generator.setTitle(QFileInfo(path).completeBaseName());
      generator.setDescription(QStringLiteral("RouteLab plot, %1 x %2 cm").arg(widthCm).arg(heightCm));
      if (painter.begin(&generator)) {
        painter.setMode(QCPPainter::pmVectorized);
        painter.setMode(QCPPainter::pmNonCosmetic);
        painter.setWindow(logical);
        plot->toPainter(&painter, logical.width(), logical.height());
        painted = painter.end();
      }
    } else {
      const QSize pixels(std::max(1, qRound(widthCm / kCmPerInch * dpi)),
                         std::max(1, qRound(heightCm / kCmPerInch * dpi)));
      QImage image(pixels, QImage::Format_ARGB32_Premultiplied);
      // Paint at the font DPI (see the file comment), then stamp the export DPI into the PNG.
      image.setDotsPerMeterX(qRound(fontDpi / 0.0254));
      image.setDotsPerMeterY(qRound(fontDpi / 0.0254));
      image.fill(Qt::white);
      if (painter.begin(&image)) {
        painter.setMode(QCPPainter::pmNonCosmetic);
        painter.setWindow(logical);
        plot->toPainter(&painter, logical.width(), logical.height());
        painted = painter.end();
      }
      if (painted) {
        image.setDotsPerMeterX(qRound(dpi / 0.0254));
        image.setDotsPerMeterY(qRound(dpi / 0.0254));
        painted = image.save(&file, "PNG");
        if (!painted) error = tr("PNG encoding failed (%1 x %2 px)").arg(pixels.width()).arg(pixels.height());
      }
    }
  }
  // The fonts are back: lay the plot out again at its own size.
  plot->replot(QCustomPlot::rpQueuedReplot);

  if (painted && file.error() != QFileDevice::NoError) {
    painted = false;
    error = file.errorString();
  }
  file.close();
  if (!painted) {
    file.remove();
    return failure(path, error.isEmpty() ? tr("could not paint the %1 file").arg(suffix.toUpper()) : error);
  }
  return QString();
}

QString exportPlot(QCustomPlot* plot, const QString& path, const PlotExportSettings& settings) {
  return exportPlot(plot, path, settings.widthCm, settings.heightCm, settings.fontPt, settings.dpi);
}

bool askPlotExportSettings(QWidget* parent, PlotExportSettings& settings, bool remembered) {
  QSettings store;
  if (remembered) {
    settings.widthCm = store.value(QStringLiteral("plotExport/widthCm"), settings.widthCm).toDouble();
    settings.heightCm = store.value(QStringLiteral("plotExport/heightCm"), settings.heightCm).toDouble();
    settings.fontPt = store.value(QStringLiteral("plotExport/fontPt"), settings.fontPt).toDouble();
    settings.dpi = store.value(QStringLiteral("plotExport/dpi"), settings.dpi).toInt();
  }
  QDialog dialog(parent);
  dialog.setWindowTitle(tr("Export size"));
  auto* width = new QDoubleSpinBox(&dialog);
  width->setRange(0.4, 100);
  width->setDecimals(2);
  width->setSingleStep(0.5);
  width->setSuffix(tr(" cm"));
  width->setValue(settings.widthCm);
  width->setToolTip(tr("8.5 cm: one column of a two-column paper; 17.5 cm: the full text width"));
  auto* height = new QDoubleSpinBox(&dialog);
  height->setRange(0.4, 100);
  height->setDecimals(2);
  height->setSingleStep(0.5);
  height->setSuffix(tr(" cm"));
  height->setValue(settings.heightCm);
  // Width and height in cm or inches; `settings` stays in cm.
  auto* unit = new QComboBox(&dialog);
  unit->addItem(tr("cm"), 1.0);
  unit->addItem(tr("inches"), kCmPerInch);
  unit->setObjectName(QStringLiteral("plotExportUnit"));
  auto cmPerUnit = [unit] { return unit->currentData().toDouble(); };
  QObject::connect(unit, qOverload<int>(&QComboBox::currentIndexChanged), &dialog,
                   [width, height, cmPerUnit, previous = 1.0](int) mutable {
                     const double factor = previous / cmPerUnit();
                     previous = cmPerUnit();
                     const QString suffix = previous == 1.0 ? tr(" cm") : tr(" in");
                     for (QDoubleSpinBox* box : {width, height}) {
                       box->setSuffix(suffix);
                       box->setValue(box->value() * factor);
                     }
                   });
  if (remembered && store.value(QStringLiteral("plotExport/unit")).toString() == QLatin1String("in"))
    unit->setCurrentIndex(1);
  auto* font = new QDoubleSpinBox(&dialog);
  font->setRange(4, 36);
  font->setDecimals(1);
  font->setSingleStep(0.5);
  font->setSuffix(tr(" pt"));
  font->setValue(settings.fontPt > 0 ? settings.fontPt : 8.0);
  font->setToolTip(tr("Every text of the figure; match the caption font of the paper (8-10 pt)"));
  auto* dpi = new QSpinBox(&dialog);
  dpi->setRange(50, 1200);
  dpi->setSingleStep(50);
  dpi->setValue(settings.dpi);
  dpi->setToolTip(tr("PNG only; PDF and SVG are vector files"));
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
  QObject::connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
  QObject::connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
  auto* form = new QFormLayout(&dialog);
  form->addRow(tr("Unit"), unit);
  form->addRow(tr("Width"), width);
  form->addRow(tr("Height"), height);
  form->addRow(tr("Font size"), font);
  form->addRow(tr("PNG resolution (DPI)"), dpi);
  form->addRow(buttons);
  if (dialog.exec() != QDialog::Accepted) return false;
  settings.widthCm = width->value() * cmPerUnit();
  settings.heightCm = height->value() * cmPerUnit();
  store.setValue(QStringLiteral("plotExport/unit"), unit->currentIndex() == 1 ? QStringLiteral("in") : QStringLiteral("cm"));
  settings.fontPt = font->value();
  settings.dpi = dpi->value();
  store.setValue(QStringLiteral("plotExport/widthCm"), settings.widthCm);
  store.setValue(QStringLiteral("plotExport/heightCm"), settings.heightCm);
  store.setValue(QStringLiteral("plotExport/fontPt"), settings.fontPt);
  store.setValue(QStringLiteral("plotExport/dpi"), settings.dpi);
  return true;
}

QString exportPlotWithDialog(QCustomPlot* plot, QWidget* parent) {
  QSettings store;
  const QString dir = store.value(QStringLiteral("plotExport/dir")).toString();
  const QString pdf = tr("PDF (*.pdf)"), svg = tr("SVG (*.svg)"), png = tr("PNG (*.png)");
  QString filter = pdf;
  QString path = QFileDialog::getSaveFileName(parent, tr("Export plot"), QDir(dir).filePath(QStringLiteral("plot.pdf")),
                                              pdf + QStringLiteral(";;") + svg + QStringLiteral(";;") + png, &filter);
  if (path.isEmpty()) return QString();
  if (!isPlotExportFormat(QFileInfo(path).suffix()))
    path += filter == svg ? QStringLiteral(".svg") : filter == png ? QStringLiteral(".png") : QStringLiteral(".pdf");
  store.setValue(QStringLiteral("plotExport/dir"), QFileInfo(path).absolutePath());
  PlotExportSettings settings;
  if (!askPlotExportSettings(parent, settings)) return QString();
  const QString error = exportPlot(plot, path, settings);
  if (!error.isEmpty()) {
    QMessageBox::warning(parent, tr("Export plot"), error);
    return QString();
  }
  return path;
}

void addExportMenu(QCustomPlot* plot, QWidget* owner) {
  if (plot == nullptr) return;
  plot->setContextMenuPolicy(Qt::CustomContextMenu);
  QObject::connect(plot, &QWidget::customContextMenuRequested, owner != nullptr ? owner : plot,
                   [plot, owner](const QPoint& position) {
                     QMenu menu(owner != nullptr ? owner : plot);
                     menu.addAction(tr("Export plot…"), [plot, owner] {
                       exportPlotWithDialog(plot, owner != nullptr ? owner : plot);
                     });
                     menu.exec(plot->mapToGlobal(position));
                   });
}

}  // namespace routelab
