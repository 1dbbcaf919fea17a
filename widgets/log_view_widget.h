// LogViewWidget: a read-only, bounded view of log lines with level colouring, a level filter and auto-scroll
// that stays put while the user reads older lines.
#pragma once
#include <QStringList>
#include <QWidget>

class QComboBox;
class QPlainTextEdit;

namespace routelab {

class LogViewWidget : public QWidget {
  Q_OBJECT

 public:
  /// Levels in rising severity; a line is shown when its level is at or above the filter.
  enum class Level { Trace, Debug, Info, Warning, Error, Critical };
  Q_ENUM(Level)

  struct Line {
    Level level = Level::Info;
    QString text;  ///< one formatted line, without the trailing newline
  };

  explicit LogViewWidget(QWidget* parent = nullptr);

  void appendLines(const QList<Line>& lines);
  void clear();
  void setMaximumLines(int lines);
  int lineCount() const;
  QString plainText() const;

 private:
  void appendToView(const QList<Line>& lines);
  void refilter();

  QPlainTextEdit* view_ = nullptr;
  QComboBox* levelFilter_ = nullptr;
  QList<Line> history_;  ///< bounded like the view, so changing the filter can redraw
  int maximumLines_ = 5000;
};

}  // namespace routelab
