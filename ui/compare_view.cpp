// CompareView and CompareWorker: the GUI side keeps the run list, the controls and the shown results; the worker
// builds figures, matched-budget tables and config diffs from its own RunStore connection on its own thread.
#include "ui/compare_view.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QHash>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QShowEvent>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableView>
#include <QThread>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>

#include "core/report/builders/catalog.h"
#include "core/report/tables/run_tables.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "ui/figure_render.h"
#include "ui/runs_query.h"
#include "ui/store_service.h"
#include "widgets/word_completer.h"

namespace routelab {
namespace {

constexpr int kIdRole = Qt::UserRole;
const QString kDefaultMetric = QStringLiteral("val/loss");
/// The one figure whose `metric` picks gate or decision maps instead of a metric key.
const QString kTokenMaps = QStringLiteral("token-maps");
const QString kTokenMap = QStringLiteral("token-map");
/// The table layout box's data for a figure's table ("figure:matched"); a paper layout's is its name.
const QString kFigureTable = QStringLiteral("figure:");
const char* const kGridTip = QT_TRANSLATE_NOOP(
    "CompareView",
    "The two swept options the sweep grid's figure and table read, rows then columns; empty: the two whose values "
    "explain the most variance");
/// The figure (and table) whose two options the Grid field names.
const QString kSweepGrid = QStringLiteral("sweep-grid");

/// The items of a list typed into a field: separated by commas, semicolons or spaces.
QStringList listItems(const QString& text) {
  static const QRegularExpression separators(QStringLiteral("[,;\\s]+"));
  return text.split(separators, Qt::SkipEmptyParts);
}

/// The figures a "Decisions" box colours: the token maps.
bool colouredByDecisions(const QString& figure) { return figure == kTokenMaps || figure == kTokenMap; }

/// The values the figure's `metric` takes where it names no metric key (empty: it takes a key).
QStringList metricChoices(const QString& figure) {
  QStringList choices;
  for (const FigureInfo& info : figure_catalog())
    if (QString::fromStdString(info.name) == figure)
      for (const auto& choice : info.metric_choices) choices << QString::fromStdString(choice);
  return choices;
}

QString runText(const RunSummary& run) {
  return QStringLiteral("#%1  %2 · %3 · %4").arg(run.id).arg(run.name, run.arch, run.status);
}

}  // namespace

CompareView::CompareView(StoreService* store, QWidget* parent) : QWidget(parent), store_(store) {
  setObjectName(QStringLiteral("compareView"));
  qRegisterMetaType<CompareRequest>();
  qRegisterMetaType<CompareResult>();
  buildUi();

  updateTimer_ = new QTimer(this);
  updateTimer_->setSingleShot(true);
  updateTimer_->setInterval(kUpdateDelayMs);
  connect(updateTimer_, &QTimer::timeout, this, &CompareView::sendRequest);

  thread_ = new QThread(this);
  thread_->setObjectName(QStringLiteral("routelab-compare"));
  worker_ = new CompareWorker(store_->dbPath());
  worker_->moveToThread(thread_);
  connect(thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(worker_, &CompareWorker::built, this, &CompareView::onResult, Qt::QueuedConnection);
  connect(worker_, &CompareWorker::metricKeysRead, this, &CompareView::onMetricKeys, Qt::QueuedConnection);
  thread_->start();

  connect(store_, &StoreService::runsLoaded, this, &CompareView::setRuns);
  setStatus(tr("Check runs to compare."), false);
}

CompareView::~CompareView() {
  worker_->want(0);  // a build in progress stops at its next interruption point
  thread_->quit();
  thread_->wait();
}

void CompareView::buildUi() {
  QWidget* left = buildRunList();
  QVBoxLayout* controls = buildControls();
  figureView_ = new FigureView(this);
  figureView_->setObjectName(QStringLiteral("compareFigureView"));
  QPushButton* copyDiff = nullptr;
  tabs_ = new QTabWidget(this);
  tabs_->addTab(buildTablePage(), tr("Table"));
  tabs_->addTab(buildDiffPage(&copyDiff), tr("Config diff"));

  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("compareStatus"));
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* centre = new QSplitter(Qt::Vertical, this);
  centre->addWidget(figureView_);
  centre->addWidget(tabs_);
  centre->setStretchFactor(0, 3);
  centre->setStretchFactor(1, 1);
  centre->setSizes({300, 100});  // the figure first, the table a few rows under it
  auto* right = new QWidget(this);
  auto* rightLayout = new QVBoxLayout(right);
  rightLayout->setContentsMargins(0, 0, 0, 0);
  rightLayout->addLayout(controls);
  rightLayout->addWidget(centre, 1);
  rightLayout->addWidget(status_);

  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 0);
  split->setStretchFactor(1, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(split);
  connectControls(copyDiff);
  showGridField();
}

QWidget* CompareView::buildRunList() {
  filter_ = new QLineEdit(this);
  filter_->setObjectName(QStringLiteral("compareFilter"));
  filter_->setPlaceholderText(tr("Filter runs: name, architecture… or lr<0.01"));
  filter_->setToolTip(tr("As the runs browser's search: words in a run's id, name, architecture or status, and "
                         "comparisons of config keys and run fields, or, -term, parentheses (mod capacity>=0.5 "
                         "lr<0.01 best<2.4, arch=mod (lr<0.003 or capacity=0.5) -failed)"));
  filter_->setClearButtonEnabled(true);
  auto* checkShown = new QPushButton(tr("Check shown"), this);
  checkShown->setObjectName(QStringLiteral("compareCheckShown"));
  checkShown->setToolTip(tr("Check every run the filter shows"));
  auto* uncheckAll = new QPushButton(tr("Uncheck all"), this);
  uncheckAll->setObjectName(QStringLiteral("compareUncheckAll"));
  connect(checkShown, &QPushButton::clicked, this, [this] { checkShownRuns(true); });
  connect(uncheckAll, &QPushButton::clicked, this, [this] { checkShownRuns(false); });
  auto* checkRow = new QHBoxLayout;
  checkRow->setContentsMargins(0, 0, 0, 0);
  checkRow->addWidget(checkShown);
  checkRow->addWidget(uncheckAll);
  runList_ = new QListWidget(this);
  runList_->setObjectName(QStringLiteral("compareRunList"));
  runList_->setToolTip(tr("Check the runs to compare"));
  groupSeeds_ = new QCheckBox(tr("Group seeds (mean ± std)"), this);
  groupSeeds_->setObjectName(QStringLiteral("compareGroupSeeds"));
  groupSeeds_->setChecked(true);
  groupSeeds_->setToolTip(tr("Runs with the same config apart from the run section form one curve with a band"));
  auto* left = new QWidget(this);
  auto* leftLayout = new QVBoxLayout(left);
  leftLayout->setContentsMargins(0, 0, 0, 0);
  leftLayout->addWidget(filter_);
  leftLayout->addLayout(checkRow);
  leftLayout->addWidget(runList_, 1);
  leftLayout->addWidget(groupSeeds_);
  // Wide enough for "#id  name · arch" of a typical run (each item's tooltip has the rest).
  left->setMinimumWidth(fontMetrics().horizontalAdvance(QStringLiteral("#000  dtrnet-bilayer-s1 · dtrnet")));
  return left;
}

QVBoxLayout* CompareView::buildControls() {
  figure_ = new QComboBox(this);
  figure_->setObjectName(QStringLiteral("compareFigure"));
  // The papers' figure titles are long: keep the view narrow enough for a dock.
  figure_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  figure_->setMinimumContentsLength(22);
  for (const FigureInfo& info : figure_catalog()) {
    figure_->addItem(QString::fromStdString(info.title), QString::fromStdString(info.name));
    figure_->setItemData(figure_->count() - 1, QString::fromStdString(info.description), Qt::ToolTipRole);
  }
  metric_ = new QComboBox(this);
  metric_->setObjectName(QStringLiteral("compareMetric"));
  metric_->addItem(kDefaultMetric);
  metric_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  xAxis_ = new QComboBox(this);
  xAxis_->setObjectName(QStringLiteral("compareXAxis"));
  xAxis_->addItem(tr("Step"), QStringLiteral("step"));
  xAxis_->addItem(tr("Tokens"), QStringLiteral("tokens"));
  xAxis_->addItem(tr("Cumulative FLOPs"), QStringLiteral("flops"));
  xAxis_->addItem(tr("Wall time (s)"), QStringLiteral("wall"));
  smoothing_ = new QDoubleSpinBox(this);
  smoothing_->setRange(0.0, 0.99);
  smoothing_->setSingleStep(0.05);
  smoothing_->setDecimals(2);
  smoothing_->setValue(0.6);
  smoothing_->setToolTip(tr("Debiased EMA weight of training series (0 = raw only)"));
  budgets_ = new QLineEdit(this);
  budgets_->setObjectName(QStringLiteral("compareBudgets"));
  budgets_->setPlaceholderText(tr("auto (e.g. 1e12, 2e12)"));
  budgets_->setToolTip(tr("x values (in the x axis' unit) at which the matched figure and table read the metric; "
                          "empty: five budgets up to the largest x every run reaches"));
  gridOptions_ = new QLineEdit(this);
  gridOptions_->setObjectName(QStringLiteral("compareGridOptions"));
  gridOptions_->setPlaceholderText(tr("auto: e.g. train.lr, model.capacity"));
  gridOptions_->setToolTip(tr(kGridTip));
  gridOptions_->setMinimumWidth(fontMetrics().horizontalAdvance(gridOptions_->placeholderText()) + 12);
  gridWords_ = new WordCompleter(gridOptions_);  // the keys the checked runs differ in (showGridField)
  // Shown where a sweep grid is the figure or the table (showGridField), beside the figure box.
  gridBox_ = new QWidget(this);
  auto* gridLayout = new QHBoxLayout(gridBox_);
  gridLayout->setContentsMargins(0, 0, 0, 0);
  gridLayout->addWidget(new QLabel(tr("Grid"), gridBox_));
  gridLayout->addWidget(gridOptions_);
  step_ = new QSpinBox(this);
  step_->setRange(0, 1'000'000'000);
  step_->setSpecialValueText(tr("last"));
  step_->setToolTip(tr("Evaluation step of routing figures, the step of the sweep's values (last = the latest one)"));
  decisions_ = new QCheckBox(tr("Decisions"), this);
  decisions_->setToolTip(tr("Token maps: colour by the hard routing decision instead of the gate value"));
  decisions_->setEnabled(false);
  refresh_ = new QPushButton(tr("Refresh"), this);
  refresh_->setToolTip(tr("Read the checked runs again"));

  // Three short rows rather than two long ones: the view fits a laptop's workspace beside the left column.
  const auto row = [this](std::initializer_list<std::pair<QString, QWidget*>> items, QWidget* stretching) {
    auto* line = new QHBoxLayout;
    for (const auto& [label, widget] : items) {
      if (!label.isEmpty()) line->addWidget(new QLabel(label, this));
      line->addWidget(widget, widget == stretching ? 1 : 0);
    }
    if (!stretching) line->addStretch(1);
    return line;
  };
  auto* controls = new QVBoxLayout;
  controls->addLayout(row({{tr("Figure"), figure_}, {QString(), gridBox_}}, figure_));
  controls->addLayout(row({{tr("Metric"), metric_}, {tr("x"), xAxis_}, {tr("Smoothing"), smoothing_}}, nullptr));
  controls->addLayout(row({{tr("Budgets"), budgets_}, {tr("Step"), step_}, {QString(), decisions_}, {QString(), refresh_}},
                          budgets_));
  return controls;
}

QWidget* CompareView::buildTablePage() {
  matchedModel_ = new QStandardItemModel(this);
  matchedView_ = readOnlyTable(matchedModel_, QStringLiteral("compareMatchedTable"));
  tableLayout_ = new QComboBox(this);
  tableLayout_->setObjectName(QStringLiteral("compareTableLayout"));
  for (const FigureTableInfo& info : figure_tables()) {  // the figures' tables, then the papers' layouts
    tableLayout_->addItem(QString::fromStdString(info.title), kFigureTable + QString::fromStdString(info.figure));
    tableLayout_->setItemData(tableLayout_->count() - 1, QString::fromStdString(info.description), Qt::ToolTipRole);
  }
  for (const TableSpec& spec : table_specs()) {
    tableLayout_->addItem(QString::fromStdString(spec.name), QString::fromStdString(spec.name));
    tableLayout_->setItemData(tableLayout_->count() - 1, QString::fromStdString(spec.description), Qt::ToolTipRole);
  }
  tableLayout_->setToolTip(
      tr("The table under the figure: a figure's numbers (matched budgets, a grid of two swept options), or a paper "
         "layout (the papers' tables)"));
  copyLatex_ = new QPushButton(tr("Copy as LaTeX"), this);
  saveTable_ = new QPushButton(tr("Save table…"), this);
  auto* matchedPage = new QWidget(this);
  auto* matchedLayout = new QVBoxLayout(matchedPage);
  matchedLayout->setContentsMargins(2, 2, 2, 2);
  matchedLayout->addWidget(matchedView_, 1);
  auto* matchedButtons = new QHBoxLayout;
  matchedButtons->addWidget(new QLabel(tr("Layout"), this));
  matchedButtons->addWidget(tableLayout_);
  matchedButtons->addStretch(1);
  matchedButtons->addWidget(copyLatex_);
  matchedButtons->addWidget(saveTable_);
  matchedLayout->addLayout(matchedButtons);
  return matchedPage;
}

void CompareView::connectControls(QPushButton* copyDiff) {
  connect(filter_, &QLineEdit::textChanged, this, &CompareView::applyFilter);
  connect(runList_, &QListWidget::itemChanged, this, &CompareView::onItemChanged);
  connect(groupSeeds_, &QCheckBox::toggled, this, &CompareView::scheduleUpdate);
  connect(tableLayout_, &QComboBox::currentIndexChanged, this, [this] {
    showGridField();
    scheduleUpdate();
  });
  connect(figure_, &QComboBox::currentIndexChanged, this, [this](int index) {
    figure_->setToolTip(figure_->itemData(index, Qt::ToolTipRole).toString());
    decisions_->setEnabled(colouredByDecisions(figure_->itemData(index).toString()));
    showGridField();
    fillMetric();
    scheduleUpdate();
  });
  connect(metric_, &QComboBox::currentIndexChanged, this, [this] {
    if (metricChoices(figureName()).isEmpty() && !metric_->currentText().isEmpty())
      metricKey_ = metric_->currentText();
    scheduleUpdate();
  });
  connect(xAxis_, &QComboBox::currentIndexChanged, this, &CompareView::scheduleUpdate);
  connect(smoothing_, &QDoubleSpinBox::valueChanged, this, &CompareView::scheduleUpdate);
  connect(budgets_, &QLineEdit::editingFinished, this, &CompareView::scheduleUpdate);
  connect(gridOptions_, &QLineEdit::editingFinished, this, &CompareView::scheduleUpdate);
  connect(step_, &QSpinBox::valueChanged, this, &CompareView::scheduleUpdate);
  connect(decisions_, &QCheckBox::toggled, this, &CompareView::scheduleUpdate);
  connect(refresh_, &QPushButton::clicked, this, &CompareView::refresh);
  connect(copyLatex_, &QPushButton::clicked, this, &CompareView::copyTableAsLatex);
  connect(saveTable_, &QPushButton::clicked, this, &CompareView::saveTableWithDialog);
  connect(copyDiff, &QPushButton::clicked, this, &CompareView::copyDiff);
  copyLatex_->setEnabled(false);
  saveTable_->setEnabled(false);
}

QList<qint64> CompareView::checkedRuns() const {
  QList<qint64> ids(checked_.begin(), checked_.end());
  std::sort(ids.begin(), ids.end());
  return ids;
}

void CompareView::setRunChecked(qint64 runId, bool checked) {
  for (int i = 0; i < runList_->count(); ++i) {
    QListWidgetItem* item = runList_->item(i);
    if (item->data(kIdRole).toLongLong() == runId) item->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
  }
}

bool CompareView::setFigureName(const QString& name) {
  const int index = figure_->findData(name);
  if (index < 0) return false;
  figure_->setCurrentIndex(index);
  return true;
}

QString CompareView::figureName() const { return figure_->currentData().toString(); }

void CompareView::setXAxis(const QString& axis) {
  const int index = xAxis_->findData(axis);
  if (index >= 0) xAxis_->setCurrentIndex(index);
}

void CompareView::setMetric(const QString& key) {
  int index = metric_->findText(key);
  if (index < 0) {
    metric_->addItem(key);
    index = metric_->count() - 1;
  }
  metric_->setCurrentIndex(index);
}

void CompareView::setBudgets(const QString& text) {
  budgets_->setText(text);
  scheduleUpdate();
}

void CompareView::setGroupSeeds(bool on) { groupSeeds_->setChecked(on); }

void CompareView::setShowDecisions(bool on) { decisions_->setChecked(on); }

void CompareView::restoreChoices() {
  const QSettings settings;
  if (const QString figure = settings.value(QStringLiteral("compare/figure")).toString(); !figure.isEmpty())
    setFigureName(figure);
  if (const QString axis = settings.value(QStringLiteral("compare/x")).toString(); !axis.isEmpty()) setXAxis(axis);
  if (const QString key = settings.value(QStringLiteral("compare/metric")).toString(); !key.isEmpty()) setMetric(key);
  smoothing_->setValue(settings.value(QStringLiteral("compare/smoothing"), smoothing_->value()).toDouble());
  groupSeeds_->setChecked(settings.value(QStringLiteral("compare/groupSeeds"), groupSeeds_->isChecked()).toBool());
  tableLayout_->setCurrentIndex(
      std::max(0, tableLayout_->findData(settings.value(QStringLiteral("compare/table")).toString())));
  rememberChoices_ = true;
}

QString CompareView::statusText() const { return status_->text(); }

void CompareView::showRuns(const QList<qint64>& runIds) {
  checked_.clear();
  wanted_.clear();
  QSet<qint64> listed;
  for (const RunSummary& run : runs_) listed.insert(run.id);
  for (const qint64 id : runIds) (listed.contains(id) ? checked_ : wanted_).insert(id);
  fillingList_ = true;
  for (int i = 0; i < runList_->count(); ++i) {
    QListWidgetItem* item = runList_->item(i);
    item->setCheckState(checked_.contains(item->data(kIdRole).toLongLong()) ? Qt::Checked : Qt::Unchecked);
  }
  fillingList_ = false;
  requestMetricKeys();
  scheduleUpdate();
}

void CompareView::refresh() {
  requestMetricKeys();
  scheduleUpdate();
}

void CompareView::setRuns(const QList<RunSummary>& runs) {
  bool selectionChanged = false;
  bool checkedRunMoved = false;
  QHash<qint64, const RunSummary*> before;
  for (const RunSummary& run : runs_) before.insert(run.id, &run);
  QSet<qint64> listed;
  for (const RunSummary& run : runs) {
    listed.insert(run.id);
    if (wanted_.remove(run.id)) {
      checked_.insert(run.id);
      selectionChanged = true;
    }
    if (checked_.contains(run.id)) {
      const RunSummary* old = before.value(run.id, nullptr);
      if (old && (old->lastStep != run.lastStep || old->status != run.status)) checkedRunMoved = true;
    }
  }
  for (auto it = checked_.begin(); it != checked_.end();) {
    if (listed.contains(*it)) {
      ++it;
    } else {
      it = checked_.erase(it);  // deleted or archived
      selectionChanged = true;
    }
  }

  // Same runs in the same order: update texts in place (keeps scrolling and focus); else rebuild.
  bool sameIds = runList_->count() == runs.size();
  for (int i = 0; sameIds && i < runs.size(); ++i)
    sameIds = runList_->item(i)->data(kIdRole).toLongLong() == runs[i].id;
  fillingList_ = true;
  if (sameIds) {
    for (int i = 0; i < runs.size(); ++i) {
      QListWidgetItem* item = runList_->item(i);
      if (item->text() != runText(runs[i])) item->setText(runText(runs[i]));
      item->setCheckState(checked_.contains(runs[i].id) ? Qt::Checked : Qt::Unchecked);
    }
  } else {
    runList_->clear();
    for (const RunSummary& run : runs) {
      auto* item = new QListWidgetItem(runText(run), runList_);
      item->setData(kIdRole, run.id);
      item->setFlags(Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemIsUserCheckable);
      item->setCheckState(checked_.contains(run.id) ? Qt::Checked : Qt::Unchecked);
      item->setToolTip(QStringLiteral("%1 (%2), preset %3, step %4 of %5")
                           .arg(run.name, run.arch, run.preset.isEmpty() ? tr("none") : run.preset)
                           .arg(run.lastStep)
                           .arg(run.totalSteps));
    }
  }
  fillingList_ = false;
  runs_ = runs;
  applyFilter();

  if (selectionChanged) {
    requestMetricKeys();
    scheduleUpdate();
  } else if (checkedRunMoved) {
    // A live or resumed run among the checked ones grew: follow it, but only when someone is looking.
    if (isVisible())
      scheduleUpdate();
    else
      dirty_ = true;
  }
}

void CompareView::applyFilter() {
  const RunSearch query(filter_->text());  // item i shows runs_[i]
  for (int i = 0; i < runList_->count(); ++i) {
    QListWidgetItem* item = runList_->item(i);
    item->setHidden(!query.empty() && (i >= runs_.size() || !query.matches(runs_[i], item->text())));
  }
}

void CompareView::checkShownRuns(bool check) {
  fillingList_ = true;  // one change for the lot, not a request per item
  for (int i = 0; i < runList_->count(); ++i) {
    QListWidgetItem* item = runList_->item(i);
    if (!check || !item->isHidden()) item->setCheckState(check ? Qt::Checked : Qt::Unchecked);
  }
  fillingList_ = false;
  onItemChanged();
}

void CompareView::onItemChanged() {
  if (fillingList_) return;
  QSet<qint64> now;
  for (int i = 0; i < runList_->count(); ++i) {
    const QListWidgetItem* item = runList_->item(i);
    if (item->checkState() == Qt::Checked) now.insert(item->data(kIdRole).toLongLong());
  }
  if (now == checked_) return;  // a text change, not a check
  checked_ = now;
  wanted_.clear();
  requestMetricKeys();
  scheduleUpdate();
}

void CompareView::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (dirty_) {
    dirty_ = false;
    scheduleUpdate();
  }
}

void CompareView::scheduleUpdate() { updateTimer_->start(); }

void CompareView::requestMetricKeys() {
  const quint64 serial = ++keysSerial_;
  const QList<qint64> ids = checkedRuns();
  QMetaObject::invokeMethod(worker_, [worker = worker_, serial, ids] { worker->readMetricKeys(serial, ids); },
                            Qt::QueuedConnection);
}

void CompareView::onMetricKeys(quint64 serial, const QStringList& keys) {
  if (serial != keysSerial_) return;  // the selection changed since
  metricKeys_ = keys;
  fillMetric();
}

void CompareView::fillMetric() {
  const QString current = metric_->currentText();
  const QStringList choices = metricChoices(figureName());
  const QStringList items = !choices.isEmpty()       ? choices
                            : metricKeys_.isEmpty() ? QStringList{kDefaultMetric}
                                                    : metricKeys_;
  QString chosen = choices.isEmpty() ? metricKey_ : current;
  if (!items.contains(chosen))
    chosen = choices.isEmpty() && items.contains(kDefaultMetric) ? kDefaultMetric : items.first();
  {
    const QSignalBlocker blocker(metric_);
    metric_->clear();
    metric_->addItems(items);
    metric_->setCurrentIndex(std::max(0, metric_->findText(chosen)));
  }
  metric_->setToolTip(choices.isEmpty() ? tr("The metric curves, matched budgets and Pareto fronts read")
                                        : tr("What this figure shows: %1").arg(choices.join(QStringLiteral(", "))));
  if (metric_->currentText() != current) scheduleUpdate();
}

void CompareView::showGridField() {
  gridBox_->setVisible(figureName() == kSweepGrid || tableChoice().first == kSweepGrid.toStdString());
  QStringList options;  // what the field can name: the keys the runs differ in but the run section and the architecture
  for (const ConfigDiffRow& row : diff_.rows)
    if (row.key.rfind("run.", 0) != 0 && row.key != "model.arch") options << QString::fromStdString(row.key);
  gridOptions_->setToolTip(
      tr(kGridTip) + (options.isEmpty() ? QString() : tr("\nThe checked runs differ in: %1").arg(options.join(", "))));
  gridWords_->setWords(options);
}

std::pair<std::string, std::string> CompareView::tableChoice() const {
  const QString layout = tableLayout_->currentData().toString();
  if (layout.startsWith(kFigureTable)) return {layout.mid(kFigureTable.size()).toStdString(), ""};
  return {"", layout.toStdString()};
}

std::vector<double> CompareView::parseBudgets(QString* error) const {
  std::vector<double> budgets;
  for (const QString& part : listItems(budgets_->text())) {
    bool ok = false;
    const double value = part.toDouble(&ok);  // C locale: "1e12", "2.5e9"
    if (!ok || !std::isfinite(value)) {
      *error = tr("Budgets: '%1' is not a number").arg(part);
      return {};
    }
    budgets.push_back(value);
  }
  std::sort(budgets.begin(), budgets.end());
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
  return budgets;
}

void CompareView::sendRequest() {
  const QList<qint64> ids = checkedRuns();
  if (ids.isEmpty()) {
    worker_->want(++serial_);  // whatever is in flight is stale now
    pending_.reset();
    figureView_->setFigure(Figure{});
    table_.reset();
    diff_ = ConfigDiff{};
    showTable();
    showDiff();
    setStatus(tr("Check runs to compare."), false);
    return;
  }
  CompareRequest request;
  FigureRequest& figure = request.figure;
  figure.name = figureName().toStdString();
  for (const qint64 id : ids) figure.run_ids.push_back(id);
  // A figure with metric choices reads the box's choice; the matched table keeps reading the metric key.
  figure.metric = metricKey_.toStdString();
  if (!metricChoices(figureName()).isEmpty()) request.figureMetric = metric_->currentText().toStdString();
  if (colouredByDecisions(figureName())) request.figureMetric = decisions_->isChecked() ? "decision" : "gate";
  std::tie(request.figureTable, request.tableName) = tableChoice();
  figure.x_axis = xAxis_->currentData().toString().toStdString();
  figure.smoothing = smoothing_->value();
  figure.by_seed = groupSeeds_->isChecked();
  figure.step = step_->value();
  QString budgetError;
  figure.budgets = parseBudgets(&budgetError);
  for (const QString& key : listItems(gridOptions_->text())) figure.options.push_back(key.toStdString());
  budgets_->setStyleSheet(budgetError.isEmpty() ? QString() : QStringLiteral("QLineEdit { color: #b00020; }"));
  latestNotes_.clear();
  if (!budgetError.isEmpty()) latestNotes_ << budgetError;
  for (const FigureInfo& info : figure_catalog()) {
    if (info.name == figure.name && static_cast<std::size_t>(ids.size()) < info.min_runs) {
      latestNotes_ << tr("“%1” needs at least %2 runs.").arg(figure_->currentText()).arg(info.min_runs);
      figure.name.clear();
    }
  }
  request.serial = ++serial_;
  worker_->want(serial_);  // a build in progress for an older request stops
  if (rememberChoices_) {
    QSettings settings;
    settings.setValue(QStringLiteral("compare/figure"), figureName());
    settings.setValue(QStringLiteral("compare/x"), xAxis_->currentData().toString());
    settings.setValue(QStringLiteral("compare/metric"), metric_->currentText());
    settings.setValue(QStringLiteral("compare/smoothing"), smoothing_->value());
    settings.setValue(QStringLiteral("compare/groupSeeds"), groupSeeds_->isChecked());
    settings.setValue(QStringLiteral("compare/table"), tableLayout_->currentData().toString());
  }
  setStatus(tr("Building…"), false);
  if (inFlight_) {
    pending_ = request;  // latest wins: an older pending request is never built
    return;
  }
  inFlight_ = true;
  QMetaObject::invokeMethod(worker_, [worker = worker_, request] { worker->build(request); }, Qt::QueuedConnection);
}

void CompareView::onResult(const CompareResult& result) {
  inFlight_ = false;
  if (pending_) {
    const CompareRequest next = *pending_;
    pending_.reset();
    inFlight_ = true;
    QMetaObject::invokeMethod(worker_, [worker = worker_, next] { worker->build(next); }, Qt::QueuedConnection);
  }
  if (result.serial != serial_) return;  // stale: a newer request is in flight or the selection was cleared

  QStringList errors = latestNotes_;
  if (result.figure) {
    figureView_->setFigure(*result.figure);
  } else {
    figureView_->setFigure(Figure{});
    if (!result.figureError.isEmpty()) errors << result.figureError;
  }
  table_ = result.table;
  if (!result.tableError.isEmpty()) errors << tr("Table: %1").arg(result.tableError);
  diff_ = result.diff;
  if (!result.diffError.isEmpty()) errors << tr("Config diff: %1").arg(result.diffError);
  showTable();
  showDiff();
  showGridField();  // its tooltip names the keys the runs differ in

  if (!errors.isEmpty())
    setStatus(errors.join(QStringLiteral(" · ")), true);
  else
    setStatus(tr("%1: %2 panel(s), %3 run(s), built in %4 s")
                  .arg(figure_->currentText())
                  .arg(result.figure ? result.figure->panels.size() : 0)
                  .arg(checked_.size())
                  .arg(result.seconds, 0, 'f', 2),
              false);
  shownSerial_ = result.serial;
  Q_EMIT resultShown(result.serial);
}

void CompareView::setStatus(const QString& text, bool error) {
  status_->setText(text);
  status_->setStyleSheet(error ? QStringLiteral("QLabel { color: #b00020; }") : QString());
}

}  // namespace routelab
