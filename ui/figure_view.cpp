// FigureView: a catalogue figure on screen (renderFigure's screen target) under a caption, with its export dialog.
#include <QAction>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QSettings>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

#include "ui/figure_render.h"
#include "widgets/plot_export.h"
#include "widgets/plot_hover.h"
#include "widgets/qcustomplot_include.h"

namespace routelab {

FigureView::FigureView(QWidget* parent) : QWidget(parent) {
  plot_ = new QCustomPlot(this);
  plot_->setObjectName(QStringLiteral("figurePlot"));
  installPlotHoverReadout(plot_);
  plot_->setMinimumSize(220, 130);
  relayout_ = new QTimer(this);
  relayout_->setSingleShot(true);
  relayout_->setInterval(60);
  connect(relayout_, &QTimer::timeout, this, &FigureView::render);
  caption_ = new QLabel(this);
  // One line, clipped in a narrow panel; the tooltip has the whole caption and how the figure was computed.
  caption_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  caption_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  caption_->setVisible(false);
  auto* exportAction = new QAction(tr("Export figure…"), this);
  exportAction->setObjectName(QStringLiteral("exportFigure"));
  exportAction->setToolTip(tr("PDF, SVG, PNG or a bundle with CSV, pgfplots and JSON, at a size in cm"));
  connect(exportAction, &QAction::triggered, this, &FigureView::exportWithDialog);
  auto* exportButton = new QToolButton(this);
  exportButton->setDefaultAction(exportAction);
  exportButton->setAutoRaise(true);
  plot_->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(plot_, &QWidget::customContextMenuRequested, this, [this, exportAction](const QPoint& position) {
    QMenu menu(this);
    menu.addAction(exportAction);
    menu.exec(plot_->mapToGlobal(position));
  });
  auto* header = new QHBoxLayout;
  header->setContentsMargins(2, 0, 0, 0);
  header->addWidget(caption_, 1);
  header->addStretch(0);
  header->addWidget(exportButton, 0, Qt::AlignTop);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);
  layout->addLayout(header);
  layout->addWidget(plot_, 1);
  renderFigure(plot_, figure_);
}

void FigureView::setCaption(const QString& caption, const QString& toolTip) {
  caption_->setText(caption);
  caption_->setToolTip(toolTip.isEmpty() ? caption : caption + QStringLiteral("\n\n") + toolTip);
  caption_->setVisible(!caption.isEmpty());
}

QString FigureView::caption() const { return caption_->text(); }

void FigureView::setFigure(Figure figure) {
  figure_ = std::move(figure);
  render();
}

void FigureView::render() {
  renderFigure(plot_, figure_, RenderTarget::Screen);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void FigureView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  if (!figure_.panels.empty()) relayout_->start();
}

void FigureView::exportWithDialog() {
  QSettings store;
  const QString pdf = tr("PDF (*.pdf)"), svg = tr("SVG (*.svg)"), png = tr("PNG (*.png)");
  const QString bundle = tr("Bundle: PDF, SVG, PNG, CSV, pgfplots, JSON (*)");
  const QString name = figure_.name.empty() ? QStringLiteral("figure") : QString::fromStdString(figure_.name);
  QString filter = pdf;
  const QString dir = store.value(QStringLiteral("plotExport/dir")).toString();
  QString path = QFileDialog::getSaveFileName(this, tr("Export figure"), QDir(dir).filePath(name + QStringLiteral(".pdf")),
                                              QStringList{pdf, svg, png, bundle}.join(QStringLiteral(";;")), &filter);
  if (path.isEmpty()) return;
  store.setValue(QStringLiteral("plotExport/dir"), QFileInfo(path).absolutePath());
  const bool isBundle = filter == bundle;
  const QFileInfo info(path);
  if (isBundle) {
    if (isPlotExportFormat(info.suffix())) path = info.dir().filePath(info.completeBaseName());
  } else if (!isPlotExportFormat(info.suffix())) {
    path += filter == svg ? QStringLiteral(".svg") : filter == png ? QStringLiteral(".png") : QStringLiteral(".pdf");
  }
  PlotExportSettings settings;
  settings.widthCm = figure_.width_cm;
  settings.heightCm = figure_.height_cm;
  settings.fontPt = figure_.font_pt;
  if (!askPlotExportSettings(this, settings)) return;
  FigureExportOptions options;
  options.widthCm = settings.widthCm;
  options.heightCm = settings.heightCm;
  options.fontPt = settings.fontPt;
  options.dpi = settings.dpi;
  const QString error = isBundle ? exportFigureBundle(figure_, path, options) : exportFigure(figure_, path, options);
  if (!error.isEmpty()) {
    QMessageBox::warning(this, tr("Export figure"), error);
    return;
  }
  Q_EMIT exported(path);
}

}  // namespace routelab
