// The routelab-cli sub-commands, each a function returning the process exit code.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include "core/bench/loss_bench.h"
#include "core/dist/launch_env.h"
#include "core/bench/routing_bench.h"

namespace routelab::cli {

struct TrainArgs {
  std::string preset, config_file, db, device, name, precision;
  std::vector<std::string> sets;
  std::int64_t steps = 0, seed = -1, threads = -1;
  int nproc = 0;  ///< --nproc: this many local data-parallel processes (0: one process, or the launcher's)
  bool quiet = false;
};

struct BenchArgs {
  std::string script, python, precision = "both", profile, device = "cpu", shape = "small";
  std::int64_t steps = 10, warmup = 3, threads = 0, batch = 0, context = 0;  ///< batch, context 0: the shape's
  bool compile = false;     ///< also time the peer under torch.compile
  bool tf32 = false;        ///< CUDA fp32 on TF32 tensor cores, both sides
  bool cuda_graph = false;  ///< also time RouteLab's step replayed as a CUDA graph
  double peak_tflops = 0;   ///< the device's peak for MFU (e.g. 989 for an H100's dense bf16)
  int kernels = 0;          ///< CUDA: print kernel time by class and this many of the longest kernels
};

struct EvalArgs {
  std::string db, split = "val", sweep;
  std::vector<std::string> sets;
  std::int64_t run_id = 0, step = 0, batches = 0, batch_size = 0;
  bool json = false;
};

struct ProfileArgs {
  std::string db, split = "val", out;
  std::vector<std::string> sets;
  std::int64_t run_id = 0, step = 0, batches = 4, batch_size = 0;
  double tau = 0.1;
  int bins = 32;
  bool json = false;
};

struct SweepArgs {
  std::string file, db;
  bool dry_run = false, skip_done = false, quiet = false;
};

/// While alive, SIGINT and SIGTERM set flag() instead of ending the process: a command stops at its next safe point.
class SignalScope {
 public:
  SignalScope();
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  const std::atomic<bool>* flag() const;

 private:
  void (*previous_int_)(int);
  void (*previous_term_)(int);
};

/// `v` with `precision` digits after the point, for tables.
std::string fixed(double v, int precision);

/// Refuses (an Error naming both files) an --out that would overwrite the run store `db` ("" = the default store),
/// its journal files, any other SQLite database, or a file in the store's checkpoint folder.
void check_output_path(const std::string& out, const std::string& db);

int cmd_train(const TrainArgs& args);
/// Runs every point of a sweep file (core/config/sweep.h) one after another, tags the runs "sweep:<name>", then
/// prints the sweep's table (mean ± std over seeds).
int cmd_sweep(const SweepArgs& args);
int cmd_resume(const std::string& db, std::int64_t run_id, bool quiet, double takeover_after_s, int nproc = 0);

/// The command line this process was started with (main keeps it for --nproc, which starts it again).
void remember_arguments(int argc, char** argv);
/// `--nproc N`: this command line without --nproc, started as N local ranks of one data-parallel run; their exit
/// status (app/cli_dist.cpp).
int run_nproc(int nproc);
/// This process's rank when a launcher (torchrun, srun, --nproc) started it, else nullopt; a ConfigError for
/// --nproc inside a launched rank.
std::optional<DistEnv> launched_rank(int nproc);
int cmd_presets(bool json);
/// The registered architectures, or with `id` that one's options: what each is read for and its help.
int cmd_architectures(bool json, const std::string& id = "");
/// The stored runs (archived ones with `all`) that meet `where` (RunQuery, core/store/run_query.h): a table, JSON,
/// or with `ids` their ids in id order, comma-separated.
int cmd_runs(const std::string& db, bool json, bool all, const std::string& where = "", bool ids = false);
int cmd_show(const std::string& db, std::int64_t run_id, bool json);
/// The last evaluation of each run side by side (markdown table, or JSON): val loss, FLOPs ratio and the
/// inference-mode routed share of every layer.
int cmd_compare(const std::string& db, const std::vector<std::int64_t>& run_ids, bool json);
int cmd_export(const std::string& db, std::int64_t run_id, const std::string& format, const std::string& out);
int cmd_bench_train_step(const BenchArgs& args);
/// RouteLab's training step timed idle, beside one process that keeps a core busy, and idle again: the slowdown a
/// user sees when another job shares the machine (OpenMP threads that spin at barriers make it many times worse).
int cmd_bench_contention(const BenchArgs& args);
/// Re-evaluates a stored run in inference mode, with eval-only overrides or a sweep of one option.
int cmd_eval(const EvalArgs& args);
/// Residual-ratio profile (Radial Networks 4.1) of a stored run.
int cmd_profile(const ProfileArgs& args);

int cmd_bench_routing(const routelab::RoutingBenchOptions& options);
int cmd_bench_loss(const routelab::LossBenchOptions& options);

}  // namespace routelab::cli
