// RunsTableModel: formatting and colouring of RunSummary rows.
#include "ui/runs_table_model.h"

#include <QColor>
#include <QDateTime>
#include <QFont>
#include <QHash>
#include <QIcon>
#include <QPainter>
#include <QPixmap>

#include <algorithm>
#include <cmath>

namespace routelab {
namespace {

QString formatLoss(double value) {
  if (std::isnan(value)) return QString();
  return QString::number(value, 'f', 4);
}

QString formatTime(double unixSeconds) {
  if (unixSeconds <= 0) return QString();
  return QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(unixSeconds * 1000)).toString(Qt::ISODate);
}

QIcon statusDot(const QColor& colour) {
  static QHash<QRgb, QIcon> cache;  // models live on the GUI thread
  if (auto it = cache.constFind(colour.rgba()); it != cache.constEnd()) return *it;
  QPixmap pixmap(12, 12);
  pixmap.fill(Qt::transparent);
  QPainter painter(&pixmap);
  painter.setRenderHint(QPainter::Antialiasing);
  painter.setPen(Qt::NoPen);
  painter.setBrush(colour);
  painter.drawEllipse(QRectF(1.5, 1.5, 9, 9));
  painter.end();
  return cache.insert(colour.rgba(), QIcon(pixmap)).value();
}

}  // namespace

RunsTableModel::RunsTableModel(QObject* parent) : QAbstractTableModel(parent) {}

int RunsTableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : runs_.size(); }

int RunsTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount + static_cast<int>(configKeys_.size());
}

QColor RunsTableModel::statusColor(const QString& status) {
  if (status == QLatin1String("running")) return QColor(31, 119, 180);
  if (status == QLatin1String("finished")) return QColor(44, 160, 44);
  if (status == QLatin1String("stopped")) return QColor(179, 107, 0);
  if (status == QLatin1String("failed")) return QColor(192, 57, 43);
  if (status == QLatin1String("crashed")) return QColor(142, 20, 20);
  return QColor(Qt::gray);
}

QVariant RunsTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= runs_.size()) return {};
  const RunSummary& run = runs_[index.row()];
  if (role == RunIdRole) return run.id;
  if (role == StatusRole) return run.status;
  if (role == ArchivedRole) return run.archived;
  if (role == SearchRole) {
    QStringList words{QString::number(run.id), run.name, run.arch, QStringLiteral("seed %1").arg(run.seed),
                      run.status, run.tags, run.notes};
    for (int k = 0; k < configKeys_.size(); ++k) {  // "train.lr=0.003": "lr=0.003" matches too
      const QVariant v = configValue(run, ColumnCount + k);
      if (v.isValid()) words << configKeys_[k] + QLatin1Char('=') + v.toString();
    }
    return words.join(QLatin1Char('\n'));
  }
  if (index.column() >= ColumnCount) {
    const QVariant v = configValue(run, index.column());
    if (role == Qt::DisplayRole) return v.isValid() ? v.toString() : QString();
    if (role == SortRole) return v.typeId() == QMetaType::Double ? v : QVariant(v.toString().toLower());
    if (role == Qt::TextAlignmentRole && v.typeId() == QMetaType::Double)
      return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    if (role != Qt::ToolTipRole && role != Qt::FontRole) return {};
  }
  if (role == SortRole) {
    switch (index.column()) {
      case IdColumn: return run.id;
      case SeedColumn: return run.seed;
      case StepsColumn: return run.lastStep;
      case TrainLossColumn: return run.lastTrainLoss;
      case ValLossColumn: return run.lastValLoss;
      case BestValLossColumn: return run.bestValLoss;
      case DurationColumn: return durationSeconds(run);
      default: return data(index, Qt::DisplayRole).toString().toLower();
    }
  }

  switch (role) {
    case Qt::DisplayRole:
      switch (index.column()) {
        case IdColumn: return run.id;
        case NameColumn: return run.name;
        case ArchColumn: return run.arch;
        case SeedColumn: return run.seed;
        case StatusColumn: return run.status;
        case StepsColumn:
          return run.totalSteps > 0 ? QStringLiteral("%1 / %2").arg(run.lastStep).arg(run.totalSteps)
                                    : QString::number(run.lastStep);
        case TrainLossColumn: return formatLoss(run.lastTrainLoss);
        case ValLossColumn: return formatLoss(run.lastValLoss);
        case BestValLossColumn: return formatLoss(run.bestValLoss);
        case DurationColumn: return formatDuration(durationSeconds(run));
        case DeviceColumn: return run.device;
        case TagsColumn: return run.tags;
      }
      break;
    case Qt::ForegroundRole:
      if (index.column() == StatusColumn) return statusColor(run.status);
      break;
    case Qt::DecorationRole:
      if (index.column() == StatusColumn) return statusDot(statusColor(run.status));
      break;
    case Qt::FontRole:
      if (run.archived) {
        QFont font;
        font.setItalic(true);
        return font;
      }
      if (index.column() == StatusColumn && (run.status == QLatin1String("crashed") ||
                                             run.status == QLatin1String("failed"))) {
        QFont font;
        font.setBold(true);
        return font;
      }
      break;
    case Qt::TextAlignmentRole:
      if (index.column() == IdColumn || index.column() == SeedColumn ||
          (index.column() >= StepsColumn && index.column() <= DurationColumn))
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
      break;
    case Qt::ToolTipRole: {
      QStringList lines{QStringLiteral("run %1: %2").arg(run.id).arg(run.name)};
      lines << tr("%1, seed %2").arg(run.arch).arg(run.seed);
      if (!run.preset.isEmpty()) lines << tr("preset: %1").arg(run.preset);
      lines << tr("status: %1").arg(run.status);
      if (!run.message.isEmpty()) lines << run.message;
      if (run.createdAt > 0) lines << tr("started: %1").arg(formatTime(run.createdAt));
      if (run.endedAt > 0) lines << tr("ended: %1").arg(formatTime(run.endedAt));
      if (!std::isnan(run.bestValLoss)) lines << tr("best val loss: %1").arg(formatLoss(run.bestValLoss));
      if (run.resumedFromStep) lines << tr("resumed from step %1").arg(*run.resumedFromStep);
      if (run.checkpointStep >= 0) lines << tr("latest checkpoint: step %1").arg(run.checkpointStep);
      if (!run.tags.isEmpty()) lines << tr("tags: %1").arg(run.tags);
      if (!run.notes.isEmpty()) lines << tr("note: %1").arg(run.notes);
      if (run.archived) lines << tr("archived");
      return lines.join(QLatin1Char('\n'));
    }
    default: break;
  }
  return {};
}

QVariant RunsTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, orientation, role);
  switch (section) {
    case IdColumn: return tr("ID");
    case NameColumn: return tr("Name");
    case ArchColumn: return tr("Architecture");
    case SeedColumn: return tr("Seed");
    case StatusColumn: return tr("Status");
    case StepsColumn: return tr("Steps");
    case TrainLossColumn: return tr("Train loss");
    case ValLossColumn: return tr("Val loss");
    case BestValLossColumn: return tr("Best val");
    case DurationColumn: return tr("Duration");
    case DeviceColumn: return tr("Device");
    case TagsColumn: return tr("Tags");
  }
  if (section >= ColumnCount && section - ColumnCount < configKeys_.size()) return configKeys_[section - ColumnCount];
  return {};
}

double RunsTableModel::durationSeconds(const RunSummary& run) {
  if (run.createdAt <= 0) return kNoValue;
  const double end = run.endedAt > 0 ? run.endedAt : run.heartbeatAt;
  return end >= run.createdAt ? end - run.createdAt : kNoValue;
}

QString RunsTableModel::formatDuration(double seconds) {
  if (std::isnan(seconds)) return QString();
  const qint64 s = static_cast<qint64>(std::llround(seconds));
  if (s < 60) return tr("%1 s").arg(s);
  if (s < 3600) return tr("%1 min %2 s").arg(s / 60).arg(s % 60);
  return tr("%1 h %2 min").arg(s / 3600).arg(s % 3600 / 60, 2, 10, QLatin1Char('0'));
}

void RunsTableModel::setRuns(QList<RunSummary> runs) {
  std::sort(runs.begin(), runs.end(), [](const RunSummary& a, const RunSummary& b) { return a.id > b.id; });
  const bool sameRows = runs.size() == runs_.size() &&
                        std::equal(runs.begin(), runs.end(), runs_.begin(),
                                   [](const RunSummary& a, const RunSummary& b) { return a.id == b.id; });
  if (sameRows) {
    // Keep selection and scroll position: a periodic refresh only changes values.
    runs_ = std::move(runs);
    if (!runs_.isEmpty()) Q_EMIT dataChanged(index(0, 0), index(runs_.size() - 1, columnCount() - 1));
    return;
  }
  beginResetModel();
  runs_ = std::move(runs);
  endResetModel();
}

void RunsTableModel::setConfigColumns(const QStringList& keys) {
  if (keys == configKeys_) return;
  beginResetModel();
  configKeys_ = keys;
  endResetModel();
}

QVariant RunsTableModel::configValue(const RunSummary& run, int column) const {
  const int k = column - ColumnCount;
  if (k < 0 || k >= configKeys_.size()) return {};
  return run.config.value(configKeys_[k]);
}

int RunsTableModel::rowOf(qint64 id) const {
  for (int row = 0; row < runs_.size(); ++row)
    if (runs_[row].id == id) return row;
  return -1;
}

const RunSummary* RunsTableModel::run(qint64 id) const {
  const int row = rowOf(id);
  return row < 0 ? nullptr : &runs_[row];
}

RunsFilterProxy::RunsFilterProxy(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(RunsTableModel::SortRole);
  setDynamicSortFilter(true);
}

void RunsFilterProxy::setSearchText(const QString& text) {
  RunSearch query(text);
  if (query.text() == query_.text()) return;
  query_ = std::move(query);
  invalidateFilter();
}

void RunsFilterProxy::setShowArchived(bool show) {
  if (show == showArchived_) return;
  showArchived_ = show;
  invalidateFilter();
}

bool RunsFilterProxy::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const {
  const QModelIndex index = sourceModel()->index(sourceRow, 0, sourceParent);
  if (!showArchived_ && index.data(RunsTableModel::ArchivedRole).toBool()) return false;
  if (query_.empty()) return true;
  const auto* model = qobject_cast<const RunsTableModel*>(sourceModel());
  if (!model || sourceRow >= model->runs().size()) return false;
  return query_.matches(model->runs().at(sourceRow), index.data(RunsTableModel::SearchRole).toString());
}

bool RunsFilterProxy::lessThan(const QModelIndex& left, const QModelIndex& right) const {
  const QVariant a = left.data(RunsTableModel::SortRole);
  const QVariant b = right.data(RunsTableModel::SortRole);
  if (a.typeId() == QMetaType::Double || b.typeId() == QMetaType::Double) {
    const double x = a.toDouble(), y = b.toDouble();
    // Missing values (NaN) sort after every number in ascending order.
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return x < y;
  }
  if (a.typeId() == QMetaType::LongLong || a.typeId() == QMetaType::Int) return a.toLongLong() < b.toLongLong();
  return QString::localeAwareCompare(a.toString(), b.toString()) < 0;
}

}  // namespace routelab
