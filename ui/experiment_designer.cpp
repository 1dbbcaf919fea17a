// ExperimentDesigner: one editor per OptionSpec (check box, combo box or line edit), an error label under each,
// and a status line with the resolved config's hash or the error no field owns.
#include "ui/experiment_designer.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QTabWidget>
#include <QVBoxLayout>

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/config/experiment_config.h"
#include "core/config/options.h"
#include "core/models/registry.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

using nlohmann::json;

const QStringList kSections{QStringLiteral("model"), QStringLiteral("data"), QStringLiteral("train"),
                            QStringLiteral("run")};

QString specText(const json& value) {
  if (value.is_string()) return QString::fromStdString(value.get<std::string>());
  return QString::fromStdString(value.dump());
}

QString toolTipFor(const OptionSpec& spec, const QString& path) {
  QString tip = QStringLiteral("<b>%1</b> (%2)<br>%3").arg(path, QString::fromStdString(to_string(spec.type)),
                                                           QString::fromStdString(spec.help).toHtmlEscaped());
  if (spec.min || spec.max)
    tip += QStringLiteral("<br>range: [%1, %2]")
               .arg(spec.min ? QString::number(*spec.min) : QStringLiteral("−∞"),
                    spec.max ? QString::number(*spec.max) : QStringLiteral("∞"));
  if (!spec.choices.empty()) {
    QStringList choices;
    for (const auto& c : spec.choices) choices << QString::fromStdString(c);
    tip += QStringLiteral("<br>one of: %1").arg(choices.join(QStringLiteral(", ")));
  }
  tip += QStringLiteral("<br>default: %1").arg(specText(spec.default_value).toHtmlEscaped());
  return tip;
}

}  // namespace

struct ExperimentDesigner::Impl {
  struct Field {
    QString section;
    OptionSpec spec;
    QWidget* editor = nullptr;
    QLabel* error = nullptr;
    json value;
    QString fieldError;  ///< from parse/validate of this field alone
    QString note;        ///< a valid value the config will not read (unread_config_keys), shown under it in amber
  };
  QComboBox* arch = nullptr;
  QComboBox* preset = nullptr;
  QTabWidget* tabs = nullptr;
  QLabel* status = nullptr;
  QPushButton* launch = nullptr;
  QListWidget* also = nullptr;  ///< further architectures Launch starts with the same settings
  QLineEdit* seeds = nullptr;   ///< "1,2,3" / "1-3": one run per seed
  QSpinBox* processes = nullptr;  ///< data-parallel ranks on this machine (1: one process)
  std::map<QString, QWidget*> pages;  ///< section -> its form page
  std::map<QString, Field> fields;    ///< "section.key" -> field
  QString formError, resolved;
  bool valid = false, launchEnabled = true, building = false;
  QString presetName;

  const OptionSchema& schema(const QString& section) const {
    if (section == QLatin1String("data")) return data_schema();
    if (section == QLatin1String("train")) return train_schema();
    if (section == QLatin1String("run")) return run_schema();
    return routelab::architecture(arch->currentData().toString().toStdString()).options;
  }
};

ExperimentDesigner::ExperimentDesigner(QWidget* parent) : QWidget(parent), d_(std::make_unique<Impl>()) {
  setObjectName(QStringLiteral("experimentDesigner"));
  d_->arch = new QComboBox(this);
  d_->arch->setObjectName(QStringLiteral("designerArch"));
  for (const ArchitectureEntry& e : architectures()) {
    d_->arch->addItem(QStringLiteral("%1 — %2").arg(QString::fromStdString(e.id), QString::fromStdString(e.display_name)),
                      QString::fromStdString(e.id));
    d_->arch->setItemData(d_->arch->count() - 1, QString::fromStdString(e.description), Qt::ToolTipRole);
  }
  d_->preset = new QComboBox(this);
  d_->preset->setObjectName(QStringLiteral("designerPreset"));
  d_->preset->addItem(tr("(defaults)"), QString());
  try {
    for (const PresetInfo& p : list_presets())
      d_->preset->addItem(QString::fromStdString(p.name), QString::fromStdString(p.name));
  } catch (const Error&) {
    // No experiments folder: the defaults remain.
  }
  d_->tabs = new QTabWidget(this);
  for (const QString& section : kSections) {
    auto* scroll = new QScrollArea(this);
    scroll->setWidgetResizable(true);
    d_->tabs->addTab(scroll, section);
    d_->pages[section] = scroll;
  }
  d_->status = new QLabel(this);
  d_->status->setObjectName(QStringLiteral("designerStatus"));
  d_->status->setWordWrap(true);
  d_->launch = new QPushButton(tr("Launch"), this);
  d_->launch->setObjectName(QStringLiteral("designerLaunch"));
  d_->launch->setToolTip(tr("Train this configuration (a dashboard opens for the run)"));

  d_->also = new QListWidget(this);
  d_->also->setObjectName(QStringLiteral("designerAlso"));
  d_->also->setToolTip(tr("Launch also starts these architectures with the same data, train and run settings and "
                          "the form's Transformer shape and style (their own defaults for routing options)"));
  for (const ArchitectureEntry& e : architectures()) {
    auto* item = new QListWidgetItem(QString::fromStdString(e.id), d_->also);
    item->setData(Qt::UserRole, QString::fromStdString(e.id));
    item->setFlags(Qt::ItemIsUserCheckable | Qt::ItemIsEnabled);
    item->setCheckState(Qt::Unchecked);
    item->setToolTip(QString::fromStdString(e.display_name));
  }
  d_->also->setFlow(QListView::LeftToRight);
  d_->also->setWrapping(true);
  d_->also->setMaximumHeight(56);
  d_->seeds = new QLineEdit(this);
  d_->seeds->setObjectName(QStringLiteral("designerSeeds"));
  d_->seeds->setPlaceholderText(tr("run.seed of the form; or 1,2,3 or 1-3: one run per seed"));

  d_->processes = new QSpinBox(this);
  d_->processes->setObjectName(QStringLiteral("designerProcesses"));
  d_->processes->setRange(1, 64);
  d_->processes->setToolTip(tr("Data parallel on this machine: the run's global batch (batch size x accumulation) "
                               "is split over this many processes (Gloo on the CPU, NCCL on GPUs); 1: one process"));

  auto* top = new QFormLayout;
  top->addRow(tr("Architecture"), d_->arch);
  top->addRow(tr("Also as"), d_->also);
  top->addRow(tr("Seeds"), d_->seeds);
  top->addRow(tr("Processes"), d_->processes);
  top->addRow(tr("Preset"), d_->preset);
  auto* bottom = new QHBoxLayout;
  bottom->addWidget(d_->status, 1);
  bottom->addWidget(d_->launch);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(top);
  layout->addWidget(d_->tabs, 1);
  layout->addLayout(bottom);

  connect(d_->arch, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int) {
    if (d_->building) return;
    // Options both architectures share (shape, style, ...) keep what the user typed.
    QList<QPair<QString, QString>> kept;
    for (const auto& [path, field] : d_->fields) {
      if (field.section != QLatin1String("model")) continue;
      if (auto* box = qobject_cast<QCheckBox*>(field.editor)) kept.append({path, box->isChecked() ? "true" : "false"});
      else if (auto* combo = qobject_cast<QComboBox*>(field.editor)) kept.append({path, combo->currentText()});
      else if (auto* edit = qobject_cast<QLineEdit*>(field.editor)) kept.append({path, edit->text()});
    }
    rebuildSection(QStringLiteral("model"));
    for (const auto& [path, text] : kept) setFieldText(path, text);
    validate();
  });
  connect(d_->preset, qOverload<int>(&QComboBox::activated), this,
          [this](int index) { loadPreset(d_->preset->itemData(index).toString()); });
  connect(d_->launch, &QPushButton::clicked, this, [this] {
    if (!isValid()) return;
    QString error;
    const QList<RunRequest> runs = requests(&error);
    if (runs.isEmpty()) {
      d_->status->setText(error);
      d_->status->setStyleSheet(QStringLiteral("color:#c0392b;"));
      return;
    }
    for (const RunRequest& r : runs) Q_EMIT launchRequested(r);
  });
  connect(d_->seeds, &QLineEdit::textChanged, this, [this] { validate(); });
  connect(d_->also, &QListWidget::itemChanged, this, [this] { validate(); });
  connect(d_->processes, &QSpinBox::valueChanged, this, [this] { validate(); });  // the dist_* options' notes

  for (const QString& section : kSections) rebuildSection(section);
  validate();
}

ExperimentDesigner::~ExperimentDesigner() = default;

QString ExperimentDesigner::architecture() const { return d_->arch->currentData().toString(); }

bool ExperimentDesigner::setArchitecture(const QString& id) {
  const int index = d_->arch->findData(id);
  if (index < 0) return false;
  if (index == d_->arch->currentIndex()) return true;
  d_->arch->setCurrentIndex(index);  // rebuilds the model section
  return true;
}

void ExperimentDesigner::rebuildSection(const QString& section) {
  for (auto it = d_->fields.begin(); it != d_->fields.end();)
    it = it->second.section == section ? d_->fields.erase(it) : std::next(it);
  auto* scroll = static_cast<QScrollArea*>(d_->pages[section]);
  auto* page = new QWidget;
  auto* form = new QFormLayout(page);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  for (const OptionSpec& spec : d_->schema(section)) {
    const QString path = section + QLatin1Char('.') + QString::fromStdString(spec.key);
    Impl::Field field;
    field.section = section;
    field.spec = spec;
    field.value = spec.default_value;
    auto* cell = new QWidget(page);
    auto* cellLayout = new QVBoxLayout(cell);
    cellLayout->setContentsMargins(0, 0, 0, 0);
    cellLayout->setSpacing(1);
    if (spec.type == OptionType::Bool) {
      auto* box = new QCheckBox(cell);
      box->setChecked(spec.default_value.get<bool>());
      connect(box, &QCheckBox::toggled, this, [this, path](bool on) {
        d_->fields[path].value = on;
        validate();
      });
      field.editor = box;
    } else if (spec.type == OptionType::Choice) {
      auto* combo = new QComboBox(cell);
      for (const auto& c : spec.choices) combo->addItem(QString::fromStdString(c));
      combo->setCurrentText(specText(spec.default_value));
      connect(combo, &QComboBox::currentTextChanged, this, [this, path](const QString& text) {
        d_->fields[path].value = text.toStdString();
        validate();
      });
      field.editor = combo;
    } else {
      auto* edit = new QLineEdit(specText(spec.default_value), cell);
      edit->setPlaceholderText(specText(spec.default_value));
      connect(edit, &QLineEdit::textChanged, this, [this, path](const QString& text) {
        Impl::Field& f = d_->fields[path];
        f.fieldError.clear();
        try {
          // The core's own parsing and range checks, so the form and the CLI agree on every value.
          json value = parse_value(text.toStdString(), f.spec, path.toStdString());
          validate_value(value, f.spec, path.toStdString());
          f.value = std::move(value);
        } catch (const ConfigError& e) {
          f.fieldError = QString::fromUtf8(e.what());
        }
        validate();
      });
      field.editor = edit;
    }
    field.editor->setObjectName(path);
    field.editor->setToolTip(toolTipFor(spec, path));
    field.error = new QLabel(cell);
    field.error->setObjectName(path + QStringLiteral(".error"));
    field.error->setWordWrap(true);
    field.error->setStyleSheet(QStringLiteral("color:#c0392b;"));
    field.error->setVisible(false);
    cellLayout->addWidget(field.editor);
    cellLayout->addWidget(field.error);
    auto* label = new QLabel(QString::fromStdString(spec.key), page);
    label->setToolTip(field.editor->toolTip());
    form->addRow(label, cell);
    d_->fields[path] = std::move(field);
  }
  scroll->setWidget(page);  // deletes the previous page
}

bool ExperimentDesigner::loadPreset(const QString& name) {
  json overrides = json::object();
  if (!name.isEmpty()) {
    try {
      overrides = load_preset(name.toStdString());
    } catch (const Error& e) {
      d_->formError = QString::fromUtf8(e.what());
      d_->status->setText(d_->formError);
      return false;
    }
  }
  return loadConfig(QString::fromStdString(overrides.dump()), name);
}

bool ExperimentDesigner::loadConfig(const QString& configJson, const QString& origin) {
  json config;
  try {
    config = json::parse(configJson.toStdString());
  } catch (const json::exception& e) {
    d_->formError = tr("%1: %2").arg(origin, QString::fromUtf8(e.what()));
    d_->status->setText(d_->formError);
    return false;
  }
  if (!config.is_object()) return false;
  d_->presetName = origin;
  {
    const QSignalBlocker blocker(d_->preset);
    d_->preset->setCurrentIndex(std::max(0, d_->preset->findData(origin)));
  }
  const QString arch = config.contains("model") && config["model"].contains("arch")
                           ? QString::fromStdString(config["model"]["arch"].get<std::string>())
                           : QString::fromUtf8(routelab::kBaselineArchitecture);
  d_->building = true;
  d_->arch->setCurrentIndex(std::max(0, d_->arch->findData(arch)));
  d_->building = false;
  for (const QString& section : kSections) rebuildSection(section);
  for (const QString& section : kSections) {
    if (!config.contains(section.toStdString())) continue;
    for (const auto& [key, value] : config[section.toStdString()].items()) {
      if (key == "arch") continue;
      setFieldText(section + QLatin1Char('.') + QString::fromStdString(key), specText(value));
    }
  }
  validate();
  return true;
}

bool ExperimentDesigner::setFieldText(const QString& keyPath, const QString& text) {
  const auto it = d_->fields.find(keyPath);
  if (it == d_->fields.end()) return false;
  QWidget* editor = it->second.editor;
  if (auto* box = qobject_cast<QCheckBox*>(editor)) box->setChecked(text == QLatin1String("true"));
  else if (auto* combo = qobject_cast<QComboBox*>(editor)) combo->setCurrentText(text);
  else if (auto* edit = qobject_cast<QLineEdit*>(editor)) edit->setText(text);
  return true;
}

QString ExperimentDesigner::fieldError(const QString& keyPath) const {
  const auto it = d_->fields.find(keyPath);
  // isHidden(): only an explicit hide counts (a field on another tab is not shown, yet has its error).
  // A note shares the label and is no error.
  return it == d_->fields.end() || it->second.error->isHidden() || !it->second.note.isEmpty()
             ? QString()
             : it->second.error->text();
}

QString ExperimentDesigner::fieldNote(const QString& keyPath) const {
  const auto it = d_->fields.find(keyPath);
  return it == d_->fields.end() ? QString() : it->second.note;
}

QWidget* ExperimentDesigner::fieldEditor(const QString& keyPath) const {
  const auto it = d_->fields.find(keyPath);
  return it == d_->fields.end() ? nullptr : it->second.editor;
}

QString ExperimentDesigner::formError() const { return d_->formError; }

bool ExperimentDesigner::isValid() const { return d_->valid; }

QString ExperimentDesigner::overridesJson() const {
  json doc = json::object();
  doc["model"]["arch"] = architecture().toStdString();
  for (const auto& [path, field] : d_->fields) doc[field.section.toStdString()][field.spec.key] = field.value;
  return QString::fromStdString(doc.dump());
}

QString ExperimentDesigner::resolvedConfigJson() const { return d_->resolved; }

RunRequest ExperimentDesigner::request() const {
  RunRequest r;
  r.preset = d_->presetName.isEmpty() ? QStringLiteral("designer") : d_->presetName;
  r.configJson = overridesJson();
  r.processes = d_->processes->value();
  return r;
}

namespace {

/// "1,2,3", "1-3" or a mix ("1-3,7") -> the seeds in order; throws ConfigError naming the field.
std::vector<std::int64_t> parse_seeds(const QString& text) {
  std::vector<std::int64_t> seeds;
  for (const QString& part : text.split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    const QStringList range = part.trimmed().split(QLatin1Char('-'));
    bool ok_a = false, ok_b = true;
    const qlonglong a = range.value(0).trimmed().toLongLong(&ok_a);
    const qlonglong b = range.size() == 2 ? range.value(1).trimmed().toLongLong(&ok_b) : a;
    if (range.size() > 2 || !ok_a || !ok_b || a < 0 || b < a || b - a >= 1000)
      throw ConfigError("Seeds: '" + part.trimmed().toStdString() + "' is not a seed or a range like 1-3");
    for (qlonglong s = a; s <= b; ++s) seeds.push_back(s);
  }
  return seeds;
}

}  // namespace

QList<RunRequest> ExperimentDesigner::requests(QString* error) const {
  QList<RunRequest> out;
  try {
    if (!d_->valid) throw ConfigError(d_->status->text().toStdString());
    const json form = json::parse(overridesJson().toStdString());
    std::vector<json> docs{form};
    std::set<std::string> trunk;
    for (const OptionSpec& spec : routelab::architecture(routelab::kBaselineArchitecture).options) trunk.insert(spec.key);
    for (int i = 0; i < d_->also->count(); ++i) {
      const QListWidgetItem* item = d_->also->item(i);
      const QString id = item->data(Qt::UserRole).toString();
      if (item->checkState() != Qt::Checked || id == architecture()) continue;
      // The Transformer trunk's options (shape, style, context: the keys of the dense schema) carry over; a
      // routing option that two architectures name alike (routed_layers, capacity) keeps the target's default.
      json doc = form;
      doc["model"] = json::object({{"arch", id.toStdString()}});
      for (const OptionSpec& spec : routelab::architecture(id.toStdString()).options)
        if (spec.key != "arch" && form["model"].contains(spec.key) && trunk.count(spec.key))
          doc["model"][spec.key] = form["model"][spec.key];
      resolve_config(doc, {}, "designer (" + id.toStdString() + ")");  // throws naming the architecture and key
      docs.push_back(std::move(doc));
    }
    std::vector<std::int64_t> seeds = parse_seeds(d_->seeds->text());
    for (const json& doc : docs) {
      for (std::size_t s = 0; s < std::max<std::size_t>(1, seeds.size()); ++s) {
        json run_doc = doc;
        if (!seeds.empty()) run_doc["run"]["seed"] = seeds[s];
        RunRequest r = request();
        r.configJson = QString::fromStdString(run_doc.dump());
        out << r;
      }
    }
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return {};
  }
  return out;
}

bool ExperimentDesigner::setAlsoArchitecture(const QString& id, bool checked) {
  if (id == architecture()) return false;
  for (int i = 0; i < d_->also->count(); ++i) {
    QListWidgetItem* item = d_->also->item(i);
    if (item->data(Qt::UserRole).toString() != id) continue;
    item->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
    return true;
  }
  return false;
}

void ExperimentDesigner::setSeedsText(const QString& text) { d_->seeds->setText(text); }

void ExperimentDesigner::setLaunchEnabled(bool enabled) {
  d_->launchEnabled = enabled;
  d_->launch->setEnabled(enabled && d_->valid);
}

void ExperimentDesigner::validate() {
  const bool wasValid = d_->valid;
  for (int i = 0; i < d_->also->count(); ++i)  // the form's own architecture is not offered again
    d_->also->item(i)->setHidden(d_->also->item(i)->data(Qt::UserRole).toString() == architecture());
  d_->formError.clear();
  d_->resolved.clear();
  bool fieldsOk = true;
  for (auto& [path, field] : d_->fields) {
    field.note.clear();
    field.error->setStyleSheet(QStringLiteral("color:#c0392b;"));
    field.error->setText(field.fieldError);
    field.error->setVisible(!field.fieldError.isEmpty());
    fieldsOk = fieldsOk && field.fieldError.isEmpty();
  }
  if (fieldsOk) {
    try {
      const ExperimentConfig config =
          resolve_config(json::parse(overridesJson().toStdString()), {}, "designer");
      check_data_files(config);  // a missing corpus, shard folder or tokenizer is flagged at its field, not at launch
      d_->resolved = QString::fromStdString(config.doc.dump());
      // Valid, yet not what its author may mean (the dist_* options are read when more than one process runs).
      for (const auto& unread : unread_config_keys(config, d_->processes->value() > 1)) {
        const QString message = QString::fromStdString(unread);
        const auto it = d_->fields.find(message.section(QLatin1Char(':'), 0, 0));
        if (it == d_->fields.end()) continue;
        it->second.note = message;
        it->second.error->setStyleSheet(QStringLiteral("color:#b9770e;"));
        it->second.error->setText(message);
        it->second.error->setVisible(true);
      }
      d_->status->setText(tr("Valid: %1 layers of %2 · config hash %3")
                              .arg(QString::number(config.model().value("n_layer", 0)), architecture(),
                                   QString::fromStdString(config.hash())));
    } catch (const Error& e) {
      // A cross-field rule: show it under the field its key path names, else on the status line.
      const QString message = QString::fromUtf8(e.what());
      bool placed = false;
      for (auto& [path, field] : d_->fields) {
        if (message.contains(path + QLatin1Char(':'))) {
          field.error->setText(message);
          field.error->setVisible(true);
          placed = true;
          break;
        }
      }
      d_->formError = placed ? QString() : message;
      d_->status->setText(placed ? tr("Invalid: see the field marked in red") : message);
      fieldsOk = false;
    }
  } else {
    d_->status->setText(tr("Invalid: see the fields marked in red"));
  }
  if (fieldsOk) {  // the form is valid: the seed list and the further architectures must be too
    d_->valid = true;  // requests() reads it
    QString error;
    const auto runs = requests(&error);
    if (runs.isEmpty()) {
      fieldsOk = false;
      d_->formError = error;
      d_->status->setText(error);
    } else if (runs.size() > 1) {
      d_->status->setText(d_->status->text() + tr(" · Launch queues %1 runs").arg(runs.size()));
    }
  }
  d_->valid = fieldsOk;
  d_->status->setStyleSheet(fieldsOk ? QString() : QStringLiteral("color:#c0392b;"));
  d_->launch->setEnabled(d_->launchEnabled && d_->valid);
  if (wasValid != d_->valid) Q_EMIT validityChanged(d_->valid);
}

}  // namespace routelab
