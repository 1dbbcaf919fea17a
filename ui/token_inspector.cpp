// TokenInspector: controls and results on the GUI thread; InspectorWorker opens runs (core/analysis/token_trace)
// and traces texts on its own thread. Results cross as ProbeSnapshot values parsed from the same JSON the
// trainer stores for its probe, and are drawn with the dashboard's token rows (probeRows).
#include "ui/token_inspector.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QThread>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <functional>
#include <list>
#include <tuple>
#include <utility>

#include "core/analysis/token_trace.h"
#include "core/models/registry.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "core/util/paths.h"
#include "ui/dashboard_loader.h"
#include "ui/run_dashboard.h"
#include "ui/store_service.h"
#include "widgets/token_routing_widget.h"
#include "widgets/word_completer.h"

namespace routelab {
namespace {

constexpr const char* kDefaultText = "In the beginning God created the heaven and the earth.";

QString runLabel(const RunSummary& r) {
  return QStringLiteral("%1 · %2 · %3 · %4").arg(r.id).arg(r.name, r.arch, r.status);
}

/// A run combo item's role holding the options field's tooltip for that run.
constexpr int kOptionsHelpRole = Qt::UserRole + 1;
constexpr int kOptionsWordsRole = Qt::UserRole + 2;

/// The options field's tooltip for run `r`: its architecture's options marked for inference, each with its values and
/// the value the run was trained with.
QString optionsHelp(const RunSummary& r) {
  QStringList lines{QObject::tr("Model options to trace run %1 with, as key=value separated by spaces (any model "
                                "option; the log names one the weights were not trained with).")
                        .arg(r.id)};
  try {
    for (const OptionSpec& spec : architecture(r.arch.toStdString()).options) {
      if (!spec.inference) continue;
      QString values;
      if (!spec.choices.empty()) {
        QStringList choices;
        for (const auto& c : spec.choices) choices << QString::fromStdString(c);
        values = choices.join(QStringLiteral(" | "));
      } else if (spec.min && spec.max) {
        values = QStringLiteral("%1 – %2").arg(*spec.min).arg(*spec.max);
      }
      const QVariant trained = r.config.value(QStringLiteral("model.") + QString::fromStdString(spec.key));
      lines << QStringLiteral("%1: %2%3 — %4")
                   .arg(QString::fromStdString(spec.key), values,
                        trained.isValid() ? QObject::tr(" (trained: %1)").arg(trained.toString()) : QString(),
                        QString::fromStdString(spec.help));
    }
  } catch (const std::exception&) {  // an architecture this build does not know: its runs cannot be traced either
  }
  if (lines.size() == 1) lines << QObject::tr("%1 has no options marked for inference.").arg(r.arch);
  return lines.join(QLatin1Char('\n'));
}

/// What the options field completes for a run: each inference option as "key=value" for each of its choices, else
/// "key=" (the value typed after it).
QStringList optionsWords(const RunSummary& r) {
  QStringList words;
  try {
    for (const OptionSpec& spec : architecture(r.arch.toStdString()).options) {
      if (!spec.inference) continue;
      const auto key = QString::fromStdString(spec.key) + QLatin1Char('=');
      if (spec.choices.empty()) words << key;
      for (const auto& c : spec.choices) words << key + QString::fromStdString(c);
    }
  } catch (const std::exception&) {  // an unknown architecture: nothing to offer (optionsHelp says why)
  }
  return words;
}

/// The overrides typed in an options field ("inference=sparse threshold=0.3", spaces or commas between) as
/// "model.key=value"; an item without a key and '=' goes to `bad` and stops the reading.
QStringList modelSets(const QString& typed, QString* bad) {
  QStringList sets;
  static const QRegularExpression separators(QStringLiteral("[\\s,]+"));
  for (QString item : typed.split(separators, Qt::SkipEmptyParts)) {
    if (item.startsWith(QStringLiteral("model."))) item = item.mid(6);
    if (item.indexOf(QLatin1Char('=')) <= 0) {
      *bad = item;
      return {};
    }
    sets << QStringLiteral("model.") + item;
  }
  return sets;
}

/// The overrides as the header shows them: "inference=sparse threshold=0.3".
QString setsText(const QStringList& sets) {
  QStringList shown;
  for (const QString& set : sets) shown << set.mid(6);
  return shown.join(QLatin1Char(' '));
}

/// Line breaks, tabs and spaces made visible, as in the token view.
QString visible(QString token) {
  return token.replace(QLatin1Char('\n'), QChar(0x23CE)).replace(QLatin1Char('\t'), QChar(0x21E5))
      .replace(QLatin1Char(' '), QChar(0x2423));
}

/// "a 0.312 · b 0.120 · …"
QString topKText(const QVector<ProbeSnapshot::Prediction>& ranked) {
  QStringList parts;
  for (const auto& p : ranked) parts << QStringLiteral("%1 %2").arg(visible(p.text)).arg(p.prob, 0, 'f', 3);
  return parts.join(QStringLiteral(" · "));
}

QTableWidgetItem* cell(const QString& text, const QString& toolTip = QString()) {
  auto* item = new QTableWidgetItem(text);
  item->setFlags(Qt::ItemIsSelectable | Qt::ItemIsEnabled);
  if (!toolTip.isEmpty()) item->setToolTip(toolTip);
  return item;
}

QTableWidgetItem* number(double value, int decimals = 4) {
  return cell(std::isfinite(value) ? QString::number(value, 'f', decimals) : QStringLiteral("–"));
}

}  // namespace

// ---- worker ----------------------------------------------------------------------------------------------------

struct InspectorWorker::Cache {
  std::unique_ptr<RunStore> store;
  /// Most recently used first.
  using Key = std::tuple<qint64, qint64, QString>;  ///< run, step, overrides
  std::list<std::pair<Key, std::unique_ptr<TraceableRun>>> models;
};

InspectorWorker::InspectorWorker(QString dbPath) : dbPath_(std::move(dbPath)), cache_(std::make_unique<Cache>()) {}

InspectorWorker::~InspectorWorker() = default;

void InspectorWorker::listCheckpoints(int side, qint64 runId) {
  QVector<qint64> steps;
  try {
    if (!cache_->store)
      cache_->store = std::make_unique<RunStore>(dbPath_.isEmpty() ? default_db_path() : dbPath_.toStdString(),
                                                 /*mark_crashed=*/false);
    for (const CheckpointRow& c : cache_->store->checkpoints(runId)) steps.push_back(c.step);
    std::sort(steps.begin(), steps.end(), std::greater<>());  // latest first
    Q_EMIT checkpointsListed(side, runId, steps, QString());
  } catch (const std::exception& e) {
    cache_->store.reset();
    Q_EMIT checkpointsListed(side, runId, steps, QString::fromUtf8(e.what()));
  }
}

void InspectorWorker::trace(const InspectorRequest& request) {
  QVector<InspectorResult> results;
  for (const auto& [runId, step, sets] : request.runs) {
    InspectorResult result;
    result.runId = runId;
    result.sets = sets;
    try {
      auto& models = cache_->models;
      const Cache::Key key{runId, step, sets.join(QLatin1Char(' '))};
      auto it = std::find_if(models.begin(), models.end(), [&](const auto& entry) { return entry.first == key; });
      if (it == models.end()) {
        std::vector<std::string> overrides;
        for (const QString& set : sets) overrides.push_back(set.toStdString());
        auto run = std::make_unique<TraceableRun>(open_traceable(dbPath_.toStdString(), runId, step, overrides));
        models.emplace_front(key, std::move(run));
        while (static_cast<int>(models.size()) > kCachedModels) models.pop_back();
      } else {
        models.splice(models.begin(), models, it);
      }
      TraceableRun& run = *models.front().second;
      const auto trace = trace_text(run, request.text.toStdString(), request.topK);
      result.trace = probeSnapshot(read_probe(trace.to_json(), run.step, "trace of the typed text"));
      result.step = run.step;
      result.name = QString::fromStdString(run.name);
      result.arch = QString::fromStdString(run.arch);
      result.layerCount = run.num_layers > 0 ? static_cast<int>(run.num_layers)
                                             : static_cast<int>(result.trace.record.layers.size());
      result.ok = true;
    } catch (const std::exception& e) {  // LibTorch's too (a model's forward): without its backtrace
      result.error = QString::fromStdString(foreign_error_text(e));
      logger("ui")->warn("token inspector: run {}: {}", runId, result.error.toStdString());
    }
    results.push_back(std::move(result));
  }
  Q_EMIT traced(request.id, results);
}

// ---- widget ----------------------------------------------------------------------------------------------------

TokenInspector::TokenInspector(StoreService* store, QWidget* parent) : QWidget(parent), store_(store) {
  setObjectName(QStringLiteral("tokenInspector"));
  qRegisterMetaType<InspectorRequest>();
  qRegisterMetaType<InspectorResult>();
  qRegisterMetaType<QVector<InspectorResult>>();
  qRegisterMetaType<QVector<qint64>>();

  text_ = new QPlainTextEdit(this);
  text_->setObjectName(QStringLiteral("inspectorText"));
  text_->setPlainText(QString::fromUtf8(kDefaultText));
  text_->setPlaceholderText(tr("Text to trace. Classifiers read a sentence pair: premise, line break, hypothesis."));
  text_->setMaximumHeight(90);

  for (int side = 0; side < 2; ++side) {
    runs_[side] = new QComboBox(this);
    runs_[side]->setObjectName(QStringLiteral("inspectorRun%1").arg(side));
    runs_[side]->setMinimumContentsLength(24);
    runs_[side]->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    steps_[side] = new QComboBox(this);
    steps_[side]->setObjectName(QStringLiteral("inspectorStep%1").arg(side));
    steps_[side]->setToolTip(tr("Checkpoint (step) whose weights are used"));
    options_[side] = new QLineEdit(this);
    options_[side]->setObjectName(QStringLiteral("inspectorOptions%1").arg(side));
    options_[side]->setPlaceholderText(tr("options: key=value …"));
    options_[side]->setClearButtonEnabled(true);
    optionWords_[side] = new WordCompleter(options_[side]);  // the run's inference options (requestCheckpoints)
    options_[side]->setMinimumWidth(fontMetrics().horizontalAdvance(QStringLiteral("rope_scaling=yarn rope_factor=4")));
    connect(options_[side], &QLineEdit::returnPressed, this, &TokenInspector::runTrace);
    connect(runs_[side], qOverload<int>(&QComboBox::currentIndexChanged), this,
            [this, side](int) { requestCheckpoints(side); });
  }
  compare_ = new QCheckBox(tr("compare with"), this);
  compare_->setObjectName(QStringLiteral("inspectorCompare"));
  difference_ = new QCheckBox(tr("difference"), this);
  difference_->setObjectName(QStringLiteral("inspectorDifference"));
  difference_->setToolTip(tr("A third map: |A − B| of gates and probabilities, 1 where decisions or experts differ "
                             "(both runs need the same layers and tokens)"));
  colourBy_ = new QComboBox(this);
  colourBy_->setObjectName(QStringLiteral("inspectorColourBy"));
  colourBy_->addItem(tr("gate value"), QStringLiteral("gate"));
  colourBy_->addItem(tr("hard decision"), QStringLiteral("decision"));
  colourBy_->addItem(tr("expert id (TAGAT)"), QStringLiteral("expert"));
  topK_ = new QSpinBox(this);
  topK_->setRange(1, 20);
  topK_->setValue(5);
  topK_->setToolTip(tr("How many next-token predictions per position"));
  runButton_ = new QPushButton(tr("Run"), this);
  runButton_->setObjectName(QStringLiteral("inspectorRunButton"));
  runButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
  runButton_->setToolTip(tr("Trace the text through the chosen run(s) (Ctrl+Return)"));
  status_ = new QLabel(tr("Choose a run with a checkpoint, type a text, Run."), this);
  status_->setObjectName(QStringLiteral("inspectorStatus"));
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* choose = new QFormLayout;
  auto* rowA = new QHBoxLayout;
  rowA->addWidget(runs_[0], 1);
  rowA->addWidget(steps_[0]);
  rowA->addWidget(options_[0]);
  auto* rowB = new QHBoxLayout;
  rowB->addWidget(runs_[1], 1);
  rowB->addWidget(steps_[1]);
  rowB->addWidget(options_[1]);
  choose->addRow(tr("run"), rowA);
  choose->addRow(compare_, rowB);
  auto* options = new QHBoxLayout;
  options->addWidget(new QLabel(tr("colour by"), this));
  options->addWidget(colourBy_);
  options->addWidget(difference_);
  options->addWidget(new QLabel(tr("top-k"), this));
  options->addWidget(topK_);
  options->addStretch(1);
  options->addWidget(runButton_);

  auto* maps = new QWidget(this);
  auto* mapsLayout = new QVBoxLayout(maps);
  mapsLayout->setContentsMargins(0, 0, 0, 0);
  for (int side = 0; side < 2; ++side) {
    headers_[side] = new QLabel(maps);
    headers_[side]->setWordWrap(true);
    maps_[side] = new TokenRoutingWidget(maps);
    maps_[side]->setObjectName(QStringLiteral("inspectorMap%1").arg(side));
    mapsLayout->addWidget(headers_[side]);
    mapsLayout->addWidget(maps_[side], 1);
  }
  diffHeader_ = new QLabel(maps);
  diffMap_ = new TokenRoutingWidget(maps);
  diffMap_->setObjectName(QStringLiteral("inspectorDifferenceMap"));
  mapsLayout->addWidget(diffHeader_);
  mapsLayout->addWidget(diffMap_, 1);

  table_ = new QTableWidget(this);
  table_->setObjectName(QStringLiteral("inspectorPredictions"));
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setTabKeyNavigation(false);
  table_->verticalHeader()->setVisible(false);
  table_->horizontalHeader()->setStretchLastSection(true);

  auto* split = new QSplitter(Qt::Vertical, this);
  split->addWidget(maps);
  split->addWidget(table_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(text_);
  layout->addLayout(choose);
  layout->addLayout(options);
  layout->addWidget(status_);
  layout->addWidget(split, 1);

  thread_ = new QThread(this);
  thread_->setObjectName(QStringLiteral("routelab-inspector"));
  worker_ = new InspectorWorker(store_->dbPath());
  worker_->moveToThread(thread_);
  connect(thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(worker_, &InspectorWorker::checkpointsListed, this, &TokenInspector::onCheckpoints, Qt::QueuedConnection);
  connect(worker_, &InspectorWorker::traced, this, &TokenInspector::onTraced, Qt::QueuedConnection);
  thread_->start();

  connect(store_, &StoreService::runsLoaded, this, &TokenInspector::onRunsLoaded);
  connect(runButton_, &QPushButton::clicked, this, &TokenInspector::runTrace);
  connect(compare_, &QCheckBox::toggled, this, [this] {
    updateControls();
    render();
  });
  connect(difference_, &QCheckBox::toggled, this, [this] { render(); });
  connect(colourBy_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int) { render(); });
  updateControls();
  render();
  store_->requestRuns();
}

TokenInspector::~TokenInspector() {
  thread_->quit();
  thread_->wait();  // a trace in progress finishes first (no tensor work is interrupted)
}

void TokenInspector::onRunsLoaded(const QList<RunSummary>& runs) {
  for (QComboBox* combo : runs_) {
    const qint64 current = combo->currentData().toLongLong();
    QList<qint64> listed;
    for (int i = 0; i < combo->count(); ++i) listed << combo->itemData(i).toLongLong();
    QList<qint64> ids;
    for (const RunSummary& r : runs) ids << r.id;
    if (ids == listed) {  // same runs: refresh the labels (status), and the steps once a newer checkpoint is stored
      const int side = combo == runs_[0] ? 0 : 1;
      for (int i = 0; i < runs.size(); ++i) {
        combo->setItemText(i, runLabel(runs[i]));
        if (runs[i].id == current && runs[i].checkpointStep != newestListedStep(side)) requestCheckpoints(side);
      }
      continue;
    }
    const QSignalBlocker blocker(combo);
    combo->clear();
    for (const RunSummary& r : runs) {
      combo->addItem(runLabel(r), r.id);
      combo->setItemData(combo->count() - 1, optionsHelp(r), kOptionsHelpRole);
      combo->setItemData(combo->count() - 1, optionsWords(r), kOptionsWordsRole);
    }
    const int index = combo->findData(current);
    combo->setCurrentIndex(index >= 0 ? index : (combo->count() > 0 ? 0 : -1));
    if (combo->currentData().toLongLong() != current) requestCheckpoints(combo == runs_[0] ? 0 : 1);
  }
  updateControls();
}

bool TokenInspector::selectRun(int side, qint64 runId) {
  const int index = runs_[side]->findData(runId);
  if (index < 0) return false;
  if (runs_[side]->currentIndex() == index) requestCheckpoints(side);
  else runs_[side]->setCurrentIndex(index);
  return true;
}

void TokenInspector::requestCheckpoints(int side) {
  steps_[side]->clear();
  options_[side]->setToolTip(runs_[side]->currentData(kOptionsHelpRole).toString());
  optionWords_[side]->setWords(runs_[side]->currentData(kOptionsWordsRole).toStringList());
  const qint64 runId = runs_[side]->currentData().toLongLong();
  if (runId <= 0) return;
  QMetaObject::invokeMethod(worker_, [worker = worker_, side, runId] { worker->listCheckpoints(side, runId); },
                            Qt::QueuedConnection);
}

qint64 TokenInspector::newestListedStep(int side) const {
  qint64 newest = -1;
  for (int i = 0; i < steps_[side]->count(); ++i) newest = std::max(newest, steps_[side]->itemData(i).toLongLong());
  return newest;
}

void TokenInspector::onCheckpoints(int side, qint64 runId, const QVector<qint64>& steps, const QString& error) {
  if (runs_[side]->currentData().toLongLong() != runId) return;  // the choice changed meanwhile
  const QVariant chosen = steps_[side]->currentData();  // kept when the list grows
  steps_[side]->clear();
  for (qint64 step : steps) steps_[side]->addItem(tr("step %1").arg(step), step);
  if (const int kept = chosen.isValid() ? steps_[side]->findData(chosen) : -1; kept >= 0)
    steps_[side]->setCurrentIndex(kept);
  const QString none = tr("Run %1 has no checkpoint yet.").arg(runId);
  if (!error.isEmpty()) status_->setText(tr("Run %1: cannot list its checkpoints: %2").arg(runId).arg(error));
  else if (steps.isEmpty()) status_->setText(none);
  else if (status_->text() == none) status_->clear();  // the message no longer holds
  updateControls();
  Q_EMIT checkpointsLoaded(side);
}

void TokenInspector::updateControls() {
  const bool compare = compare_->isChecked();
  runs_[1]->setEnabled(compare);
  steps_[1]->setEnabled(compare);
  options_[1]->setEnabled(compare);
  const bool haveA = steps_[0]->count() > 0, haveB = steps_[1]->count() > 0;
  runButton_->setEnabled(!busy_ && haveA && (!compare || haveB));
  const bool sameLayers = results_.size() == 2 && results_[0].ok && results_[1].ok &&
                          results_[0].layerCount == results_[1].layerCount;
  difference_->setEnabled(compare && sameLayers);
}

void TokenInspector::runTrace() {
  InspectorRequest request;
  request.id = ++lastRequest_;
  request.text = text_->toPlainText();
  request.topK = topK_->value();
  const int sides = compare_->isChecked() ? 2 : 1;
  for (int side = 0; side < sides; ++side) {
    const qint64 runId = runs_[side]->currentData().toLongLong();
    if (runId <= 0 || steps_[side]->count() == 0) {
      status_->setText(tr("Choose a run with a checkpoint first."));
      return;
    }
    QString bad;
    const QStringList sets = modelSets(options_[side]->text(), &bad);
    if (!bad.isEmpty()) {
      status_->setText(tr("Run %1's options: '%2' is not key=value").arg(runId).arg(bad));
      return;
    }
    request.runs.push_back({runId, steps_[side]->currentData().toLongLong(), sets});
  }
  busy_ = true;
  updateControls();
  status_->setText(tr("Tracing… (the first use of a checkpoint loads its model)"));
  QMetaObject::invokeMethod(worker_, [worker = worker_, request] { worker->trace(request); }, Qt::QueuedConnection);
}

void TokenInspector::onTraced(qint64 requestId, const QVector<InspectorResult>& results) {
  if (requestId != lastRequest_) return;  // a newer request supersedes this one
  busy_ = false;
  results_ = results;
  QStringList errors, notes;
  for (const InspectorResult& r : results_) {
    if (!r.ok) errors << tr("run %1: %2").arg(r.runId).arg(r.error);
    else if (r.trace.droppedTokens > 0)
      notes << tr("run %1: the text is longer than the model reads; %2 tokens were cut")
                   .arg(r.runId)
                   .arg(r.trace.droppedTokens);
  }
  if (!errors.isEmpty()) status_->setText(errors.join(QLatin1Char('\n')));
  else status_->setText((QStringList{tr("Traced %1 token(s).").arg(results_.value(0).trace.tokens.size())} + notes)
                            .join(QLatin1Char(' ')));
  updateControls();
  render();
  Q_EMIT traceShown();
}

void TokenInspector::render() {
  const QString mode = colourBy_->currentData().toString();
  QVector<TokenRoutingWidget::Row> rows[2];
  for (int side = 0; side < 2; ++side) {
    const bool shown = side == 0 || compare_->isChecked();
    headers_[side]->setVisible(shown);
    maps_[side]->setVisible(shown);
    if (side >= results_.size() || !results_[side].ok || !shown) {
      maps_[side]->clear();
      headers_[side]->setText(side == 0 ? tr("Run A: no trace yet") : tr("Run B: no trace yet"));
      continue;
    }
    const InspectorResult& r = results_[side];
    rows[side] = probeRows(r.trace, mode);
    maps_[side]->setData(r.trace.tokens, rows[side]);
    QString what = tr("%1 · run %2 %3 (%4) · step %5 · %6 layers · %7 tokens")
                       .arg(side == 0 ? QStringLiteral("A") : QStringLiteral("B"))
                       .arg(r.runId)
                       .arg(r.name, r.arch)
                       .arg(r.step)
                       .arg(r.layerCount)
                       .arg(r.trace.tokens.size());
    if (!r.sets.isEmpty()) what += QStringLiteral(" · ") + setsText(r.sets);
    if (r.trace.task == QLatin1String("classification") && r.trace.predicted >= 0)
      what += tr(" · predicted %1 (p %2)")
                  .arg(r.trace.labels.value(r.trace.predicted))
                  .arg(r.trace.classProbs.value(r.trace.predicted), 0, 'f', 3);
    headers_[side]->setText(what);
  }
  // Difference: row by row where both maps have the same rows and tokens.
  const bool wantDiff = compare_->isChecked() && difference_->isChecked() && difference_->isEnabled();
  QVector<TokenRoutingWidget::Row> diff;
  QString diffNote;
  if (wantDiff) {
    const InspectorResult &a = results_[0], &b = results_[1];
    if (a.trace.tokens != b.trace.tokens) {
      diffNote = tr("Difference unavailable: the runs tokenize the text differently.");
    } else {
      for (const TokenRoutingWidget::Row& ra : rows[0]) {
        const auto it = std::find_if(rows[1].begin(), rows[1].end(),
                                     [&](const TokenRoutingWidget::Row& rb) { return rb.label == ra.label; });
        if (it == rows[1].end()) continue;
        TokenRoutingWidget::Row d;
        d.label = QStringLiteral("Δ %1").arg(ra.label);
        const bool continuous = ra.scale == TokenRoutingWidget::Scale::Unit;
        d.scale = continuous ? TokenRoutingWidget::Scale::Unit : TokenRoutingWidget::Scale::Binary;
        d.valueName = continuous ? tr("|A − B| of %1").arg(ra.valueName) : tr("A and B differ (%1)").arg(ra.valueName);
        for (qsizetype t = 0; t < ra.values.size(); ++t) {
          const double x = ra.values[t], y = it->values.value(t, std::nan(""));
          if (!std::isfinite(x) || !std::isfinite(y)) d.values.push_back(std::nan(""));
          else d.values.push_back(continuous ? std::abs(x - y) : (x != y ? 1.0 : 0.0));
        }
        diff.push_back(d);
      }
      diffNote = tr("A − B: |difference| of gates and probabilities (viridis 0 → 1); decisions and experts: yellow "
                    "where they differ");
    }
  }
  diffHeader_->setVisible(wantDiff);
  diffMap_->setVisible(wantDiff && !diff.isEmpty());
  diffHeader_->setText(diffNote);
  if (wantDiff && !diff.isEmpty()) diffMap_->setData(results_[0].trace.tokens, diff);
  else diffMap_->clear();
  renderTable();
}

void TokenInspector::renderTable() {
  table_->clear();
  QVector<const InspectorResult*> shown;
  for (int side = 0; side < results_.size(); ++side)
    if (results_[side].ok && (side == 0 || compare_->isChecked())) shown.push_back(&results_[side]);
  if (shown.isEmpty()) {
    table_->setRowCount(0);
    table_->setColumnCount(0);
    return;
  }
  const QString tag[2] = {QStringLiteral("A"), QStringLiteral("B")};
  const bool classification = shown[0]->trace.task == QLatin1String("classification");
  if (classification) {
    // One row per class: each run's probability, its prediction marked.
    QStringList header{tr("label")};
    for (int s = 0; s < shown.size(); ++s) header << tr("p %1").arg(tag[s]);
    table_->setColumnCount(static_cast<int>(header.size()));
    table_->setHorizontalHeaderLabels(header);
    const QStringList& labels = shown[0]->trace.labels;
    table_->setRowCount(static_cast<int>(labels.size()));
    for (int c = 0; c < labels.size(); ++c) {
      table_->setItem(c, 0, cell(labels[c]));
      for (int s = 0; s < shown.size(); ++s) {
        const ProbeSnapshot& t = shown[s]->trace;
        auto* item = number(t.classProbs.value(c, std::nan("")), 3);
        if (t.predicted == c) item->setText(item->text() + tr("  ◀ predicted"));
        table_->setItem(c, 1 + s, item);
      }
    }
    table_->resizeColumnsToContents();
    return;
  }
  QStringList header{tr("#"), tr("token"), tr("actual next")};
  for (int s = 0; s < shown.size(); ++s) header << tr("p(next) %1").arg(tag[s]) << tr("top-%1 %2").arg(topK_->value()).arg(tag[s]);
  table_->setColumnCount(static_cast<int>(header.size()));
  table_->setHorizontalHeaderLabels(header);
  const QStringList& tokens = shown[0]->trace.tokens;
  table_->setRowCount(static_cast<int>(tokens.size()));
  for (int i = 0; i < tokens.size(); ++i) {
    table_->setItem(i, 0, cell(QString::number(i)));
    table_->setItem(i, 1, cell(visible(tokens[i])));
    table_->setItem(i, 2, cell(i + 1 < tokens.size() ? visible(tokens[i + 1]) : tr("(end of text)")));
    for (int s = 0; s < shown.size(); ++s) {
      const ProbeSnapshot& t = shown[s]->trace;
      const double lp = t.nextLogprob.value(i, std::nan(""));
      table_->setItem(i, 3 + 2 * s, number(std::exp(lp), 4));
      const QString ranked = topKText(t.topK.value(i));
      table_->setItem(i, 4 + 2 * s, cell(ranked, ranked));
    }
  }
  table_->resizeColumnsToContents();
}

}  // namespace routelab
