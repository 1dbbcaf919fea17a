// Qt Test suite for the plot widgets alone (offscreen): the loss plot's debiased EMA and moving average, its
// step-ordered appends and follow/zoom behaviour, the hover readout every plot shows, long figure lines thinned
// on screen only, and the word completion of the option fields.
#include <QAbstractItemView>
#include <QCompleter>
#include <QLineEdit>
#include <QtTest>

#include <cmath>

#include "core/report/figure/figure.h"
#include "tests/suite.h"
#include "ui/figure_render.h"
#include "ui/loss_smoothing.h"
#include "widgets/loss_plot_widget.h"
#include "widgets/moving_average.h"
#include "widgets/plot_hover.h"
#include "widgets/qcustomplot_include.h"
#include "widgets/word_completer.h"

namespace test_gui_plots {

using routelab::LossPlotWidget;
using Series = routelab::LossPlotWidget::Series;

class TestGuiPlots : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  /// A line of 100,000 points (a long run's metric) goes to a file whole; on screen it is handed over as each
  /// bucket's lowest and highest point and first gap, so its extremes, its gap and its x range stay as drawn.
  void longLinesThinnedOnScreenOnly() {
    routelab::FigurePanel panel;
    routelab::FigureSeries line;
    line.label = "train/grad_norm";
    for (int i = 0; i < 100000; ++i) {
      line.x.push_back(i + 1);
      line.y.push_back(1.0 + 0.001 * (i % 97));
    }
    line.y[31337] = 50.0;  // a spike
    line.y[31338] = -3.0;  // and a dip beside it
    line.y[70000] = std::nan("");  // a gap
    panel.series.push_back(line);
    routelab::Figure figure;
    figure.panels = {panel};
    figure.columns = 1;
    figure.width_cm = 12.0;
    figure.height_cm = 6.0;
    QCustomPlot plot;
    plot.resize(450, 230);
    routelab::renderFigure(&plot, figure);
    QCOMPARE(plot.graphCount(), 1);
    QCOMPARE(plot.graph(0)->data()->size(), 100000);
    routelab::renderFigure(&plot, figure, routelab::RenderTarget::Screen);
    QCOMPARE(plot.graphCount(), 1);
    const auto* data = plot.graph(0)->data().data();
    QVERIFY2(data->size() < 3000 && data->size() > 300, qPrintable(QString::number(data->size())));
    double lo = 1e9, hi = -1e9, lastKey = 0;
    bool gap = false, sorted = true;
    for (auto it = data->constBegin(); it != data->constEnd(); ++it) {
      sorted = sorted && it->key >= lastKey;
      lastKey = it->key;
      if (std::isnan(it->value)) {
        gap = gap || it->key == 70001;
        continue;
      }
      lo = std::min(lo, it->value);
      hi = std::max(hi, it->value);
    }
    QVERIFY(sorted && gap);
    QCOMPARE(hi, 50.0);
    QCOMPARE(lo, -3.0);
    const QCPRange x = plot.graph(0)->keyAxis()->range();
    QVERIFY2(x.lower <= 1 && x.upper >= 100000, qPrintable(QStringLiteral("%1 .. %2").arg(x.lower).arg(x.upper)));
  }

  void emaIsDebiased() {
    // The live plot's EMA is core's (core/run/smoothing.h), the figures' one: point for point, appended live or
    // rebuilt for another weight. A constant series stays constant from the first point; a gap stays a gap.
    LossPlotWidget plot;
    routelab::useDebiasedEma(&plot);
    const std::vector<double> raw = {2.5, 2.5, 4.0, std::nan(""), 1.0, 3.0};
    plot.appendTrain({1, 2, 3}, {raw[0], raw[1], raw[2]});
    plot.appendTrain({4, 5, 6}, {raw[3], raw[4], raw[5]});
    for (const double weight : {0.9, 0.5, 0.0}) {
      plot.setSmoothing(weight);
      const auto expected = routelab::debiased_ema(raw, weight);
      const auto* data = plot.plot()->graph(1)->data().data();
      QCOMPARE(data->size(), 6);
      for (int i = 0; i < 6; ++i) {
        const double shown = data->at(i)->value;
        QVERIFY2(shown == expected[static_cast<std::size_t>(i)] || (std::isnan(shown) && std::isnan(expected[i])),
                 qPrintable(QStringLiteral("weight %1, point %2: %3").arg(weight).arg(i).arg(shown)));
      }
      QCOMPARE(data->at(1)->value, 2.5);
    }
  }

  void lossPlotAppendsInStepOrderOnly() {
    LossPlotWidget plot;
    plot.appendTrain({1, 2, 3}, {3.0, 2.0, 1.5});
    plot.appendTrain({2, 3, 4}, {9.0, 9.0, 1.2});  // overlap with what is plotted is ignored
    QCOMPARE(plot.pointCount(Series::TrainRaw), 4);
    QCOMPARE(plot.pointCount(Series::TrainSmoothed), 4);
    QCOMPARE(plot.lastStep(Series::TrainRaw), 4.0);
    plot.appendValidation({4}, {1.4});
    QCOMPARE(plot.pointCount(Series::Validation), 1);
    plot.setSmoothing(0.5);
    QCOMPARE(plot.pointCount(Series::TrainSmoothed), 4);
    plot.clear();
    QCOMPARE(plot.pointCount(Series::TrainRaw), 0);
    QCOMPARE(plot.lastStep(Series::Validation), -1.0);
  }

  void lossPlotFollowsUntilTheUserZooms() {
    LossPlotWidget plot;
    QSignalSpy followChanged(&plot, &LossPlotWidget::autoFollowChanged);
    plot.appendTrain({1, 2, 3, 4}, {3.0, 2.0, 1.5, 1.2});
    QVERIFY(plot.autoFollow());
    // From just before step 0 to just after the last step: markers at both ends are drawn whole.
    QVERIFY(plot.plot()->xAxis->range().lower < 0.0 && plot.plot()->xAxis->range().lower > -0.2);
    QVERIFY(plot.plot()->xAxis->range().upper > 4.0);
    QVERIFY(plot.plot()->yAxis->range().contains(3.0) && plot.plot()->yAxis->range().contains(1.2));
    QCOMPARE(followChanged.count(), 0);  // its own range changes do not count as the user's
  
    plot.plot()->xAxis->setRange(1, 2);  // what a drag or wheel zoom does
    QVERIFY(!plot.autoFollow());
    plot.appendTrain({5}, {1.1});
    QCOMPARE(plot.plot()->xAxis->range().upper, 2.0);  // the user's view stays put
  
    plot.setAutoFollow(true);
    QVERIFY(plot.plot()->xAxis->range().upper >= 5.0);
    plot.setLogScaleY(true);
    QVERIFY(plot.autoFollow());
    QVERIFY(plot.plot()->yAxis->range().lower > 0);
  }

  void plotsReadOutTheValueUnderTheCursor() {
    LossPlotWidget widget;
    widget.resize(640, 400);
    widget.show();
    QVERIFY(QTest::qWaitForWindowExposed(&widget));
    widget.appendTrain({10, 20, 30}, {3.0, 2.5, 2.25});
    widget.appendValidation({20}, {2.75});
    QCustomPlot* plot = widget.plot();
    plot->replot();
    const QCPGraph* val = nullptr;
    for (int g = 0; g < plot->graphCount(); ++g)
      if (plot->graph(g)->dataCount() == 1) val = plot->graph(g);
    QVERIFY(val != nullptr);
    const QPointF at(val->keyAxis()->coordToPixel(20), val->valueAxis()->coordToPixel(2.75));
    const QString text = routelab::plotReadoutAt(plot, at + QPointF(3, -2));
    QVERIFY2(text.startsWith(val->name()) && text.contains(QStringLiteral("step 20")) &&
                 text.contains(QStringLiteral("2.75")),
             qPrintable(text));
    QVERIFY(routelab::plotReadoutAt(plot, QPointF(2, 2)).isEmpty());  // outside the axes: nothing
  }

  void movingAverageHasAFiniteWindow() {
    routelab::MovingAverage ma(3);
    QCOMPARE(ma.add(3.0), 3.0);
    QCOMPARE(ma.add(6.0), 4.5);
    QCOMPARE(ma.add(9.0), 6.0);
    QCOMPARE(ma.add(12.0), 9.0);  // the first value has left the window
    QVERIFY(std::isnan(ma.add(std::nan(""))));
    QCOMPARE(ma.add(15.0), 12.0);
  
    LossPlotWidget plot;
    plot.setSmoothingMode(LossPlotWidget::Smoothing::MovingAverage);
    plot.setSmoothing(0.5);  // window round(1 / 0.5) = 2
    QCOMPARE(plot.movingAverageWindow(), 2);
    plot.appendTrain({1, 2, 3}, {4.0, 2.0, 6.0});
    QCOMPARE(plot.plot()->graph(1)->data()->at(2)->value, 4.0);
  }

  void wordCompletionReplacesTheWordAtTheCursor() {
    // The word at the cursor (spaces and commas separate words) is completed from the list, any case, by the part
    // before the cursor; the entry chosen replaces that whole word alone; a word the list does not start, or one
    // already whole, offers nothing.
    QCOMPARE(routelab::WordCompleter::wordAt(QStringLiteral("a=1, tr"), 7), QStringLiteral("tr"));
    int start = -1;
    QCOMPARE(routelab::WordCompleter::wordAt(QStringLiteral("a=1 bc d"), 6, &start), QStringLiteral("bc"));
    QCOMPARE(start, 4);
    QCOMPARE(routelab::WordCompleter::wordAt(QStringLiteral("a=1 "), 4), QString());
    QLineEdit edit;
    edit.resize(300, 30);
    edit.show();
    QVERIFY(QTest::qWaitForWindowExposed(&edit));
    auto* words = new routelab::WordCompleter(&edit);
    words->setWords({QStringLiteral("train.lr"), QStringLiteral("model.capacity"), QStringLiteral("model.n_layer")});
    auto* popup = words->completer()->popup();
    const auto offered = [&] {
      QStringList out;
      auto* model = words->completer()->completionModel();
      for (int i = 0; i < model->rowCount(); ++i) out << model->index(i, 0).data().toString();
      return out;
    };
    edit.setFocus();
    QTest::keyClicks(&edit, QStringLiteral("train.lr, MODEL."));
    QTRY_VERIFY(popup->isVisible());
    QCOMPARE(offered(), (QStringList{QStringLiteral("model.capacity"), QStringLiteral("model.n_layer")}));
    QTest::keyClick(popup, Qt::Key_Down);  // the second entry
    QTest::keyClick(popup, Qt::Key_Return);
    QCOMPARE(edit.text(), QStringLiteral("train.lr, model.n_layer"));
    QTRY_VERIFY(!popup->isVisible());
    edit.setCursorPosition(2);  // inside the first word: the part before the cursor is completed, the word replaced
    QTest::keyClick(&edit, Qt::Key_Backspace);
    QTest::keyClicks(&edit, QStringLiteral("r"));
    QTRY_VERIFY(popup->isVisible());
    QCOMPARE(offered(), QStringList{QStringLiteral("train.lr")});
    QTest::keyClick(popup, Qt::Key_Return);
    QCOMPARE(edit.text(), QStringLiteral("train.lr, model.n_layer"));  // no rest of the word left behind
    QCOMPARE(edit.cursorPosition(), 8);
    edit.setText(QStringLiteral("a=1 model.n_lay,b"));  // a word ended by a comma: what follows it stays
    edit.setCursorPosition(9);
    QTest::keyClick(&edit, Qt::Key_Backspace);
    QTest::keyClicks(&edit, QStringLiteral("l.c"));
    QTRY_VERIFY(popup->isVisible());
    QCOMPARE(offered(), QStringList{QStringLiteral("model.capacity")});
    QTest::keyClick(popup, Qt::Key_Return);
    QCOMPARE(edit.text(), QStringLiteral("a=1 model.capacity,b"));
    edit.clear();
    QTest::keyClicks(&edit, QStringLiteral("seed"));  // nothing starts with it
    QVERIFY(!popup->isVisible());
    edit.clear();
    QTest::keyClicks(&edit, QStringLiteral("train.lr"));  // already whole
    QVERIFY(!popup->isVisible());
  }
};

}  // namespace test_gui_plots

ROUTELAB_TEST_SUITE(test_gui_plots, TestGuiPlots)
#include "test_gui_plots.moc"
