// ShortcutsDialog: the window's actions with shortcuts, collected when the dialog opens (dashboards and docks
// opened later bring theirs the next time).
#include "ui/shortcuts_dialog.h"

#include <QAction>
#include <QDialogButtonBox>
#include <QHeaderView>
#include <QLineEdit>
#include <QMap>
#include <QTableWidget>
#include <QVBoxLayout>

namespace routelab {

ShortcutsDialog::ShortcutsDialog(QWidget* window) : QDialog(window) {
  setObjectName(QStringLiteral("shortcutsDialog"));
  setWindowTitle(tr("Keyboard shortcuts"));
  // By name without the mnemonic's '&' and a menu's trailing dots; actions of the same name (the main window's
  // and a panel's "Open dashboard") share a row with every key sequence they answer to.
  QMap<QString, QStringList> shortcuts;
  for (const QAction* action : window->findChildren<QAction*>()) {
    if (action->shortcuts().isEmpty()) continue;
    QString name = action->text();
    name.remove(QLatin1Char('&'));
    if (name.endsWith(QStringLiteral("…"))) name.chop(1);
    if (name.endsWith(QStringLiteral("..."))) name.chop(3);
    if (name.isEmpty()) name = action->toolTip();
    QStringList& keys = shortcuts[name];
    for (const QKeySequence& sequence : action->shortcuts())
      if (const QString key = sequence.toString(QKeySequence::NativeText); !keys.contains(key)) keys << key;
  }
  filter_ = new QLineEdit(this);
  filter_->setPlaceholderText(tr("Filter by action or key"));
  filter_->setClearButtonEnabled(true);
  table_ = new QTableWidget(static_cast<int>(shortcuts.size()), 2, this);
  table_->setHorizontalHeaderLabels({tr("Action"), tr("Shortcut")});
  table_->verticalHeader()->hide();
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setTabKeyNavigation(false);
  int row = 0;
  for (auto it = shortcuts.cbegin(); it != shortcuts.cend(); ++it, ++row) {
    table_->setItem(row, 0, new QTableWidgetItem(it.key()));
    table_->setItem(row, 1, new QTableWidgetItem(it.value().join(QStringLiteral(", "))));
  }
  table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  table_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
  connect(filter_, &QLineEdit::textChanged, this, [this](const QString& text) {
    for (int r = 0; r < table_->rowCount(); ++r) {
      const bool match = table_->item(r, 0)->text().contains(text, Qt::CaseInsensitive) ||
                         table_->item(r, 1)->text().contains(text, Qt::CaseInsensitive);
      table_->setRowHidden(r, !match);
    }
  });
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(filter_);
  layout->addWidget(table_, 1);
  layout->addWidget(buttons);
  resize(460, 520);
}

}  // namespace routelab
