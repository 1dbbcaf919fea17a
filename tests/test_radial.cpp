// PLACEHOLDER (being written): tests of Radial Networks.
#include <QtTest>

class TestRadial : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void placeholder() { QVERIFY(true); }
};

QTEST_GUILESS_MAIN(TestRadial)
#include "test_radial.moc"
