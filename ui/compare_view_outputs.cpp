// CompareView's outputs under the figure: the table and the config diff, shown, copied and saved.
#include "ui/compare_view.h"

#include <QClipboard>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFont>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QRegularExpression>
#include <QStandardItemModel>
#include <QTableView>
#include <QVBoxLayout>

#include "core/report/tables/table.h"

namespace routelab {
namespace {

QString cellText(const CellSummary& cell, const TableColumn& column) {
  QString text = QString::number(cell.mean * column.scale, 'f', column.precision);
  if (cell.n > 1) text += QStringLiteral(" ± ") + QString::number(cell.std * column.scale, 'f', column.precision);
  return text;
}

}  // namespace

QTableView* CompareView::readOnlyTable(QStandardItemModel* model, const QString& name) {
  auto* view = new QTableView(this);
  view->setObjectName(name);
  view->setModel(model);
  view->setEditTriggers(QAbstractItemView::NoEditTriggers);
  view->setTabKeyNavigation(false);  // Tab leaves the table
  view->verticalHeader()->hide();
  return view;
}

QWidget* CompareView::buildDiffPage(QPushButton** copyDiff) {
  diffModel_ = new QStandardItemModel(this);
  diffView_ = readOnlyTable(diffModel_, QStringLiteral("compareDiffTable"));
  diffSummary_ = new QLabel(this);
  *copyDiff = new QPushButton(tr("Copy diff"), this);
  auto* diffPage = new QWidget(this);
  auto* diffLayout = new QVBoxLayout(diffPage);
  diffLayout->setContentsMargins(2, 2, 2, 2);
  diffLayout->addWidget(diffView_, 1);
  auto* diffButtons = new QHBoxLayout;
  diffButtons->addWidget(diffSummary_, 1);
  diffButtons->addWidget(*copyDiff);
  diffLayout->addLayout(diffButtons);
  return diffPage;
}

void CompareView::showTable() {
  matchedModel_->clear();
  copyLatex_->setEnabled(table_.has_value());
  saveTable_->setEnabled(table_.has_value());
  if (!table_) {
    matchedModel_->setHorizontalHeaderLabels({tr("No table: see the status line")});
    return;
  }
  const ReportTable& table = *table_;
  QStringList headers{QString::fromStdString(table.row_header)};
  for (const TableColumn& column : table.columns) {
    QString header = QString::fromStdString(column.header);
    if (!column.unit.empty()) header += QStringLiteral(" (%1)").arg(QString::fromStdString(column.unit));
    headers << header;
  }
  matchedModel_->setHorizontalHeaderLabels(headers);
  std::vector<int> best;
  for (std::size_t c = 0; c < table.columns.size(); ++c) best.push_back(best_row(table, c));
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    const TableRow& row = table.rows[r];
    QList<QStandardItem*> items{new QStandardItem(QString::fromStdString(row.label))};
    for (std::size_t c = 0; c < table.columns.size(); ++c) {
      auto* item = new QStandardItem;
      const auto& cell = c < row.cells.size() ? row.cells[c] : std::nullopt;
      if (cell) {
        item->setText(cellText(*cell, table.columns[c]));
        item->setData(cell->mean, kValueRole);
        item->setToolTip(tr("mean %1, std %2, n = %3").arg(cell->mean).arg(cell->std).arg(cell->n));
        if (best[c] == static_cast<int>(r)) {
          QFont font = item->font();
          font.setBold(true);
          item->setFont(font);
        }
      } else {
        item->setText(QStringLiteral("–"));
        item->setToolTip(tr("no value here"));
      }
      item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      items << item;
    }
    matchedModel_->appendRow(items);
  }
  matchedView_->resizeColumnsToContents();
}

void CompareView::showDiff() {
  diffModel_->clear();
  QStringList headers{tr("Key")};
  for (const auto& column : diff_.columns) headers << QString::fromStdString(column);
  diffModel_->setHorizontalHeaderLabels(headers);
  for (const ConfigDiffRow& row : diff_.rows) {
    QList<QStandardItem*> items{new QStandardItem(QString::fromStdString(row.key))};
    for (const auto& value : row.values) items << new QStandardItem(QString::fromStdString(value));
    diffModel_->appendRow(items);
  }
  diffView_->resizeColumnsToContents();
  if (diff_.columns.size() < 2)
    diffSummary_->setText(tr("Check two or more runs to see how their configs differ."));
  else if (diff_.rows.empty())
    diffSummary_->setText(
        tr("The %1 configs are identical (%2 keys).").arg(diff_.columns.size()).arg(diff_.keys_compared));
  else
    diffSummary_->setText(tr("%1 of %2 keys differ.").arg(diff_.rows.size()).arg(diff_.keys_compared));
}

void CompareView::copyTableAsLatex() {
  if (!table_) return;
  QGuiApplication::clipboard()->setText(QString::fromStdString(to_latex(*table_)));
  setStatus(tr("Copied the table as LaTeX."), false);
}

void CompareView::copyDiff() {
  QStringList lines;
  QStringList header{tr("key")};
  for (const auto& column : diff_.columns) header << QString::fromStdString(column);
  lines << header.join(QLatin1Char('\t'));
  for (const ConfigDiffRow& row : diff_.rows) {
    QStringList fields{QString::fromStdString(row.key)};
    for (const auto& value : row.values) fields << QString::fromStdString(value);
    lines << fields.join(QLatin1Char('\t'));
  }
  QGuiApplication::clipboard()->setText(lines.join(QLatin1Char('\n')) + QLatin1Char('\n'));
  setStatus(tr("Copied the config diff (%1 keys).").arg(diff_.rows.size()), false);
}

QString CompareView::saveTable(const QString& path) const {
  if (!table_) return tr("No table to save.");
  const QString suffix = QFileInfo(path).suffix().toLower();
  std::string text;
  if (suffix == QLatin1String("tex"))
    text = to_latex(*table_);
  else if (suffix == QLatin1String("md"))
    text = to_markdown(*table_);
  else if (suffix == QLatin1String("csv"))
    text = to_csv(*table_);
  else
    return tr("%1: unknown table format '%2' (use .tex, .md or .csv)").arg(path, suffix);
  QFile file(path);
  if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate))
    return tr("%1: cannot write: %2").arg(path, file.errorString());
  const QByteArray bytes = QByteArray::fromStdString(text);
  if (file.write(bytes) != bytes.size()) return tr("%1: write failed: %2").arg(path, file.errorString());
  return {};
}

void CompareView::saveTableWithDialog() {
  if (!table_) return;
  QString filter;
  const auto [figureTable, layout] = tableChoice();  // "matched", "sweep-grid" or a paper layout's name
  const QString path = QFileDialog::getSaveFileName(
      this, tr("Save table"),
      QString::fromStdString(figureTable.empty() ? layout : figureTable) + QStringLiteral(".tex"),
      tr("LaTeX (*.tex);;Markdown (*.md);;CSV (*.csv)"), &filter);
  if (path.isEmpty()) return;
  QString target = path;
  if (QFileInfo(target).suffix().isEmpty()) {
    const QRegularExpressionMatch m = QRegularExpression(QStringLiteral("\\*(\\.\\w+)")).match(filter);
    target += m.hasMatch() ? m.captured(1) : QStringLiteral(".tex");
  }
  const QString error = saveTable(target);
  if (error.isEmpty())
    setStatus(tr("Saved %1").arg(target), false);
  else
    setStatus(error, true);
}

}  // namespace routelab
