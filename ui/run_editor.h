// The small dialogs of the runs browser (rename, tags, note, delete confirmation) and the removal of a deleted
// run's files. The dialogs only ask; RunsPanel applies the answers through StoreService.
#pragma once
#include <QList>
#include <QString>
#include <QStringList>

#include <optional>

#include "ui/run_progress.h"

class QWidget;

namespace routelab {

/// Asks for a new name; nullopt when cancelled or left empty.
std::optional<QString> askRunName(QWidget* parent, const QString& current);
/// Asks for comma-separated tags (normalised by normalizeTags); nullopt when cancelled.
std::optional<QString> askRunTags(QWidget* parent, const QString& current, int runCount);
/// Asks for a note (multi-line); nullopt when cancelled.
std::optional<QString> askRunNote(QWidget* parent, const QString& current, int runCount);
/// Asks before deleting `runs`, naming them; true on Yes.
bool confirmDeleteRuns(QWidget* parent, const QList<RunSummary>& runs);

/// "b, a,,b " -> "b,a": trimmed, empty and repeated tags dropped, order kept.
QString normalizeTags(const QString& text);
/// Removes the checkpoint files the store listed for `runId` (read before its rows were deleted), then the run's
/// own folder (core/util/paths.h checkpoint_dir). Never touches another store's files. Returns "" on success,
/// else the errors naming the files. Thread-safe (no Qt widgets).
QString removeRunFiles(const QString& dbPath, qint64 runId, const QStringList& checkpointFiles);

}  // namespace routelab
