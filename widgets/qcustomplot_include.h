// Includes <qcustomplot.h> in targets built with QT_NO_KEYWORDS: QCustomPlot 2.1's header writes `signals:`,
// `slots` and `foreach`, so those keywords are defined for the duration of the include only. Use from .cpp files.
#pragma once

#ifdef QT_NO_KEYWORDS
#include <QtCore/qglobal.h>
#include <QtCore/qobjectdefs.h>
#define signals Q_SIGNALS
#define slots Q_SLOTS
#define emit Q_EMIT
#define foreach Q_FOREACH
#include <qcustomplot.h>
#undef signals
#undef slots
#undef emit
#undef foreach
#else
#include <qcustomplot.h>
#endif
