// Help > Keyboard shortcuts: every action of the window that has a shortcut (menus, toolbar, docks, dashboards,
// the runs browser), with its key sequence as this platform writes it, in a table filtered as you type.
#pragma once
#include <QDialog>

class QLineEdit;
class QTableWidget;

namespace routelab {

class ShortcutsDialog : public QDialog {
  Q_OBJECT

 public:
  /// Lists the actions with a shortcut among `window` and its children, by name; the same name once.
  explicit ShortcutsDialog(QWidget* window);

  QTableWidget* table() const { return table_; }
  QLineEdit* filter() const { return filter_; }

 private:
  QLineEdit* filter_ = nullptr;
  QTableWidget* table_ = nullptr;
};

}  // namespace routelab
