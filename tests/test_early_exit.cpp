// PLACEHOLDER (being written): tests of Early exit.
#include <QtTest>

class TestEarlyExit : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void placeholder() { QVERIFY(true); }
};

QTEST_GUILESS_MAIN(TestEarlyExit)
#include "test_early_exit.moc"
