// WordCompleter: completion for a line edit that holds several words ("inference=sparse threshold=0.3",
// "train.lr, model.capacity"): typing shows the entries that start with the part of the word before the cursor (any
// case), and the one chosen (Return, Tab or a click) replaces the whole word, the rest of the text left as it was.
// Plain strings in.
#pragma once
#include <QObject>
#include <QStringList>

class QCompleter;
class QLineEdit;
class QStringListModel;

namespace routelab {

class WordCompleter : public QObject {
  Q_OBJECT

 public:
  /// Completes `edit`'s words; words are separated by spaces and commas. Owned by the edit.
  explicit WordCompleter(QLineEdit* edit);
  /// The entries offered ("key=" to go on typing a value, "key=value" for a choice), in this order.
  void setWords(const QStringList& words);
  QStringList words() const;
  QCompleter* completer() const { return completer_; }
  /// The word the cursor ends, and where it starts in the text (the completion prefix).
  static QString wordAt(const QString& text, int cursor, int* start = nullptr);

 private:
  void offer();                        // after an edit: the entries for the word at the cursor, or none
  void insert(const QString& chosen);  // an entry chosen: it replaces that word, up to its end

  QLineEdit* edit_;
  QStringListModel* model_;
  QCompleter* completer_;
};

}  // namespace routelab
