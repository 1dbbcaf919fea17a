// PLACEHOLDER (being written): tests of Depth Routing Residuals.
#include <QtTest>

class TestDrr : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void placeholder() { QVERIFY(true); }
};

QTEST_GUILESS_MAIN(TestDrr)
#include "test_drr.moc"
