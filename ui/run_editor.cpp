// Runs browser dialogs (QInputDialog/QMessageBox) and the file removal of deleted runs.
#include "ui/run_editor.h"

#include <QInputDialog>
#include <QLineEdit>
#include <QMessageBox>
#include <QStringList>

#include <filesystem>
#include <system_error>

#include "core/util/paths.h"

namespace routelab {

std::optional<QString> askRunName(QWidget* parent, const QString& current) {
  bool ok = false;
  const QString name =
      QInputDialog::getText(parent, QObject::tr("Rename run"), QObject::tr("Name:"), QLineEdit::Normal, current, &ok)
          .trimmed();
  if (!ok || name.isEmpty()) return std::nullopt;
  return name;
}

std::optional<QString> askRunTags(QWidget* parent, const QString& current, int runCount) {
  bool ok = false;
  const QString label = runCount > 1 ? QObject::tr("Tags of %1 runs (comma-separated):").arg(runCount)
                                     : QObject::tr("Tags (comma-separated):");
  const QString tags = QInputDialog::getText(parent, QObject::tr("Tags"), label, QLineEdit::Normal, current, &ok);
  if (!ok) return std::nullopt;
  return normalizeTags(tags);
}

std::optional<QString> askRunNote(QWidget* parent, const QString& current, int runCount) {
  bool ok = false;
  const QString label = runCount > 1 ? QObject::tr("Note for %1 runs:").arg(runCount) : QObject::tr("Note:");
  const QString note = QInputDialog::getMultiLineText(parent, QObject::tr("Note"), label, current, &ok);
  if (!ok) return std::nullopt;
  return note.trimmed();
}

bool confirmDeleteRuns(QWidget* parent, const QList<RunSummary>& runs) {
  QStringList names;
  constexpr int kNamed = 10;
  for (int i = 0; i < runs.size() && i < kNamed; ++i)
    names << QObject::tr("run %1 · %2").arg(runs[i].id).arg(runs[i].name);
  if (runs.size() > kNamed) names << QObject::tr("… and %1 more").arg(runs.size() - kNamed);
  const QString text = QObject::tr("Delete %n run(s)? Their metrics, evaluations and checkpoint files are removed; "
                                   "this cannot be undone.",
                                   nullptr, static_cast<int>(runs.size()));
  QMessageBox box(QMessageBox::Warning, QObject::tr("Delete runs"), text, QMessageBox::Yes | QMessageBox::Cancel,
                  parent);
  box.setInformativeText(names.join(QLatin1Char('\n')));
  box.setDefaultButton(QMessageBox::Cancel);
  return box.exec() == QMessageBox::Yes;
}

QString normalizeTags(const QString& text) {
  QStringList tags;
  for (const QString& part : text.split(QLatin1Char(','))) {
    const QString tag = part.trimmed();
    if (!tag.isEmpty() && !tags.contains(tag)) tags << tag;
  }
  return tags.join(QLatin1Char(','));
}

QString removeRunFiles(const QString& dbPath, qint64 runId, const QStringList& checkpointFiles) {
  namespace fs = std::filesystem;
  QStringList errors;
  std::error_code ec;
  // The files the store lists first: runs of older versions wrote into a folder shared by every store beside it.
  for (const QString& file : checkpointFiles) {
    const fs::path path = file.toStdString();
    if (fs::remove(path, ec); ec) {
      errors << QObject::tr("%1: cannot remove: %2").arg(file, QString::fromStdString(ec.message()));
      continue;
    }
    const fs::path folder = path.parent_path();
    if (fs::is_directory(folder, ec) && fs::is_empty(folder, ec)) fs::remove(folder, ec);
  }
  // Then the run's own folder (named after the store), with anything left in it.
  const fs::path dir = checkpoint_dir(dbPath.toStdString(), runId);
  if (fs::exists(dir, ec)) {
    fs::remove_all(dir, ec);
    if (ec)
      errors << QObject::tr("%1: cannot remove the checkpoints of run %2: %3")
                    .arg(QString::fromStdString(dir.string()))
                    .arg(runId)
                    .arg(QString::fromStdString(ec.message()));
  }
  return errors.join(QLatin1Char('\n'));
}

}  // namespace routelab
