// routelab-cli tasks: zero-shot accuracy and perplexity of a stored language model on task files (the DTRNet paper's
// downstream columns), optionally kept with the run.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <memory>

#include "app/cli_registration.h"
#include "core/analysis/zero_shot_compare.h"
#include "core/analysis/zero_shot_run.h"
#include "core/util/errors.h"

namespace routelab::cli {
namespace {

struct TaskArgs {
  std::string db;
  std::vector<std::int64_t> run_ids;
  std::vector<std::string> tasks, fewshot_from;
  bool store = false, json = false, every_checkpoint = false, stored = false, every_pair = false;
  std::string samples;
  ZeroShotOptions options;
};

/// Scores each run (each asked checkpoint) on the task files: `reports` gets every report, `latest` each run's last.
void score_runs(const TaskArgs& args, std::vector<ZeroShotReport>& reports, std::vector<ZeroShotReport>& latest) {
  std::ofstream samples;
  if (!args.samples.empty()) {  // opened first: a path that cannot be written fails before any scoring
    samples.open(args.samples, std::ios::binary | std::ios::trunc);
    if (!samples) throw ConfigError("--samples: cannot write " + args.samples);
  }
  const auto tasks = read_tasks(args.options);  // once, for every run and checkpoint
  for (const auto run_id : args.run_ids) {
    for (const auto at : steps_to_score(args.db, run_id, args.every_checkpoint, args.options.step)) {
      auto options = args.options;
      options.step = at;
      reports.push_back(evaluate_zero_shot(args.db, run_id, tasks, options));
      const auto& report = reports.back();
      for (std::size_t t = 0; t < report.tasks.size(); ++t)  // the report's tasks in the order read
        for (std::size_t i = 0; samples.is_open() && i < report.tasks[t].samples.size(); ++i) {
          auto line = report.tasks[t].sample_json(i, &tasks.at(t));
          line["run"] = report.run_id;
          line["step"] = report.step;
          samples << line.dump() << "\n";
        }
      if (!args.json) std::cout << report.to_table();
      if (args.store) {
        store_zero_shot(report.db_path, report);
        std::cerr << "stored as metrics task/<name>/<measure> of run " << report.run_id << " at step " << report.step
                  << "\n";
      }
    }
    latest.push_back(reports.back());
  }
  if (samples.is_open() && !samples.flush())
    throw ConfigError("--samples: writing " + args.samples + " failed (disk full?)");
}

}  // namespace

void add_task_commands(CLI::App& app, CLI::App& /*bench*/, CommandAction& action) {
  auto args = std::make_shared<TaskArgs>();
  std::string formats;
  for (const auto& f : task_formats()) formats += (formats.empty() ? "" : ", ") + f;
  auto* cmd = app.add_subcommand(
      "tasks",
      "zero-shot accuracy (acc, acc_norm) and perplexity of a stored language model on task files, scored as "
      "lm-evaluation-harness scores them (ARC, BoolQ, HellaSwag, PIQA, MMLU, Winogrande, LAMBADA, WikiText)");
  cmd->add_option("RUN", args->run_ids,
                  "run ids: each is scored on every task; the later ones are compared with the first example by "
                  "example (the difference's 95% interval and McNemar's exact test)")
      ->required();
  cmd->add_option("--task", args->tasks,
                  "NAME=FILE:FORMAT (repeatable; NAME defaults to the file's stem, FORMAT to the one its first line's "
                  "keys match: " +
                      formats + "; a file not ending in .jsonl is text); with --stored, the names to read (all: none "
                      "given)");
  cmd->add_option("--db", args->db, "run store");
  cmd->add_option("--limit", args->options.limit, "examples per task (0: all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--batch-size", args->options.batch_size, "requests per forward (0: the run's train.batch_size)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--max-length", args->options.max_length,
                  "tokens the model reads at most, longer contexts cut from the left (0: the run's data.context)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 24));
  auto* shots = cmd->add_option("--fewshot", args->options.fewshot,
                                 "solved examples before each prompt, drawn as lm-evaluation-harness draws them "
                                 "(--num_fewshot; results named NAME_Kshot; 0: zero-shot)")
                    ->check(CLI::Range(0, 1000));
  cmd->add_option("--fewshot-from", args->fewshot_from,
                  "NAME=FILE:FORMAT: task NAME's few-shot examples from FILE, its training or dev split (repeatable; "
                  "a task not named draws from its own file, never its own answer)")
      ->needs(shots);
  cmd->add_option("--fewshot-seed", args->options.fewshot_seed, "the draw's seed (the harness's fewshot_random_seed)")
      ->needs(shots);
  auto* step = cmd->add_option("--step", args->options.step, "checkpoint step (0: latest)");
  cmd->add_flag("--every-checkpoint", args->every_checkpoint,
                "score every kept checkpoint of each run, oldest first (with --store: each task's measures over "
                "training); runs are paired at their latest")
      ->excludes(step);
  cmd->add_option("--set", args->options.sets, "eval-only override, e.g. model.inference=sparse (repeatable)");
  cmd->add_flag(
      "--store", args->store,
      "keep the results with the run: metrics task/<name>/<measure> at the checkpoint's step (for `table` and "
      "the Compare view) and each task's result document");
  cmd->add_flag("--json", args->json, "machine-readable output");
  auto* samples_option =
      cmd->add_option("--samples", args->samples,
                      "write every example as scored to this JSON Lines file: its task, label, prediction and each "
                      "request's context, continuation, log-likelihood, token count and greedy flag");
  cmd->add_flag("--stored", args->stored,
                "score nothing: read each run's results kept by --store (each task's latest) and pair them as "
                "scored ones")
      ->excludes("--store")
      ->excludes(samples_option)
      ->excludes(step)
      ->excludes(shots)
      ->excludes("--every-checkpoint");
  cmd->add_flag("--every-pair", args->every_pair,
                "pair each run with every later one (in the order given), not only the later ones with the first");
  cmd->callback([args, &action] {
    action = [args] {
      for (const auto& t : args->tasks) args->options.tasks.push_back(parse_task_spec(t));
      for (const auto& t : args->fewshot_from) args->options.fewshot_from.push_back(parse_task_spec(t));
      std::vector<ZeroShotReport> reports, latest;  // every report; each run's latest, for the pairs
      if (args->stored) {
        std::vector<std::string> names;
        for (const auto& t : args->options.tasks) names.push_back(t.name);
        for (const auto run_id : args->run_ids) {
          reports.push_back(stored_zero_shot(args->db, run_id, names));
          if (!args->json) std::cout << reports.back().to_table();
        }
        latest = reports;
      } else {
        score_runs(*args, reports, latest);
      }
      const auto comparisons = compare_runs(latest, args->every_pair);
      if (args->json) {
        nlohmann::json doc = reports.front().to_json();  // one run at one step: its report, as before
        if (reports.size() > 1) {
          doc = {{"runs", nlohmann::json::array()}, {"comparisons", nlohmann::json::array()}};
          for (const auto& report : reports) doc["runs"].push_back(report.to_json());
          for (const auto& c : comparisons) doc["comparisons"].push_back(c.to_json());
        }
        std::cout << doc.dump(2) << "\n";
      } else if (!comparisons.empty()) {
        std::cout << "\n"
                  << (args->every_pair ? std::string("every pair of runs")
                                       : "paired against run " + std::to_string(latest.front().run_id))
                  << " (the same examples: the difference's interval from the per-example differences, p from the "
                     "examples only one run gets right)\n"
                  << comparisons_table(comparisons);
      }
      return 0;
    };
  });
}

}  // namespace routelab::cli
