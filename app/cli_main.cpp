// routelab-cli: headless training, run inspection, export and benchmarks (core only, no Qt).
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "app/cli_commands.h"
#include "app/cli_registration.h"
#include "core/bench/speed_options_bench.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "core/util/process.h"
#include "core/util/version.h"

namespace {

using routelab::cli::CommandAction;

/// Run options that several commands take.
struct StoreArgs {
  std::string db;
  std::int64_t run_id = 0;
  std::vector<std::int64_t> run_ids;
  bool json = false, all = false, quiet = false;
  double takeover_after = routelab::RunStore::kNeverTakeOver;
  std::string format = "csv", out;
  std::string arch;  ///< `architectures ID`
  int nproc = 0;
  std::string where;  ///< `runs --where QUERY`
  bool ids = false;   ///< `runs --ids`
};

/// `train`, `resume` and `sweep`: the commands that train.
void add_training_commands(CLI::App& app, CommandAction& action) {
  using namespace routelab::cli;
  auto train = std::make_shared<TrainArgs>();
  auto* train_cmd = app.add_subcommand("train", "train a new run from a preset or a config file");
  auto* preset_opt = train_cmd->add_option("--preset", train->preset, "preset name (see `presets`)");
  train_cmd->add_option("--config", train->config_file, "JSON config file")->excludes(preset_opt);
  train_cmd->add_option("--set", train->sets, "override, e.g. --set model.n_layer=4 (repeatable)");
  train_cmd->add_option("--steps", train->steps, "train.steps override")->check(CLI::Range(1, 1000000000));
  train_cmd->add_option("--db", train->db, "run store (default: the user data dir)");
  train_cmd->add_option("--device", train->device, "cpu, cuda or cuda:N");
  train_cmd->add_option("--seed", train->seed, "run.seed override")->check(CLI::Range(0, 2147483647));
  train_cmd
      ->add_option("--threads", train->threads,
                   "CPU threads (0: all cores, fewer while other processes keep cores busy)")
      ->check(CLI::Range(0, 1024));
  train_cmd->add_option("--precision", train->precision, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  train_cmd->add_option("--name", train->name, "run name");
  train_cmd->add_flag("--quiet", train->quiet, "no progress line");
  train_cmd
      ->add_option("--nproc", train->nproc,
                   "data parallel on this machine: start this many ranks (Gloo on the CPU, NCCL on GPUs); torchrun "
                   "and srun start ranks themselves")
      ->check(CLI::Range(1, 1024));
  train_cmd->callback([train, &action] {
    if (train->preset.empty() && train->config_file.empty()) train->preset = "quickstart";
    action = [train] { return cmd_train(*train); };
  });

  auto a = std::make_shared<StoreArgs>();
  auto* resume_cmd = app.add_subcommand("resume", "continue a stopped, failed or crashed run from its last checkpoint");
  resume_cmd->add_option("RUN", a->run_id, "run id")->required();
  resume_cmd->add_option("--db", a->db, "run store");
  resume_cmd->add_flag("--quiet", a->quiet, "no progress line");
  resume_cmd
      ->add_option("--takeover-after", a->takeover_after,
                   "take the run over from a writer on another host silent for this many seconds (by default a run "
                   "another process holds is never taken)")
      ->check(CLI::Range(0.0, 1e9));
  resume_cmd->add_option("--nproc", a->nproc, "continue as this many local data-parallel ranks")
      ->check(CLI::Range(1, 1024));
  resume_cmd->callback([a, &action] {
    action = [a] { return cmd_resume(a->db, a->run_id, a->quiet, a->takeover_after, a->nproc); };
  });

  auto sweep = std::make_shared<SweepArgs>();
  auto* sweep_cmd =
      app.add_subcommand("sweep", "run every point of a sweep file (a grid over options and seeds, plus baselines)");
  sweep_cmd->add_option("FILE", sweep->file, "sweep file (see experiments/sweeps/)")->required();
  sweep_cmd->add_option("--db", sweep->db, "run store");
  sweep_cmd->add_flag("--dry-run", sweep->dry_run, "list the resolved points without training");
  sweep_cmd->add_flag("--skip-done", sweep->skip_done, "skip points with a finished run of the same name and config");
  sweep_cmd->add_flag("--quiet", sweep->quiet, "no progress lines");
  sweep_cmd->callback([sweep, &action] { action = [sweep] { return cmd_sweep(*sweep); }; });
}

/// `presets`, `architectures`, `runs`, `show`, `compare` and `export`: what is there and what is stored.
void add_inspection_commands(CLI::App& app, CommandAction& action) {
  using namespace routelab::cli;
  auto a = std::make_shared<StoreArgs>();
  auto* presets_cmd = app.add_subcommand("presets", "list the experiment presets");
  presets_cmd->add_flag("--json", a->json, "machine-readable output");
  presets_cmd->callback([a, &action] { action = [a] { return cmd_presets(a->json); }; });
  auto* arch_cmd = app.add_subcommand("architectures", "list the registered architectures and their options");
  arch_cmd->add_option("ID", a->arch, "one architecture: its options, what each is read for, and their help");
  arch_cmd->add_flag("--json", a->json, "machine-readable output with option schemas");
  arch_cmd->callback([a, &action] { action = [a] { return cmd_architectures(a->json, a->arch); }; });

  auto* runs_cmd = app.add_subcommand("runs", "list stored runs");
  runs_cmd->add_option("--db", a->db, "run store");
  runs_cmd->add_flag("--json", a->json, "machine-readable output");
  runs_cmd->add_flag("--all", a->all, "include archived runs");
  runs_cmd->add_option("--where", a->where,
                       "the runs that meet a query, as the GUI's search: words, `key OP value` of config keys "
                       "(train.lr, capacity) and fields (id, seed, steps, val, best, train, name, arch, preset, "
                       "status, device, tags), `or`, `-term`, parentheses; e.g. \"arch=mod (lr<0.003 or best<2.4)\"");
  runs_cmd->add_flag("--ids", a->ids, "print only the ids, comma-separated (for --runs of figure, table, compare)");
  runs_cmd->callback([a, &action] { action = [a] { return cmd_runs(a->db, a->json, a->all, a->where, a->ids); }; });

  auto* show_cmd = app.add_subcommand("show", "show one run: config, status, metrics summary, checkpoints");
  show_cmd->add_option("RUN", a->run_id, "run id")->required();
  show_cmd->add_option("--db", a->db, "run store");
  show_cmd->add_flag("--json", a->json, "machine-readable output");
  show_cmd->callback([a, &action] { action = [a] { return cmd_show(a->db, a->run_id, a->json); }; });

  auto* compare_cmd = app.add_subcommand(
      "compare", "the last evaluation of several runs side by side: val loss, FLOPs ratio, routed % per layer");
  compare_cmd->add_option("RUNS", a->run_ids, "run ids")->required();
  compare_cmd->add_option("--db", a->db, "run store");
  compare_cmd->add_flag("--json", a->json, "machine-readable output");
  compare_cmd->callback([a, &action] { action = [a] { return cmd_compare(a->db, a->run_ids, a->json); }; });

  auto* export_cmd =
      app.add_subcommand("export", "export a run's metrics (tidy CSV: run,key,step,wall_time,value) or JSON");
  export_cmd->add_option("RUN", a->run_id, "run id")->required();
  export_cmd->add_option("--db", a->db, "run store");
  export_cmd->add_option("--format", a->format, "csv or json")->check(CLI::IsMember({"csv", "json"}));
  export_cmd->add_option("--out", a->out, "output file (default: standard output)");
  export_cmd->callback([a, &action] { action = [a] { return cmd_export(a->db, a->run_id, a->format, a->out); }; });
}

/// `eval` and `profile`: a stored run's checkpoint evaluated again.
void add_evaluation_commands(CLI::App& app, CommandAction& action) {
  using namespace routelab::cli;
  auto eval = std::make_shared<EvalArgs>();
  auto* eval_cmd = app.add_subcommand(
      "eval", "re-evaluate a stored run in inference mode, optionally with eval-only overrides or a sweep of one");
  eval_cmd->add_option("RUN", eval->run_id, "run id")->required();
  eval_cmd->add_option("--db", eval->db, "run store");
  eval_cmd->add_option("--set", eval->sets, "eval-only override, e.g. --set model.inference=sparse (repeatable)");
  eval_cmd->add_option("--sweep", eval->sweep, "one option over values, e.g. model.exit_threshold=0.6,0.8,0.95");
  eval_cmd->add_option("--split", eval->split, "val, test or train")->check(CLI::IsMember({"val", "test", "train"}));
  eval_cmd
      ->add_option("--batches", eval->batches,
                   "batches (default: the run's train.eval_batches; classifiers: the whole split)")
      ->check(CLI::Range(1, 1000000000));
  eval_cmd->add_option("--batch-size", eval->batch_size, "batch size (default: the run's)")
      ->check(CLI::Range(1, 1000000000));
  eval_cmd->add_option("--step", eval->step, "checkpoint step (default: the latest)");
  eval_cmd->add_flag("--json", eval->json, "machine-readable output");
  eval_cmd->callback([eval, &action] { action = [eval] { return cmd_eval(*eval); }; });

  auto profile = std::make_shared<ProfileArgs>();
  auto* profile_cmd = app.add_subcommand(
      "profile", "residual ratios ||R(x)||/||x|| per layer and sub-block, and the oracle dynamic depth at tau");
  profile_cmd->add_option("RUN", profile->run_id, "run id")->required();
  profile_cmd->add_option("--db", profile->db, "run store");
  profile_cmd->add_option("--set", profile->sets, "eval-only override (repeatable)");
  profile_cmd->add_option("--tau", profile->tau, "oracle threshold: sub-blocks with r < tau count as skipped");
  profile_cmd->add_option("--split", profile->split, "val, test or train")
      ->check(CLI::IsMember({"val", "test", "train"}));
  profile_cmd->add_option("--batches", profile->batches, "evaluation batches")->check(CLI::Range(1, 1000000000));
  profile_cmd->add_option("--batch-size", profile->batch_size, "batch size (default: the run's)")
      ->check(CLI::Range(1, 1000000000));
  profile_cmd->add_option("--bins", profile->bins, "histogram bins over log10 r in [-3, 1]")
      ->check(CLI::Range(1, 1000000000));
  profile_cmd->add_option("--step", profile->step, "checkpoint step (default: the latest)");
  profile_cmd->add_option("--out", profile->out, "also write the full profile (histograms, probe text) as JSON");
  profile_cmd->add_flag("--json", profile->json, "print JSON instead of the table");
  profile_cmd->callback([profile, &action] { action = [profile] { return cmd_profile(*profile); }; });
}

/// `bench train-step` and `bench contention`: RouteLab's training step against the peer, and beside other work.
void add_step_benchmarks(CLI::App& bench_cmd, CommandAction& action) {
  using namespace routelab::cli;
  auto bench = std::make_shared<BenchArgs>();
  auto* step_cmd = bench_cmd.add_subcommand(
      "train-step", "RouteLab's training step vs the PyTorch peer script, side by side (GPT-2 style model)");
  step_cmd->add_option(
      "--script", bench->script,
      "peer script (default: ../shared/tools/pyref2_gpt_step.py for PyTorch 2.x, else pyref_gpt_step.py)");
  step_cmd->add_option(
      "--python", bench->python,
      "Python interpreter with torch (default: $ROUTELAB_PYTHON, the project's .venv-torch, /usr/bin/python3)");
  step_cmd->add_option("--device", bench->device, "cpu, cuda or cuda:N (both sides)");
  step_cmd->add_option("--shape", bench->shape, "small (d 256, L 6, vocab 65) or gpt2-small (d 768, L 12, vocab 50257)")
      ->check(CLI::IsMember({"small", "gpt2-small"}));
  step_cmd->add_flag("--compile", bench->compile, "also time the peer under torch.compile (PyTorch 2.x)");
  step_cmd->add_flag("--cuda-graph", bench->cuda_graph,
                     "CUDA: also time RouteLab's step captured once as a CUDA graph and replayed (train.cuda_graph)");
  step_cmd->add_flag("--tf32", bench->tf32, "CUDA: fp32 matmuls on TF32 tensor cores on both sides, as train.tf32 does");
  step_cmd->add_option("--peak-tflops", bench->peak_tflops, "the device's peak TFLOP/s, to print MFU (H100 bf16: 989)");
  step_cmd->add_option("--steps", bench->steps, "timed steps")->check(CLI::Range(1, 1000000000));
  step_cmd->add_option("--warmup", bench->warmup, "untimed warm-up steps")->check(CLI::Range(0, 1000000000));
  step_cmd->add_option("--threads", bench->threads, "threads for both sides (0: all cores)")->check(CLI::Range(0, 1024));
  step_cmd->add_option("--batch", bench->batch, "batch size (default: the shape's, 64 small, 16 gpt2-small)")
      ->check(CLI::Range(1, 1000000000));
  step_cmd
      ->add_option("--context", bench->context, "sequence length (default: the shape's, 128 small, 1024 gpt2-small)")
      ->check(CLI::Range(1, 1000000000));
  step_cmd->add_option("--profile", bench->profile,
                       "write a Chrome trace of three RouteLab steps after the timed ones (host ops, and GPU kernels "
                       "with LibTorch 2.4+)");
  step_cmd->add_option("--kernels", bench->kernels,
                       "CUDA: after the timed steps, GPU time by kernel class and the N longest kernels, per step")
      ->check(CLI::Range(1, 1000));
  step_cmd->add_option("--precision", bench->precision, "fp32, bf16 or both")
      ->check(CLI::IsMember({"fp32", "bf16", "both"}));
  step_cmd->callback([bench, &action] { action = [bench] { return cmd_bench_train_step(*bench); }; });

  // Its own arguments, with the same defaults as train-step's.
  auto contention = std::make_shared<BenchArgs>();
  auto* contention_cmd = bench_cmd.add_subcommand(
      "contention", "RouteLab's training step idle, beside one busy process, and idle again: the slowdown");
  contention_cmd->add_option("--shape", contention->shape, "small or gpt2-small")
      ->check(CLI::IsMember({"small", "gpt2-small"}));
  contention_cmd->add_option("--steps", contention->steps, "timed steps")->check(CLI::Range(1, 1000000000));
  contention_cmd->add_option("--warmup", contention->warmup, "untimed warm-up steps")->check(CLI::Range(0, 1000000000));
  contention_cmd
      ->add_option("--threads", contention->threads, "threads (0: all cores, following the load as training does)")
      ->check(CLI::Range(0, 1024));
  contention_cmd->add_option("--batch", contention->batch, "batch size (default: the shape's)")
      ->check(CLI::Range(1, 1000000000));
  contention_cmd->add_option("--context", contention->context, "sequence length (default: the shape's)")
      ->check(CLI::Range(1, 1000000000));
  contention_cmd->add_option("--precision", contention->precision, "fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  contention_cmd->callback([contention, &action] {
    action = [contention] { return cmd_bench_contention(*contention); };
  });

}

/// `bench routing` and `bench speed`: a routed layer and an architecture's speed options, on random weights.
void add_layer_benchmarks(CLI::App& bench_cmd, CommandAction& action) {
  using namespace routelab::cli;
  auto routing = std::make_shared<routelab::RoutingBenchOptions>();
  auto no_masked = std::make_shared<bool>(false);
  auto* routing_cmd = bench_cmd.add_subcommand(
      "routing", "one DTRNet layer: compacted routed attention vs the dense-masked oracle vs a dense layer");
  routing_cmd->add_option("--batch", routing->batch, "batch size");
  routing_cmd->add_option("--embd", routing->n_embd, "model width");
  routing_cmd->add_option("--kv-heads", routing->n_kv_head, "key/value heads (0: all)");
  routing_cmd->add_option("--heads", routing->n_head, "attention heads");
  routing_cmd->add_option("--contexts", routing->contexts, "sequence lengths")->delimiter(',');
  routing_cmd->add_option("--fractions", routing->fractions, "routed shares")->delimiter(',');
  routing_cmd->add_option("--reps", routing->reps, "timed repetitions (median)");
  routing_cmd->add_option("--threads", routing->threads, "threads (0: all cores)");
  routing_cmd->add_flag("--no-masked", *no_masked, "skip the O(T^2) masked oracle");
  routing_cmd->callback([routing, no_masked, &action] {
    routing->masked = !*no_masked;
    action = [routing] { return cmd_bench_routing(*routing); };
  });

  auto loss = std::make_shared<routelab::LossBenchOptions>();
  auto* loss_cmd = bench_cmd.add_subcommand(
      "loss", "the next-token loss on a GPU: RouteLab's fused cross-entropy kernels vs the unfused fp32 path");
  loss_cmd->add_option("--device", loss->device, "cuda or cuda:N");
  loss_cmd->add_option("--rows", loss->rows, "rows (batch x context)")->check(CLI::Range(1, 1 << 30));
  loss_cmd->add_option("--vocab", loss->vocab, "columns (vocabulary)")->check(CLI::Range(1, 1 << 24));
  loss_cmd->add_option("--precision", loss->precision, "fp32, bf16 or both")
      ->check(CLI::IsMember({"fp32", "bf16", "both"}));
  loss_cmd->add_option("--reps", loss->reps, "timed repetitions (median)")->check(CLI::Range(1, 1000000));
  loss_cmd->add_option("--warmup", loss->warmup, "untimed repetitions first")->check(CLI::Range(0, 1000000));
  loss_cmd->callback([loss, &action] { action = [loss] { return cmd_bench_loss(*loss); }; });

  auto speed = std::make_shared<routelab::SpeedBenchOptions>();
  auto* speed_cmd = bench_cmd.add_subcommand(
      "speed", "an architecture's speed options at inference (TSA: sparse execution, §3.6): dense vs the "
               "model as configured vs the same weights with its speed options, routers forced to target shares");
  speed_cmd->add_option("--arch", speed->arch,
                        "architecture with speed options (random weights; default: the first registered one)");
  speed_cmd->add_option("--batch", speed->batch, "batch size (TSA: 64)");
  speed_cmd->add_option("--seq", speed->seq, "sequence length (TSA: 256)");
  speed_cmd->add_option("--fractions", speed->fractions, "routed shares to force")->delimiter(',');
  speed_cmd->add_option("--reps", speed->reps, "timed forwards per model and share (median)");
  speed_cmd->add_option("--warmup", speed->warmup, "untimed forwards per model and share");
  speed_cmd->add_option("--threads", speed->threads, "threads (0: all cores)");
  speed_cmd->add_option("--checkpoint", speed->checkpoint, "a run's checkpoint (architecture, shape and weights)");
  speed_cmd->callback([speed, &action] {
    action = [speed] {
      std::cout << routelab::bench_speed_options(*speed).to_table();
      return 0;
    };
  });
}

}  // namespace

int main(int argc, char** argv) {
  routelab::relaunch_with_process_settings(argv);  // returns at once when started by routelab-cli, the launcher
  routelab::cli::remember_arguments(argc, argv);
  CLI::App app{"RouteLab " ROUTELAB_VERSION ": train and inspect token-routing transformers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", ROUTELAB_VERSION);
  std::string log_level = "warn";
  auto* level_option =
      app.add_option("--log-level", log_level,
                     "console log level (trace, debug, info, warn, error; default warn, info for train, resume "
                     "and sweep)")
          ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));

  // Each add_* declares its sub-commands; the one parsed sets `action`, which runs inside the error boundary below.
  CommandAction action;
  add_training_commands(app, action);
  add_inspection_commands(app, action);
  add_evaluation_commands(app, action);
  auto* bench_cmd = app.add_subcommand("bench", "benchmarks that print measured numbers");
  bench_cmd->require_subcommand(1);
  add_step_benchmarks(*bench_cmd, action);
  add_layer_benchmarks(*bench_cmd, action);
  routelab::cli::add_cost_commands(app, *bench_cmd, action);
  routelab::cli::add_generate_commands(app, *bench_cmd, action);
  routelab::cli::add_report_commands(app, *bench_cmd, action);
  routelab::cli::add_context_commands(app, *bench_cmd, action);
  routelab::cli::add_task_commands(app, *bench_cmd, action);
  routelab::cli::add_figure_commands(app, *bench_cmd, action);
  routelab::cli::add_data_commands(app, *bench_cmd, action);
  routelab::cli::add_dist_commands(*bench_cmd, action);

  CLI11_PARSE(app, argc, argv);
  // Training commands report their evaluations and checkpoints at info unless a level was given.
  if (level_option->count() == 0 &&
      (app.got_subcommand("train") || app.got_subcommand("resume") || app.got_subcommand("sweep")))
    log_level = "info";
  routelab::init_logging({.log_dir = "", .console = true, .level = log_level});
  try {
    if (action) return action();
  } catch (const routelab::Error& e) {
    std::cerr << "routelab-cli: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    bool out_of_memory = false;
    const auto text = routelab::foreign_error_text(e, &out_of_memory);
    if (out_of_memory) {  // sizes the command line chose: the user's to make smaller, not RouteLab's fault
      std::cerr << "routelab-cli: out of memory: " << text << "\n";
      return 2;
    }
    std::cerr << "routelab-cli: unexpected error: " << text << "\n";
    return 3;
  }
  return 0;
}
