// routelab-bench-dashboard: how long a run's dashboard takes to read and draw a long run. Trains a short seed run
// (a preset or config with --set overrides), makes it long without training (core/store/long_run.h: the rows of its
// last logged step, evaluation and probe written again up to --steps), then opens the run's dashboard offscreen and
// times its reads: the first, the same again (nothing new stored), and live ones with --append logged steps stored
// before each. Prints each read's time from request to applied and the store read's share of it.
// Exit codes: 0 measured, 1 a step failed (the message says which), 2 bad command line.
#include <QApplication>
#include <QDir>
#include <QEventLoop>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QTimer>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "app/parse_command_line.h"
#include "core/config/experiment_config.h"
#include "core/store/long_run.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "core/util/version.h"
#include "ui/app_resources.h"
#include "ui/run_dashboard.h"
#include "ui/store_service.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Waits for the dashboard's next applied read (false after `timeoutMs`).
bool waitForRead(routelab::RunDashboard& dashboard, int timeoutMs) {
  QEventLoop loop;
  bool loaded = false;
  const auto connection = QObject::connect(&dashboard, &routelab::RunDashboard::dataLoaded, &loop, [&] {
    loaded = true;
    loop.quit();
  });
  QTimer::singleShot(timeoutMs, &loop, &QEventLoop::quit);
  loop.exec();
  QObject::disconnect(connection);
  return loaded;
}

struct Args {
  std::string preset = "quickstart-dtrnet", config_file, db;
  std::vector<std::string> sets;
  std::int64_t run = 0, seed_steps = 40, steps = 200000, log_every = 1, eval_every = 1000, append = 100;
  int reads = 5, live_reads = 5, width = 1280, height = 720, timeout_s = 600;
};

/// The run of the existing store `db` to read: `run`, or its newest.
std::int64_t storedRun(const std::string& db, std::int64_t run) {
  const routelab::RunStore existing(db, /*mark_crashed=*/false);
  if (run == 0)
    for (const routelab::RunRecord& r : existing.list_runs()) run = std::max(run, r.id);
  if (!existing.run(run)) throw routelab::StoreError(db + ": no run " + std::to_string(run) + " to read");
  std::printf("reusing run %lld of %s as it is stored\n", static_cast<long long>(run), db.c_str());
  return run;
}

/// Trains the short seed run into `db` and returns its id.
std::int64_t seedRun(const Args& a, const std::string& db) {
  std::vector<std::string> sets = {"model.n_layer=32", "data.probe_chars=256", "train.batch_size=8",
                                   "train.eval_batches=2"};
  sets.insert(sets.end(), a.sets.begin(), a.sets.end());
  sets.push_back("train.steps=" + std::to_string(a.seed_steps));
  sets.push_back("train.eval_every=" + std::to_string(a.seed_steps / 2));
  sets.push_back("train.warmup_steps=" + std::to_string(a.seed_steps / 10));
  sets.push_back("train.checkpoint_every=" + std::to_string(a.seed_steps));
  const nlohmann::json base =
      a.config_file.empty() ? routelab::load_preset(a.preset) : routelab::load_json_file(a.config_file);
  const auto config = routelab::resolve_config(base, sets, a.config_file.empty() ? a.preset : a.config_file);
  const auto start = Clock::now();
  const auto outcome = routelab::train({config, db, "long-run", ""});
  if (outcome.status != routelab::RunStatus::Finished)
    throw routelab::Error("the seed run did not finish: " + outcome.message);
  std::printf("seed run %lld (%s): %lld steps trained in %.1f s\n", static_cast<long long>(outcome.run_id),
              config.model().at("arch").get<std::string>().c_str(), static_cast<long long>(outcome.last_step),
              seconds_since(start));
  return outcome.run_id;
}

/// Lengthens the seed run to step `last` and says what was written.
void makeLong(routelab::RunStore& store, routelab::LongRunExtender& extender, std::int64_t run, std::int64_t last) {
  const auto start = Clock::now();
  const auto written = extender.extend_to(store, last);
  std::size_t probe_bytes = 0;
  for (const auto& probe : store.probes(run)) probe_bytes = std::max(probe_bytes, probe.json.size());
  std::printf("long run: to step %lld, a logged step every %lld, an evaluation every %lld: %lld metric rows, "
              "%lld routing rows, %lld evaluations, %lld probes of %.0f KB written in %.1f s; store %.0f MB\n",
              static_cast<long long>(written.last_step), static_cast<long long>(extender.log_every()),
              static_cast<long long>(extender.eval_every()), static_cast<long long>(written.metrics),
              static_cast<long long>(written.routing), static_cast<long long>(written.evals),
              static_cast<long long>(written.probes), static_cast<double>(probe_bytes) / 1024.0,
              seconds_since(start), static_cast<double>(QFileInfo(QString::fromStdString(store.path())).size()) / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time a run's dashboard reads on a long run made from a short trained one", "routelab-bench-dashboard"};
  Args a;
  app.add_option("--preset", a.preset, "the seed run's preset")->capture_default_str();
  app.add_option("--config", a.config_file, "the seed run's config file (instead of --preset)");
  app.add_option("--set", a.sets,
                 "KEY=VALUE overrides of the seed run's config, after the defaults model.n_layer=32, "
                 "data.probe_chars=256, train.batch_size=8, train.eval_batches=2 (a 32-layer probe of 256 tokens)");
  app.add_option("--seed-steps", a.seed_steps, "steps the seed run trains (two evaluations)")
      ->check(CLI::Range(2, 100000))->capture_default_str();
  app.add_option("--steps", a.steps, "the long run's last step")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--log-every", a.log_every, "steps between the long run's logged rows (0: the seed's)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--eval-every", a.eval_every, "steps between its evaluations and probes")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--reads", a.reads, "reads with nothing new stored (the first included)")
      ->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--live-reads", a.live_reads, "reads after --append more logged steps each")
      ->check(CLI::Range(0, 1000))->capture_default_str();
  app.add_option("--append", a.append, "logged steps stored before each live read")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--db", a.db, "where the store is written and kept (default: a temporary one); a store that "
                               "exists is read as it is (its newest run, or --run), with live reads appended to it");
  app.add_option("--run", a.run, "with --db of an existing store: the run to read")->check(CLI::PositiveNumber);
  app.add_option("--width", a.width, "the dashboard's width")->check(CLI::Range(320, 8000))->capture_default_str();
  app.add_option("--height", a.height, "its height")->check(CLI::Range(240, 8000))->capture_default_str();
  app.add_option("--timeout-s", a.timeout_s, "the longest wait for one read")->check(CLI::Range(1, 36000));
  app.set_version_flag("--version", std::string(ROUTELAB_VERSION));
  if (const auto exit_code = routelab::parse_command_line(app, argc, argv)) return *exit_code;
  if (std::getenv("QT_QPA_PLATFORM") == nullptr) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication qapp(argc, argv);
  routelab::LoggingOptions logging;
  logging.level = "warn";  // the seed run's progress is not the benchmark's
  logging.log_dir = "-";
  routelab::init_logging(logging);
  routelab::initResources();

  QTemporaryDir scratch;
  std::string db = a.db;
  if (db.empty()) {
    if (!scratch.isValid()) {
      std::cerr << "routelab-bench-dashboard: no temporary folder: " << scratch.errorString().toStdString() << "\n";
      return 1;
    }
    db = QDir(scratch.path()).filePath(QStringLiteral("runs.sqlite")).toStdString();
  }
  const bool reuse = QFileInfo::exists(QString::fromStdString(db));
  std::int64_t run_id = 0;
  std::optional<routelab::RunStore> store;
  std::optional<routelab::LongRunExtender> extender;
  try {
    run_id = reuse ? storedRun(db, a.run) : seedRun(a, db);
    store.emplace(db);
    // An existing store's run is read as it is; its rows are repeated only for live reads.
    if (!reuse || a.live_reads > 0) extender.emplace(*store, run_id, a.log_every, a.eval_every);
    if (!reuse) makeLong(*store, *extender, run_id, a.steps);
  } catch (const std::exception& e) {
    std::cerr << "routelab-bench-dashboard: " << e.what() << "\n";
    return 1;
  }

  routelab::StoreService service(QString::fromStdString(db));
  routelab::RunDashboard dashboard(run_id, &service);
  dashboard.resize(a.width, a.height);
  dashboard.show();
  std::printf("dashboard %dx%d (%s), %d reads, then %d live reads after %lld logged steps each\n", a.width, a.height,
              qPrintable(QApplication::platformName()), a.reads, a.live_reads, static_cast<long long>(a.append));
  std::printf("%-5s %-7s %12s %12s\n", "read", "kind", "applied ms", "store ms");
  std::vector<double> again, live, again_store, live_store;
  double first = 0, first_store = 0;
  for (int read = 1; read <= a.reads + a.live_reads; ++read) {
    const bool is_live = read > a.reads;
    if (is_live) extender->extend_to(*store, extender->last_step() + a.append * extender->log_every());
    if (read > 1) dashboard.reload();  // the first read is the one the dashboard makes when opened
    if (!waitForRead(dashboard, a.timeout_s * 1000)) {
      std::cerr << "routelab-bench-dashboard: read " << read << " not applied within " << a.timeout_s << " s\n";
      return 1;
    }
    const auto ms = static_cast<double>(dashboard.lastReadMs());
    const auto store_ms = static_cast<double>(dashboard.lastStoreReadMs());
    const char* kind = read == 1 ? "first" : is_live ? "live" : "again";
    std::printf("%-5d %-7s %12.0f %12.0f\n", read, kind, ms, store_ms);
    std::fflush(stdout);
    if (read == 1) {
      first = ms;
      first_store = store_ms;
    } else {
      (is_live ? live : again).push_back(ms);
      (is_live ? live_store : again_store).push_back(store_ms);
    }
  }
  std::printf("first read %.0f ms (store %.0f)", first, first_store);
  if (!again.empty()) std::printf("; again: median %.0f ms (store %.0f)", median(again), median(again_store));
  if (!live.empty()) std::printf("; live: median %.0f ms (store %.0f)", median(live), median(live_store));
  std::printf("\n");
  if (!a.db.empty()) std::printf("store kept: %s (run %lld)\n", db.c_str(), static_cast<long long>(run_id));
  return 0;
}
