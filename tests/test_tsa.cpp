// PLACEHOLDER (being written): tests of Token-Selective Attention.
#include <QtTest>

class TestTsa : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void placeholder() { QVERIFY(true); }
};

QTEST_GUILESS_MAIN(TestTsa)
#include "test_tsa.moc"
