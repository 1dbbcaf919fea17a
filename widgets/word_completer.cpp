// Completion of the word at a line edit's cursor.
#include "widgets/word_completer.h"

#include <QAbstractItemView>
#include <QCompleter>
#include <QLineEdit>
#include <QStringListModel>
#include <algorithm>

namespace routelab {
namespace {

bool separator(QChar c) { return c.isSpace() || c == QLatin1Char(','); }

}  // namespace

WordCompleter::WordCompleter(QLineEdit* edit)
    : QObject(edit), edit_(edit), model_(new QStringListModel(this)), completer_(new QCompleter(model_, this)) {
  completer_->setWidget(edit_);
  completer_->setCaseSensitivity(Qt::CaseInsensitive);
  completer_->setCompletionMode(QCompleter::PopupCompletion);
  completer_->setMaxVisibleItems(12);
  connect(edit_, &QLineEdit::textEdited, this, [this] { offer(); });
  connect(completer_, qOverload<const QString&>(&QCompleter::activated), this, &WordCompleter::insert);
}

void WordCompleter::setWords(const QStringList& words) { model_->setStringList(words); }

QStringList WordCompleter::words() const { return model_->stringList(); }

QString WordCompleter::wordAt(const QString& text, int cursor, int* start) {
  cursor = std::clamp(cursor, 0, static_cast<int>(text.size()));
  int from = cursor;
  while (from > 0 && !separator(text.at(from - 1))) --from;
  if (start) *start = from;
  return text.mid(from, cursor - from);
}

void WordCompleter::offer() {
  const QString word = wordAt(edit_->text(), edit_->cursorPosition());
  auto* popup = completer_->popup();
  if (word.isEmpty() || model_->rowCount() == 0) {
    popup->hide();
    return;
  }
  completer_->setCompletionPrefix(word);
  const int count = completer_->completionCount();
  // Nothing to offer, or only what is typed already.
  if (count == 0 || (count == 1 && completer_->currentCompletion().compare(word, Qt::CaseInsensitive) == 0)) {
    popup->hide();
    return;
  }
  popup->setCurrentIndex(completer_->completionModel()->index(0, 0));
  completer_->complete();
}

void WordCompleter::insert(const QString& chosen) {
  const QString text = edit_->text();
  int start = 0;
  const int cursor = edit_->cursorPosition();
  wordAt(text, cursor, &start);
  int end = cursor;  // the whole word goes, the part after the cursor too
  while (end < text.size() && !separator(text.at(end))) ++end;
  edit_->setText(text.left(start) + chosen + text.mid(end));
  edit_->setCursorPosition(start + static_cast<int>(chosen.size()));
}

}  // namespace routelab
