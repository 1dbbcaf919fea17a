// LogViewWidget: appends batches of lines as coloured HTML blocks into a QPlainTextEdit with a block limit.
#include "widgets/log_view_widget.h"

#include <QComboBox>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollBar>
#include <QVBoxLayout>

namespace routelab {
namespace {

QString colourOf(LogViewWidget::Level level) {
  switch (level) {
    case LogViewWidget::Level::Trace:
    case LogViewWidget::Level::Debug: return QStringLiteral("#7f7f7f");
    case LogViewWidget::Level::Info: return QString();
    case LogViewWidget::Level::Warning: return QStringLiteral("#b36b00");
    case LogViewWidget::Level::Error:
    case LogViewWidget::Level::Critical: return QStringLiteral("#c0392b");
  }
  return QString();
}

}  // namespace

LogViewWidget::LogViewWidget(QWidget* parent) : QWidget(parent) {
  view_ = new QPlainTextEdit(this);
  view_->setObjectName(QStringLiteral("logView"));
  view_->setReadOnly(true);
  view_->setLineWrapMode(QPlainTextEdit::NoWrap);
  view_->setMaximumBlockCount(maximumLines_);
  view_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  view_->setMinimumHeight(view_->fontMetrics().lineSpacing() * 3 + 8);  // a strip of three lines may do

  levelFilter_ = new QComboBox(this);
  levelFilter_->setObjectName(QStringLiteral("logLevelFilter"));
  levelFilter_->addItem(tr("debug and above"), static_cast<int>(Level::Debug));
  levelFilter_->addItem(tr("info and above"), static_cast<int>(Level::Info));
  levelFilter_->addItem(tr("warnings and errors"), static_cast<int>(Level::Warning));
  levelFilter_->addItem(tr("errors only"), static_cast<int>(Level::Error));
  levelFilter_->setCurrentIndex(1);
  auto* clearButton = new QPushButton(tr("Clear"), this);

  auto* bar = new QHBoxLayout;
  bar->setContentsMargins(4, 2, 4, 0);
  bar->addWidget(new QLabel(tr("Show"), this));
  bar->addWidget(levelFilter_);
  bar->addStretch(1);
  bar->addWidget(clearButton);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  layout->addLayout(bar);
  layout->addWidget(view_, 1);

  connect(levelFilter_, &QComboBox::currentIndexChanged, this, [this](int) { refilter(); });
  connect(clearButton, &QPushButton::clicked, this, &LogViewWidget::clear);
}

void LogViewWidget::appendLines(const QList<Line>& lines) {
  if (lines.isEmpty()) return;
  history_.append(lines);
  if (history_.size() > maximumLines_) history_.erase(history_.begin(), history_.end() - maximumLines_);
  appendToView(lines);
}

void LogViewWidget::clear() {
  history_.clear();
  view_->clear();
}

void LogViewWidget::setMaximumLines(int lines) {
  maximumLines_ = std::max(1, lines);
  view_->setMaximumBlockCount(maximumLines_);
  if (history_.size() > maximumLines_) history_.erase(history_.begin(), history_.end() - maximumLines_);
}

int LogViewWidget::lineCount() const { return view_->document()->isEmpty() ? 0 : view_->blockCount(); }

QString LogViewWidget::plainText() const { return view_->toPlainText(); }

void LogViewWidget::appendToView(const QList<Line>& lines) {
  const auto minimum = static_cast<Level>(levelFilter_->currentData().toInt());
  QScrollBar* bar = view_->verticalScrollBar();
  const bool atBottom = bar->value() >= bar->maximum() - 2;
  const int keep = bar->value();
  for (const Line& line : lines) {
    if (line.level < minimum) continue;
    const QString colour = colourOf(line.level);
    const QString escaped = line.text.toHtmlEscaped();
    view_->appendHtml(colour.isEmpty() ? QStringLiteral("<span>%1</span>").arg(escaped)
                                       : QStringLiteral("<span style=\"color:%1\">%2</span>").arg(colour, escaped));
  }
  // Follow new lines only when the user was already at the end.
  bar->setValue(atBottom ? bar->maximum() : keep);
}

void LogViewWidget::refilter() {
  view_->clear();
  appendToView(history_);
}

}  // namespace routelab
