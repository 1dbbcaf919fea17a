// PresetsPanel: a flat QTreeWidget filled from routelab::list_presets().
#include "ui/presets_panel.h"

#include <QHeaderView>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "core/config/experiment_config.h"
#include "core/util/logging.h"

namespace routelab {
namespace {

enum PresetColumn { NameColumn, ArchColumn, DescriptionColumn };

}  // namespace

PresetsPanel::PresetsPanel(QWidget* parent) : QWidget(parent) {
  tree_ = new QTreeWidget(this);
  tree_->setObjectName(QStringLiteral("presetsList"));
  tree_->setColumnCount(3);
  tree_->setHeaderLabels({tr("Preset"), tr("Architecture"), tr("Description")});
  tree_->setRootIsDecorated(false);
  tree_->setUniformRowHeights(true);
  tree_->setAlternatingRowColors(true);
  tree_->setSelectionMode(QAbstractItemView::SingleSelection);
  tree_->header()->setStretchLastSection(true);
  tree_->setColumnWidth(NameColumn, 150);
  tree_->setColumnWidth(ArchColumn, 80);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(tree_);

  connect(tree_, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* current) {
    if (current) Q_EMIT presetSelected(current->text(NameColumn));
  });
  connect(tree_, &QTreeWidget::itemActivated, this,
          [this](QTreeWidgetItem* item) { Q_EMIT presetActivated(item->text(NameColumn)); });
}

QSize PresetsPanel::sizeHint() const { return {560, 200}; }

QString PresetsPanel::reload() {
  const QString previous = currentPreset();
  tree_->clear();
  std::vector<PresetInfo> presets;
  try {
    presets = list_presets();
  } catch (const std::exception& e) {
    logger("ui")->error("cannot list presets: {}", e.what());
    return QString::fromUtf8(e.what());
  }
  for (const PresetInfo& p : presets) {
    auto* item = new QTreeWidgetItem(tree_);
    item->setText(NameColumn, QString::fromStdString(p.name));
    item->setText(ArchColumn, QString::fromStdString(p.arch));
    item->setText(DescriptionColumn, QString::fromStdString(p.description));
    const QString tip = QStringLiteral("%1 (%2)\n%3\n%4")
                            .arg(item->text(NameColumn), item->text(ArchColumn), item->text(DescriptionColumn),
                                 QString::fromStdString(p.path));
    for (int column = 0; column < 3; ++column) item->setToolTip(column, tip);
  }
  if (!previous.isEmpty()) selectPreset(previous);
  if (presets.empty()) logger("ui")->warn("no experiment presets found");
  return QString();
}

QStringList PresetsPanel::presetNames() const {
  QStringList names;
  for (int i = 0; i < tree_->topLevelItemCount(); ++i) names << tree_->topLevelItem(i)->text(NameColumn);
  return names;
}

bool PresetsPanel::hasPreset(const QString& name) const { return presetNames().contains(name); }

bool PresetsPanel::selectPreset(const QString& name) {
  for (int i = 0; i < tree_->topLevelItemCount(); ++i) {
    QTreeWidgetItem* item = tree_->topLevelItem(i);
    if (item->text(NameColumn) == name) {
      tree_->setCurrentItem(item);
      tree_->scrollToItem(item);
      return true;
    }
  }
  return false;
}

QString PresetsPanel::currentPreset() const {
  const QTreeWidgetItem* item = tree_->currentItem();
  return item ? item->text(NameColumn) : QString();
}

QString PresetsPanel::descriptionOf(const QString& name) const {
  for (int i = 0; i < tree_->topLevelItemCount(); ++i)
    if (tree_->topLevelItem(i)->text(NameColumn) == name) return tree_->topLevelItem(i)->text(DescriptionColumn);
  return QString();
}

}  // namespace routelab
