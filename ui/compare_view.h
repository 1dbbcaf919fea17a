// CompareView: stored runs side by side. A checkable run list (filter, "group seeds"), a figure from the
// catalogue of core/report/builders/catalog.h (curves with mean ± std bands, matched budgets, Pareto scatter, routed
// layers, cost vs length, token maps, the seeds' figures) with its metric, x axis, smoothing, budgets and step,
// a table (the "loss at matched budgets" table or a named layout such as the seeds' tables; copy as LaTeX, save as
// LaTeX/Markdown/CSV) and the config diff of the
// checked runs (only the keys that differ). Figures and tables are built off the GUI thread by CompareWorker on
// its own store connection; the latest request wins: a build in progress stops at its next interruption point
// (core/util/interrupt.h) and stale answers are dropped.
#pragma once
#include <QList>
#include <QMetaType>
#include <QSet>
#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>

#include <atomic>
#include <memory>
#include <optional>

#include "core/report/builders/catalog.h"
#include "core/report/figure/figure.h"
#include "core/report/tables/config_diff.h"
#include "core/report/tables/table.h"
#include "ui/run_progress.h"

class QCheckBox;
class QComboBox;
class QVBoxLayout;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QPushButton;
class QSpinBox;
class QStandardItemModel;
class QTabWidget;
class QTableView;
class QThread;
class QTimer;

namespace routelab {

class CompareWorker;
class FigureView;
class StoreService;
class WorkerStore;
class WordCompleter;

/// One build of the view's outputs: the figure, the table and the config diff.
struct CompareRequest {
  quint64 serial = 0;
  FigureRequest figure;      ///< figure.name empty = no figure (too few runs for it); the table reads it too
  /// "" = figure.metric; token maps: "gate" or "decision", a figure with metric choices the one chosen (the figure
  /// alone: the matched table reads figure.metric)
  std::string figureMetric;
  std::string figureTable = "matched";  ///< the table of a figure (figure_tables()), read from `figure`; "" = ...
  std::string tableName;                ///< ... a layout of core/report/tables/run_tables.h
};

struct CompareResult {
  quint64 serial = 0;
  std::optional<Figure> figure;
  QString figureError;
  std::optional<ReportTable> table;
  QString tableError;
  ConfigDiff diff;
  QString diffError;
  double seconds = 0;        ///< time the worker took, for the status line
};

/// The compare view's parts, for the main window's dock.
class CompareView : public QWidget {
  Q_OBJECT

 public:
  /// Debounce of control changes before a build is requested.
  static constexpr int kUpdateDelayMs = 120;
  /// The matched table's cells hold their unscaled mean under this role.
  static constexpr int kValueRole = Qt::UserRole + 1;

  /// Reads the runs list from `store`'s runsLoaded and opens its own connection to `store->dbPath()`.
  explicit CompareView(StoreService* store, QWidget* parent = nullptr);
  ~CompareView() override;

  /// The runs checked, in ascending id order.
  QList<qint64> checkedRuns() const;
  /// Checks or unchecks one run (no-op when it is not listed).
  void setRunChecked(qint64 runId, bool checked);
  /// Checks every run the filter shows ("Check shown"), or unchecks every run ("Uncheck all"): one request.
  void checkShownRuns(bool check);
  /// Selects a figure by catalogue name; false when unknown.
  bool setFigureName(const QString& name);
  QString figureName() const;
  void setXAxis(const QString& axis);   ///< "step", "tokens", "flops" or "wall"
  void setMetric(const QString& key);
  void setBudgets(const QString& text); ///< comma- or space-separated numbers in the x axis' unit
  void setGroupSeeds(bool on);
  /// Token maps: show hard decisions (true) or gate values (false).
  void setShowDecisions(bool on);
  /// Restores the figure, x axis, metric, smoothing, seed grouping and table layout chosen last (QSettings
  /// "compare/..."), and remembers every later choice (the main window's view; tests start from the defaults).
  void restoreChoices();

  /// The matched-budget table shown (nullopt when none) and its exports (core/report/tables/table.h).
  const std::optional<ReportTable>& matchedTable() const { return table_; }
  const ConfigDiff& configDiff() const { return diff_; }
  /// Writes the matched table to `path` as LaTeX (.tex), Markdown (.md) or CSV (.csv); "" or an error text.
  QString saveTable(const QString& path) const;
  QString statusText() const;
  /// The serial of the last result shown (tests wait on it).
  quint64 shownSerial() const { return shownSerial_; }
  /// The serial of the latest request made (results of older ones are dropped).
  quint64 requestedSerial() const { return serial_; }

  FigureView* figureView() const { return figureView_; }
  QListWidget* runList() const { return runList_; }
  QComboBox* figureCombo() const { return figure_; }
  QComboBox* metricCombo() const { return metric_; }
  QComboBox* xAxisCombo() const { return xAxis_; }
  /// The table's layout: a figure's table ("figure:matched", "figure:sweep-grid") or a named layout
  /// (`routelab-cli tables`).
  QComboBox* tableCombo() const { return tableLayout_; }
  /// The sweep grid's two options (rows, columns), comma- or space-separated; empty: the two that explain most.
  QLineEdit* gridOptionsEdit() const { return gridOptions_; }
  /// Its completion: the keys the checked runs differ in.
  WordCompleter* gridOptionsCompleter() const { return gridWords_; }
  QTableView* matchedView() const { return matchedView_; }
  QTableView* diffView() const { return diffView_; }
  QLineEdit* filterEdit() const { return filter_; }

 public Q_SLOTS:
  /// Checks exactly `runIds` (those not listed yet are checked when the runs list brings them) and shows them.
  void showRuns(const QList<qint64>& runIds);
  /// Rebuilds the figure, table and diff now (after the debounce).
  void refresh();
  void copyTableAsLatex();
  /// Copies the config diff as tab-separated text (key, then one value per run).
  void copyDiff();
  /// Asks for a file (LaTeX, Markdown or CSV) and writes the matched table.
  void saveTableWithDialog();

 Q_SIGNALS:
  /// A new result is shown (figure, table and diff of request `serial`).
  void resultShown(quint64 serial);

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void buildUi();
  // The parts buildUi lays out: the checkable run list, the figure controls, the table and config-diff pages, and
  // the signals that rebuild the view.
  QWidget* buildRunList();
  QVBoxLayout* buildControls();
  QWidget* buildTablePage();
  QWidget* buildDiffPage(QPushButton** copyDiff);
  /// A table view of `model` named `name`: read-only, no row numbers, Tab moving on to the next widget.
  QTableView* readOnlyTable(QStandardItemModel* model, const QString& name);
  void connectControls(QPushButton* copyDiff);
  void setRuns(const QList<RunSummary>& runs);
  void applyFilter();
  void onItemChanged();
  void scheduleUpdate();
  void sendRequest();
  void requestMetricKeys();
  void onResult(const CompareResult& result);
  void onMetricKeys(quint64 serial, const QStringList& keys);
  /// The metric box's items: the current figure's metric choices (FigureInfo::metric_choices), else the metric keys
  /// of the checked runs; the current item kept where it is one of them.
  void fillMetric();
  void showTable();
  void showDiff();
  void setStatus(const QString& text, bool error);
  std::vector<double> parseBudgets(QString* error) const;
  /// Shows the Grid field where the figure or the table is a sweep grid; its tooltip names the keys the runs differ in.
  void showGridField();
  /// The table layout box's choice: {a figure's table (figure_tables()), ""} or {"", a paper layout}.
  std::pair<std::string, std::string> tableChoice() const;

  StoreService* store_ = nullptr;
  QThread* thread_ = nullptr;
  CompareWorker* worker_ = nullptr;

  QLineEdit* filter_ = nullptr;
  QListWidget* runList_ = nullptr;
  QCheckBox* groupSeeds_ = nullptr;
  QComboBox* figure_ = nullptr;
  QComboBox* metric_ = nullptr;
  QComboBox* xAxis_ = nullptr;
  QDoubleSpinBox* smoothing_ = nullptr;
  QLineEdit* budgets_ = nullptr;
  QLineEdit* gridOptions_ = nullptr;
  WordCompleter* gridWords_ = nullptr;
  QWidget* gridBox_ = nullptr;  ///< the Grid label and field
  QSpinBox* step_ = nullptr;
  QCheckBox* decisions_ = nullptr;  ///< token maps: hard decisions instead of gates
  QPushButton* refresh_ = nullptr;
  FigureView* figureView_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QTableView* matchedView_ = nullptr;
  QStandardItemModel* matchedModel_ = nullptr;
  QComboBox* tableLayout_ = nullptr;
  QPushButton* copyLatex_ = nullptr;
  QPushButton* saveTable_ = nullptr;
  QTableView* diffView_ = nullptr;
  QStandardItemModel* diffModel_ = nullptr;
  QLabel* diffSummary_ = nullptr;
  QLabel* status_ = nullptr;
  QTimer* updateTimer_ = nullptr;

  QSet<qint64> checked_;            ///< the user's choice (survives refreshes of the list)
  QSet<qint64> wanted_;             ///< asked for by showRuns before the list held them
  QList<RunSummary> runs_;
  bool fillingList_ = false;
  bool rememberChoices_ = false;
  bool dirty_ = false;              ///< a checked run changed while the view was hidden
  quint64 serial_ = 0;              ///< the latest request made
  QStringList latestNotes_;         ///< problems found while making it (bad budgets, too few runs)
  quint64 shownSerial_ = 0;
  bool inFlight_ = false;
  std::optional<CompareRequest> pending_;
  quint64 keysSerial_ = 0;
  QStringList metricKeys_;          ///< the checked runs' metric keys, last read
  /// The metric key chosen last: what the matched table reads, kept while a figure's choices fill the metric box.
  QString metricKey_ = QStringLiteral("val/loss");
  std::optional<ReportTable> table_;
  ConfigDiff diff_;
};

/// Lives on CompareView's thread; owns a read-only-use RunStore connection, opened on first use.
class CompareWorker : public QObject {
  Q_OBJECT

 public:
  explicit CompareWorker(const QString& dbPath);
  ~CompareWorker() override;

 public Q_SLOTS:
  void build(const routelab::CompareRequest& request);
  void readMetricKeys(quint64 serial, const QList<qint64>& runIds);

 public:
  /// The serial of the request the view wants (called from any thread; 0 when it closes): a build of another one
  /// stops at its next interruption point and answers with no figure.
  void want(quint64 serial) { wanted_.store(serial); }

 Q_SIGNALS:
  void built(const routelab::CompareResult& result);
  void metricKeysRead(quint64 serial, const QStringList& keys);

 private:
  std::unique_ptr<WorkerStore> store_;  ///< opened on the worker's thread
  std::atomic<quint64> wanted_{0};
};

}  // namespace routelab

Q_DECLARE_METATYPE(routelab::CompareRequest)
Q_DECLARE_METATYPE(routelab::CompareResult)
