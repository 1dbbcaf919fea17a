// PresetsPanel: the experiment presets (name, architecture, description) from the experiments folder;
// the selected one is what Start trains.
#pragma once
#include <QString>
#include <QStringList>
#include <QWidget>

class QTreeWidget;

namespace routelab {

class PresetsPanel : public QWidget {
  Q_OBJECT

 public:
  explicit PresetsPanel(QWidget* parent = nullptr);

  QSize sizeHint() const override;
  /// Re-reads list_presets(); keeps the selection when the preset still exists. Returns an error message
  /// ("" on success) so the window can show it.
  QString reload();
  QStringList presetNames() const;
  bool hasPreset(const QString& name) const;
  /// Returns false when there is no such preset.
  bool selectPreset(const QString& name);
  QString currentPreset() const;
  QString descriptionOf(const QString& name) const;

 Q_SIGNALS:
  void presetSelected(const QString& name);
  /// Double-click or Enter on a preset.
  void presetActivated(const QString& name);

 private:
  QTreeWidget* tree_ = nullptr;
};

}  // namespace routelab
