// `--nproc N` and the launchers' environment, for the commands that train.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <thread>

#include "app/cli_commands.h"
#include "app/cli_registration.h"
#include "core/dist/local_launch.h"
#include "core/run/run_config.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"

namespace routelab::cli {
namespace {

std::vector<std::string>& arguments() {
  static std::vector<std::string> args;
  return args;
}

/// This executable (argv[0] may be a bare name found on PATH).
std::string own_executable() {
  char path[PATH_MAX];
  const auto n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return arguments().empty() ? "routelab-cli" : arguments().front();
  return std::string(path, static_cast<std::size_t>(n));
}

struct DistBenchArgs {
  std::string preset = "tsa-charlm-dense";
  std::vector<std::string> sets;
  int steps = 20, skip = 5, nproc = 2, threads = 0;
};

/// One timed configuration of `bench dist`.
struct BenchMode {
  std::string name;
  int nproc;  ///< 0: one process without a group
  bool overlap;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The medians of a run's per-step time and gradient-sum wait (ms) over steps after `skip`.
std::pair<double, double> step_medians(const std::string& db, int skip) {
  RunStore store(db, /*mark_crashed=*/false);
  const auto runs = store.list_runs(true);
  if (runs.size() != 1) throw Error(db + ": expected the benchmark's one run");
  const auto& run = runs.front();
  const auto config = stored_config(run, db);
  const auto tokens = static_cast<double>(sequences_per_step(config) * config.at("data").at("context").get<std::int64_t>());
  std::vector<double> step_ms, wait_ms;
  for (const auto& p : store.metric(run.id, "train/tokens_per_s"))
    if (p.step > skip && p.value > 0) step_ms.push_back(1000.0 * tokens / p.value);
  for (const auto& p : store.metric(run.id, "train/dist_wait_ms"))
    if (p.step > skip) wait_ms.push_back(p.value);
  return {median(step_ms), median(wait_ms)};
}

int cmd_bench_dist(const DistBenchArgs& a) {
  if (a.steps <= a.skip) throw ConfigError("--steps " + std::to_string(a.steps) + " must exceed --skip " + std::to_string(a.skip));
  const int cores = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  char pattern[] = "/tmp/routelab-bench-dist-XXXXXX";
  if (!::mkdtemp(pattern)) throw Error("cannot make a temporary folder for the benchmark's run stores");
  const std::filesystem::path dir(pattern);
  std::vector<BenchMode> modes = {{"one process", 0, true}, {"data parallel, 1 rank", 1, true}};
  if (a.nproc > 1) {  // --nproc 1: a group of one against the plain path only (one GPU: NCCL's cost)
    modes.push_back({std::to_string(a.nproc) + " ranks, overlapped", a.nproc, true});
    modes.push_back({std::to_string(a.nproc) + " ranks, after backward", a.nproc, false});
  }
  std::cout << "bench dist: preset " << a.preset << ", " << a.steps << " steps (medians of steps " << a.skip + 1
            << ".." << a.steps << "), " << cores << " cores shared by the ranks; wait = the gradient sum's time "
            << "after the backward pass\n\n"
            << std::left << std::setw(30) << "mode" << std::right << std::setw(7) << "ranks" << std::setw(9)
            << "threads" << std::setw(10) << "ms/step" << std::setw(10) << "wait ms" << std::setw(11) << "wait/step"
            << std::endl;
  for (std::size_t i = 0; i < modes.size(); ++i) {
    const auto& mode = modes[i];
    const auto db = (dir / ("mode-" + std::to_string(i) + ".sqlite")).string();
    const int ranks = std::max(1, mode.nproc);
    const int threads = std::max(1, cores / ranks);
    std::vector<std::string> argv{own_executable(), "train", "--preset", a.preset, "--steps", std::to_string(a.steps),
                                  "--db", db, "--quiet", "--threads", std::to_string(threads), "--set",
                                  "train.log_every=1", "--set", "train.eval_batches=1", "--set",
                                  "train.eval_every=1000000", "--set", "train.warmup_steps=1", "--set",
                                  std::string("run.dist_overlap=") + (mode.overlap ? "true" : "false")};
    for (const auto& set : a.sets) {
      argv.push_back("--set");
      argv.push_back(set);
    }
    if (mode.nproc > 0) {
      argv.push_back("--nproc");
      argv.push_back(std::to_string(mode.nproc));
    }
    if (const int code = run_process(argv, /*discard_output=*/true); code != 0)
      throw Error("bench dist: the run '" + mode.name + "' failed (exit status " + std::to_string(code) + ")");
    const auto [step_ms, wait_ms] = step_medians(db, a.skip);
    std::cout << std::left << std::setw(30) << mode.name << std::right << std::setw(7) << ranks << std::setw(9)
              << threads << std::setw(10) << std::fixed << std::setprecision(1) << step_ms << std::setw(10)
              << (mode.nproc > 0 ? fixed(wait_ms, 1) : "-") << std::setw(10)
              << (mode.nproc > 0 ? fixed(100.0 * wait_ms / std::max(step_ms, 1e-9), 1) + "%" : "-") << std::endl;
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace

void add_dist_commands(CLI::App& bench, CommandAction& action) {
  auto a = std::make_shared<DistBenchArgs>();
  auto* cmd = bench.add_subcommand(
      "dist", "data parallel's cost per step: one process, a group of one, and N ranks with the gradient sum "
              "overlapped with the backward pass or after it (each a real training run)");
  cmd->add_option("--preset", a->preset, "model and data (default: d 256, L 6, batch 64 x 128)")->capture_default_str();
  cmd->add_option("--set", a->sets, "override, e.g. --set run.device=cuda (repeatable)");
  cmd->add_option("--steps", a->steps, "optimizer steps per run")->capture_default_str();
  cmd->add_option("--skip", a->skip, "first steps left out of the medians")->capture_default_str();
  cmd->add_option("--nproc", a->nproc, "ranks of the data-parallel runs (1: only a group of one against one process)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "cores the runs share (0: every core)");
  cmd->callback([a, &action] { action = [a] { return cmd_bench_dist(*a); }; });
}

void remember_arguments(int argc, char** argv) { arguments().assign(argv, argv + argc); }

int run_nproc(int nproc) {
  std::vector<std::string> argv{own_executable()};
  const auto& args = arguments();
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--nproc=", 0) == 0) continue;
    argv.push_back(args[i]);
  }
  std::cout << "routelab-cli: starting " << nproc << " local rank" << (nproc == 1 ? "" : "s") << std::endl;
  // A failed rank's peers learn it at their next collective and end themselves (rank 0 records the run's status);
  // the ones still running after a minute are killed.
  return run_local_workers(nproc, argv, /*grace_s=*/60.0,
                           [](const std::string& line) { std::cerr << "routelab-cli: " << line << "\n"; });
}

std::optional<DistEnv> launched_rank(int nproc) {
  auto env = dist_env_from_process();
  if (env && nproc > 0)
    throw ConfigError("--nproc " + std::to_string(nproc) + ": this process is already " + env->describe() +
                      "; give --nproc to a process started alone, or let the launcher start the ranks");
  return env;
}

}  // namespace routelab::cli
