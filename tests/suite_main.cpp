// main() of a suite bundle: runs the one suite named by the first argument, with the application object and
// attributes QTEST_MAIN (widgets) or QTEST_GUILESS_MAIN sets up.
#include <QtTest>
#if defined(QT_WIDGETS_LIB)
#include <QApplication>
#endif

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "core/util/process.h"
#include "tests/suite.h"

namespace {

void print_suites(std::FILE* out, const char* program) {
  std::fprintf(out, "usage: %s SUITE [Qt Test options]\nsuites:", program);
  for (int i = 0; i < routelab::test::suite_count; ++i) std::fprintf(out, " %s", routelab::test::suites[i].name);
  std::fprintf(out, "\n");
}

}  // namespace

int main(int argc, char* argv[]) {
  routelab::relaunch_with_native_blas(argv);  // the suites run with the kernels RouteLab's programs choose
  using routelab::test::suites;
  if (argc < 2 || argv[1][0] == '-') {
    print_suites(argc < 2 ? stderr : stdout, argv[0]);
    return argc < 2 ? 2 : 0;
  }
  const routelab::test::SuiteEntry* entry = nullptr;
  for (int i = 0; i < routelab::test::suite_count; ++i)
    if (std::strcmp(suites[i].name, argv[1]) == 0) entry = &suites[i];
  if (!entry) {
    std::fprintf(stderr, "%s: no suite '%s'\n", argv[0], argv[1]);
    print_suites(stderr, argv[0]);
    return 2;
  }
  // Qt Test sees the program and the options after the suite's name.
  std::vector<char*> args{argv[0]};
  args.insert(args.end(), argv + 2, argv + argc);
  int n = static_cast<int>(args.size());
  args.push_back(nullptr);
#if defined(QT_WIDGETS_LIB)
  QApplication app(n, args.data());
#else
  QCoreApplication app(n, args.data());
#endif
  app.setAttribute(Qt::AA_Use96Dpi, true);
  const std::unique_ptr<QObject> suite = entry->make();
  return QTest::qExec(suite.get(), n, args.data());
}
