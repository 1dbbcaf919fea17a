// RunTokenRouting: the run dashboard's "By token" tab, what the run's routers route: the catalogue's "routing-by-token"
// figure (token groups x routed layers) at one of the run's checkpoints, or "routing-by-token-history" over them (or
// "-layers", a panel a routed layer), by the grouping chosen above it. Built off the GUI thread by a FigureWorker: a
// checkpoint's breakdown is a forward over the sample the first time and is kept in the run store, so asking again
// reads it. Built when the tab is shown; while it is shown, again when the run stores a checkpoint the figure follows.
#pragma once
#include <QVector>
#include <QWidget>

#include "core/report/builders/catalog.h"
#include "core/report/figure/figure.h"

class QComboBox;
class QLabel;

namespace routelab {

struct BuiltFigure;
class FigureView;
class FigureWorker;

class RunTokenRouting : public QWidget {
  Q_OBJECT

 public:
  /// The checkpoint box's items that draw the history, the mean over the routed layers or a panel a layer (the other
  /// items: 0 = the latest checkpoint, else its step).
  static constexpr qint64 kHistory = -1;
  static constexpr qint64 kHistoryPerLayer = -2;

  RunTokenRouting(qint64 runId, const QString& dbPath, QWidget* parent = nullptr);
  ~RunTokenRouting() override;

  /// The run's checkpoint steps as the last store read found them: the checkpoint box lists them, and a figure of
  /// the latest checkpoint or of the history is built again when they change (at once where the tab is shown).
  void setCheckpoints(const QVector<qint64>& steps);
  /// The request behind the figure shown or being built (`routelab-cli figure NAME --runs ID --metric GROUPING
  /// --step STEP` draws the same numbers).
  FigureRequest request() const;
  /// The figure shown (no panels before the first build, or when the run routes no token).
  const Figure& figure() const { return figure_; }
  /// Whether a build is awaited.
  bool isBuilding() const { return awaited_ != 0; }

  FigureView* figureView() const { return view_; }
  QComboBox* groupingBox() const { return grouping_; }
  QComboBox* checkpointBox() const { return checkpoint_; }
  QLabel* statusLabel() const { return status_; }

 Q_SIGNALS:
  /// A build arrived and is shown (figure or error).
  void figureShown();

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  /// Builds request() now where the tab is shown, else when it is next shown.
  void refresh();
  void onBuilt(const BuiltFigure& result);

  qint64 runId_ = 0;
  QString dbPath_;
  QVector<qint64> steps_;
  bool stale_ = true;  ///< what is shown is not request()'s figure
  quint64 awaited_ = 0;
  Figure figure_;
  FigureWorker* worker_ = nullptr;  ///< made when first needed
  FigureView* view_ = nullptr;
  QComboBox* grouping_ = nullptr;
  QComboBox* checkpoint_ = nullptr;
  QLabel* status_ = nullptr;
};

}  // namespace routelab
