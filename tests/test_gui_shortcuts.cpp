// Qt Test suite for the main window's keyboard shortcuts: the help dialog lists every key of every action, and no
// key is held twice within reach of one focus (Qt then acts on neither), each workspace page shown in turn.
#include <QAbstractButton>
#include <QAction>
#include <QLineEdit>
#include <QMap>
#include <QMenu>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <memory>

#include "tests/suite.h"
#include "ui/main_window.h"
#include "ui/shortcuts_dialog.h"
#include "ui/workspace_tabs.h"

namespace test_gui_shortcuts {

using routelab::MainWindow;

class TestGuiShortcuts : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(home_.isValid());
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("RouteLabTest"));
    QCoreApplication::setApplicationName(QStringLiteral("test_gui_shortcuts"));
    qputenv("ROUTELAB_HOME", home_.path().toUtf8());
    qputenv("XDG_CONFIG_HOME", home_.filePath(QStringLiteral("config")).toUtf8());
    qputenv("ROUTELAB_NO_CONFIRM", "1");
  }
  void helpListsKeyboardShortcuts();
  void noKeyActsTwiceInOneFocus();

 private:
  std::unique_ptr<MainWindow> makeWindow() {
    routelab::MainWindowOptions options;
    options.dbPath = home_.filePath(QStringLiteral("runs-%1.sqlite").arg(++windows_));
    options.confirmClose = false;
    auto window = std::make_unique<MainWindow>(options);
    window->show();
    return window;
  }

  QTemporaryDir home_;
  int windows_ = 0;
};

void TestGuiShortcuts::helpListsKeyboardShortcuts() {
  auto window = makeWindow();
  QVERIFY(QTest::qWaitForWindowExposed(window.get()));
  window->shortcutsAction()->trigger();
  auto* dialog = window->findChild<routelab::ShortcutsDialog*>(QStringLiteral("shortcutsDialog"));
  QVERIFY(dialog && dialog->isVisible());
  QMap<QString, QString> listed;
  QTableWidget* table = dialog->table();
  for (int r = 0; r < table->rowCount(); ++r) listed.insert(table->item(r, 0)->text(), table->item(r, 1)->text());
  const auto native = [](const QKeySequence& keys) { return keys.toString(QKeySequence::NativeText); };
  QCOMPARE(listed.value(QStringLiteral("Compare runs")), native(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C)));
  // The main window's and the runs browser's "Open dashboard" share a row.
  QVERIFY2(listed.value(QStringLiteral("Open dashboard")).contains(native(QKeySequence(Qt::CTRL | Qt::Key_D))),
           qPrintable(listed.value(QStringLiteral("Open dashboard"))));
  QVERIFY(listed.contains(QStringLiteral("Keyboard shortcuts")));
  // Every key sequence of every action of the window is listed.
  QString all;
  for (const QString& keys : listed) all += keys + QStringLiteral(", ");
  for (const QAction* action : window->findChildren<QAction*>())
    for (const QKeySequence& keys : action->shortcuts())
      QVERIFY2(all.contains(native(keys) + QStringLiteral(", ")), qPrintable(action->text()));
  dialog->filter()->setText(QStringLiteral("compare"));
  int shown = 0;
  for (int r = 0; r < table->rowCount(); ++r) shown += table->isRowHidden(r) ? 0 : 1;
  QVERIFY2(shown >= 1 && shown < table->rowCount(), qPrintable(QString::number(shown)));
  dialog->close();
}

namespace {

/// A key the window answers to and where: `scope` null for the whole window (a window shortcut of a visible
/// widget or a menu's action), else the widget whose focus, or its children's, the key needs.
struct KeyHolder {
  QString name;
  QKeySequence keys;
  const QWidget* scope = nullptr;
};

/// Qt's rules for which shortcuts are live (QShortcutMap): an action's key acts while one of its widgets is visible
/// (a menu counts as the window's), a button's while it is visible; hidden tabs take no key. Disabled actions are
/// kept: they are enabled by a selection later, and two live enabled holders of a key make it act on neither.
QList<KeyHolder> liveKeys(const QWidget* window) {
  QList<KeyHolder> keys;
  for (const QAction* action : window->findChildren<QAction*>())
    for (const QKeySequence& sequence : action->shortcuts())
      for (const QObject* object : action->associatedObjects()) {
        const auto* widget = qobject_cast<const QWidget*>(object);
        if (!widget) continue;
        const bool menu = qobject_cast<const QMenu*>(widget) != nullptr;
        if (!menu && !widget->isVisible()) continue;
        const bool wide = menu || action->shortcutContext() == Qt::WindowShortcut ||
                          action->shortcutContext() == Qt::ApplicationShortcut;
        keys.append({action->text(), sequence, wide ? nullptr : widget});
        break;
      }
  for (const QAbstractButton* button : window->findChildren<QAbstractButton*>())
    if (!button->shortcut().isEmpty() && button->isVisible())
      keys.append({button->text(), button->shortcut(), nullptr});
  return keys;
}

bool sameFocusReaches(const KeyHolder& a, const KeyHolder& b) {
  if (!a.scope || !b.scope) return true;
  return a.scope == b.scope || a.scope->isAncestorOf(b.scope) || b.scope->isAncestorOf(a.scope);
}

}  // namespace

void TestGuiShortcuts::noKeyActsTwiceInOneFocus() {
  // Two live holders of one key sequence in reach of one focus make Qt act on neither ("Ambiguous shortcut
  // overload"): checked with every page of the workspace open, each shown in turn.
  auto window = makeWindow();
  QVERIFY(QTest::qWaitForWindowExposed(window.get()));
  for (QAction* page : {window->inspectorAction(), window->compareAction(), window->tasksAction()})
    if (!page->isChecked()) page->trigger();
  QTabWidget* tabs = window->workspace();
  QVERIFY(tabs->count() >= 4);
  int checked = 0;
  for (int t = 0; t < tabs->count(); ++t) {
    tabs->setCurrentIndex(t);
    const QList<KeyHolder> keys = liveKeys(window.get());
    for (int i = 0; i < keys.size(); ++i)
      for (int j = i + 1; j < keys.size(); ++j) {
        if (keys[i].keys != keys[j].keys) continue;
        QVERIFY2(!sameFocusReaches(keys[i], keys[j]),
                 qPrintable(QStringLiteral("%1 answers to \"%2\" and \"%3\" in one focus (tab \"%4\")")
                                .arg(keys[i].keys.toString(), keys[i].name, keys[j].name, tabs->tabText(t))));
      }
    checked += static_cast<int>(keys.size());
  }
  QVERIFY2(checked > 20, qPrintable(QString::number(checked)));
}

}  // namespace test_gui_shortcuts

ROUTELAB_TEST_SUITE(test_gui_shortcuts, TestGuiShortcuts)
#include "test_gui_shortcuts.moc"
