// Qt Test suites are compiled into a few executables (routelab-tests, routelab-tests-gui) instead of one each: a
// translation unit that uses Torch spends ~25 s on the same headers and templates, so the suites are compiled in
// unity batches and linked once. ctest still runs every suite in a process of its own, by name:
// `build/tests/routelab-tests test_tagat [Qt Test options]`.
//
// Each suite file wraps its contents in a namespace named after the file (helpers in one file cannot collide with
// another's in a batch) and ends with ROUTELAB_TEST_SUITE(file_stem, TestClass). CMake writes the executable's list
// of suites from tests/CMakeLists.txt; a listed suite without its ROUTELAB_TEST_SUITE line fails to link.
#pragma once
#include <QObject>
#include <QtTest>

#include <memory>
#include <string>

#ifdef QT_TESTCASE_BUILDDIR
#define ROUTELAB_TEST_SOURCE_PATH QTest::setMainSourcePath(__FILE__, QT_TESTCASE_BUILDDIR)
#else
#define ROUTELAB_TEST_SOURCE_PATH QTest::setMainSourcePath(__FILE__)
#endif

namespace routelab::test {
/// One suite of an executable: its name (the file's stem) and the factory ROUTELAB_TEST_SUITE defines.
struct SuiteEntry {
  const char* name;
  std::unique_ptr<QObject> (*make)();
};
/// The executable's suites, in tests/CMakeLists.txt's order (the file CMake generates defines them).
extern const SuiteEntry suites[];
extern const int suite_count;

/// What error_of returns when nothing was thrown (no expected message contains it).
inline const std::string kNoException = "<no exception>";

/// The message of the exception `f` throws as E, or kNoException.
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return kNoException;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace routelab::test

/// Defines the factory the executable's main calls to run suite `name` (the file's stem), as QTEST_MAIN would.
#define ROUTELAB_TEST_SUITE(name, Class)                         \
  std::unique_ptr<QObject> routelab_make_suite_##name() {        \
    auto suite = std::make_unique<name::Class>();                \
    ROUTELAB_TEST_SOURCE_PATH;                                   \
    return suite;                                                \
  }
