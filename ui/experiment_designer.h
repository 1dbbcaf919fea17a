// ExperimentDesigner: an options form generated from the registry's schemas (model options of the chosen
// architecture, then data, train and run), with types, ranges and help as tooltips, and validation errors shown
// under the field as the user types, by the core's own checks (parse_value/validate_value per field,
// resolve_config for cross-field rules). A preset fills the form; Launch sends the form as a RunRequest.
#pragma once
#include <QString>
#include <QWidget>

#include <memory>

#include "ui/run_worker.h"

namespace routelab {

class ExperimentDesigner : public QWidget {
  Q_OBJECT

 public:
  explicit ExperimentDesigner(QWidget* parent = nullptr);
  ~ExperimentDesigner() override;

  /// Rebuilds the model section for architecture `id` (defaults); false for an unknown id.
  bool setArchitecture(const QString& id);
  QString architecture() const;
  /// Fills the form with preset `name` (its architecture, then its overrides on the defaults); "" = defaults.
  bool loadPreset(const QString& name);
  /// Fills the form with a stored run's config (Clone in the runs browser): its architecture, then every value
  /// of its model/data/train/run sections. `origin` (the run's preset) names the request. False when the JSON
  /// cannot be read.
  bool loadConfig(const QString& configJson, const QString& origin);

  /// Sets a field as the user would, by key path ("model.n_head"): text for text fields, "true"/"false" for
  /// check boxes, the choice for combo boxes. False when there is no such field.
  bool setFieldText(const QString& keyPath, const QString& text);
  /// The error shown under the field (empty when it is valid).
  QString fieldError(const QString& keyPath) const;
  /// The note shown under a valid field whose value the config does not read (data.path with data.source kjv);
  /// empty when there is none.
  QString fieldNote(const QString& keyPath) const;
  QWidget* fieldEditor(const QString& keyPath) const;
  /// The error that belongs to no single field (empty when none).
  QString formError() const;
  bool isValid() const;
  /// The form as overrides {model:{arch,..}, data:{..}, train:{..}, run:{..}} (JSON text).
  QString overridesJson() const;
  /// The resolved config (JSON text), empty when the form is invalid.
  QString resolvedConfigJson() const;
  RunRequest request() const;
  /// Every run Launch starts: the form's architecture and each architecture ticked under "Also as" (with the
  /// model options it shares with the form, its defaults for the rest), times each seed of the Seeds field
  /// ("1,2,3" or "1-3"; empty = the form's run.seed). Empty, with `error` set, when a seed list or one of the
  /// configurations is invalid.
  QList<RunRequest> requests(QString* error = nullptr) const;
  /// Ticks (or unticks) architecture `id` in the "Also as" list; false for an unknown id or the form's own.
  bool setAlsoArchitecture(const QString& id, bool checked);
  /// Sets the Seeds field's text.
  void setSeedsText(const QString& text);
  /// Enables or disables Launch (disabled while the window closes).
  void setLaunchEnabled(bool enabled);

 Q_SIGNALS:
  void launchRequested(const routelab::RunRequest& request);
  void validityChanged(bool valid);

 private:
  struct Impl;
  std::unique_ptr<Impl> d_;
  void rebuildSection(const QString& section);
  void validate();
};

}  // namespace routelab
