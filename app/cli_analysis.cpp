// routelab-cli eval, profile, context and routing-breakdown: re-evaluate a stored run (optionally with eval-only
// overrides, or sweeping one), profile its residual ratios, evaluate it beyond its training context, and break its
// routing down by kind of token.
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/cli_commands.h"
#include "app/cli_registration.h"
#include "core/analysis/context_length.h"
#include "core/analysis/residual_profile.h"
#include "core/analysis/routing_breakdown.h"
#include "core/analysis/run_analysis.h"
#include "core/util/errors.h"
#include "core/util/paths.h"

namespace routelab::cli {
namespace {

/// "model.exit_threshold=0.5,0.7,0.9" -> ("model.exit_threshold", {"0.5", "0.7", "0.9"}).
std::pair<std::string, std::vector<std::string>> parse_sweep(const std::string& spec) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw ConfigError("--sweep " + spec + ": expected section.key=v1,v2,... (e.g. model.exit_threshold=0.6,0.8,0.95)");
  std::vector<std::string> values;
  std::stringstream rest(spec.substr(eq + 1));
  for (std::string v; std::getline(rest, v, ',');)
    if (!v.empty()) values.push_back(v);
  return {spec.substr(0, eq), values};
}

void print_reports(const std::vector<RunEvalReport>& reports, const std::string& sweep_key) {
  const auto& first = reports.front();
  const bool classifier = first.task == Task::Classification;
  std::set<std::string> stat_keys;
  for (const auto& r : reports)
    for (const auto& [key, value] : r.stats)  // classifiers: the layer means (per-layer keys are in --json)
      if (!classifier || key.find("/L") == std::string::npos) stat_keys.insert(key);
  std::cout << "run " << first.run_id << " " << first.name << " (" << first.arch << "), checkpoint step " << first.step
            << ", " << first.split << " split, " << first.batches << " batches of " << first.batch_size
            << ", inference mode\n";
  std::cout << "| " << (sweep_key.empty() ? "overrides" : sweep_key)
            << (classifier ? " | loss | accuracy | macro-F1 | FLOPs ratio | routed |"
                           : " | loss | ppl | bpc | FLOPs ratio | routed |");
  for (const auto& key : stat_keys) std::cout << " " << key << " |";
  std::cout << "\n|---|---|---|---|---|---|";
  for (std::size_t i = 0; i < stat_keys.size(); ++i) std::cout << "---|";
  std::cout << "\n";
  for (const auto& r : reports) {
    std::string label;
    if (!sweep_key.empty()) {
      label = r.sets.back().substr(sweep_key.size() + 1);
    } else {
      for (const auto& s : r.sets) label += (label.empty() ? "" : " ") + s;
      if (label.empty()) label = "(as trained)";
    }
    std::cout << "| " << label << " | " << fixed(r.loss, 4) << " | "
              << (classifier ? fixed(r.accuracy, 4) + " | " + fixed(r.macro_f1, 4)
                             : fixed(r.ppl, 3) + " | " + fixed(r.bpc, 4))
              << " | " << fixed(r.flops_ratio, 4) << " | " << fixed(100.0 * r.routed_fraction, 1) << "% |";
    for (const auto& key : stat_keys) {
      const auto it = r.stats.find(key);
      std::cout << " " << (it == r.stats.end() ? std::string("-") : fixed(it->second, 4)) << " |";
    }
    std::cout << "\n";
  }
}

}  // namespace

int cmd_eval(const EvalArgs& args) {
  RunEvalOptions options;
  options.split = parse_split(args.split, "--split");
  options.batches = args.batches;
  options.batch_size = args.batch_size;
  const bool classifier = is_classification_run(args.db, args.run_id);
  auto evaluate = [&](const std::vector<std::string>& sets) {
    if (classifier) {
      auto run = load_classifier_run(args.db, args.run_id, sets, args.step);
      return evaluate_run(run, options);
    }
    auto run = load_run(args.db, args.run_id, sets, args.step);
    return evaluate_run(run, options);
  };
  std::vector<RunEvalReport> reports;
  std::string sweep_key;
  if (args.sweep.empty()) {
    reports.push_back(evaluate(args.sets));
  } else {
    const auto [key, values] = parse_sweep(args.sweep);
    sweep_key = key;
    for (const auto& value : values) {
      auto sets = args.sets;
      sets.push_back(key + "=" + value);
      reports.push_back(evaluate(sets));
    }
  }
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : reports) out.push_back(r.to_json());
    std::cout << (args.sweep.empty() ? out[0] : out).dump(2) << "\n";
    return 0;
  }
  print_reports(reports, sweep_key);
  return 0;
}

int cmd_profile(const ProfileArgs& args) {
  auto run = load_run(args.db, args.run_id, args.sets, args.step);
  ResidualProfileOptions options;
  options.split = parse_split(args.split, "--split");
  options.batches = args.batches;
  options.batch_size = args.batch_size;
  options.tau = args.tau;
  options.bins = args.bins;
  const auto profile = profile_residuals(run, options);
  if (!args.out.empty()) {
    check_output_path(args.out, args.db);
    std::ofstream file(args.out);
    if (!file) throw Error(args.out + ": cannot write");
    file << profile.to_json().dump(2) << "\n";
  }
  if (args.json)
    std::cout << profile.to_json().dump(2) << "\n";
  else
    std::cout << profile.to_table();
  return 0;
}

}  // namespace routelab::cli

// `routelab-cli context`: perplexity versus evaluation length (DTRNet Figure 3); `routelab-cli routing-breakdown`: the
// routed share per layer by kind of token.
namespace routelab::cli {

void add_context_commands(CLI::App& app, CLI::App& /*bench*/, CommandAction& action) {
  struct Args {
    std::string db;
    std::int64_t run_id = 0;
    bool store = false, json = false;
    ContextCurveOptions options;
  };
  auto args = std::make_shared<Args>();
  args->options.lengths = {128, 256, 512, 1024, 2048};
  auto* cmd = app.add_subcommand(
      "context", "perplexity versus evaluation length beyond the training context, with RoPE scaling (none, linear, yarn)");
  cmd->add_option("RUN", args->run_id, "run id")->required();
  cmd->add_option("--db", args->db, "run store");
  cmd->add_option("--lengths", args->options.lengths, "evaluation lengths")->delimiter(',');
  cmd->add_option("--scaling", args->options.scaling, "RoPE context extension")
      ->check(CLI::IsMember({"none", "linear", "yarn"}));
  cmd->add_option("--factor", args->options.factor, "extension factor (0: longest length / training context)");
  cmd->add_option("--tokens", args->options.tokens, "validation tokens per length");
  cmd->add_option("--split", args->options.split, "val, test or train");
  cmd->add_option("--step", args->options.step, "checkpoint step (0: latest)");
  cmd->add_option("--set", args->options.sets, "further eval-only override (repeatable)");
  cmd->add_flag("--store", args->store, "store the curve with the run (an evaluation of split context:<scaling>x<factor>)");
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->callback([args, &action] {
    action = [args] {
      const auto curve = context_curve(args->db, args->run_id, args->options);
      std::cout << (args->json ? curve.to_json().dump(2) + "\n" : curve.to_table());
      if (args->store) {
        store_context_curve(args->db, curve);
        std::cerr << "stored as evaluation '" << curve.split_name() << "' of run " << curve.run_id << "\n";
      }
      return 0;
    };
  });

  struct BreakdownArgs {
    std::string db, split = "val", format;
    std::vector<std::int64_t> runs;
    std::int64_t step = 0;
    std::vector<std::string> by, sets;
    bool json = false, gates = false, recompute = false, per_layer = false, no_group = false;
    RoutingBreakdownOptions options;
  };
  auto breakdown = std::make_shared<BreakdownArgs>();
  auto* rb = app.add_subcommand("routing-breakdown",
                                "what a run's routers route: the share of tokens each routed layer computes, by "
                                "character class, position, training frequency, predictability and next-token loss");
  rb->add_option("RUNS", breakdown->runs, "run ids (language models), comma-separated")->required()->delimiter(',');
  rb->add_option("--db", breakdown->db, "run store");
  rb->add_option("--by", breakdown->by,
                 "groupings (default all): class, position, frequency, predictability, difficulty")
      ->delimiter(',');
  rb->add_option("--tokens", breakdown->options.tokens, "tokens analysed, in whole windows spread over the split")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  rb->add_option("--frequency-tokens", breakdown->options.frequency_tokens,
                 "training tokens counted for the frequency groups")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 34));
  rb->add_option("--batch-size", breakdown->options.batch_size, "windows per forward (0: the run's train.batch_size)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 20));
  rb->add_option("--split", breakdown->split, "val, test or train");
  rb->add_option("--step", breakdown->step, "checkpoint step (0: latest)");
  rb->add_option("--set", breakdown->sets, "eval-only override, e.g. model.inference=sparse (repeatable)");
  rb->add_flag("--gates", breakdown->gates,
               "the groups' mean gates instead of their routed shares (soft gating: TSA's soft inference runs every "
               "token)");
  rb->add_flag("--recompute", breakdown->recompute,
               "compute it from the checkpoint, neither reading nor replacing the breakdown the store keeps (each "
               "breakdown is kept in the run store, and asking again with the same checkpoint, overrides, split and "
               "sample reads it)");
  rb->add_flag("--json", breakdown->json, "machine-readable output (both)");
  rb->add_option("--format", breakdown->format,
                 "a paper table of the runs instead: groups x runs, the % of each group on the routed path (the mean "
                 "over the routed layers; --gates: the mean gates), seeds of one config as mean ± std, each run's "
                 "latest checkpoint (or its of --step) with the --set overrides: latex, md or csv (one --by grouping)")
      ->check(CLI::IsMember({"latex", "md", "csv"}));
  rb->add_flag("--per-layer", breakdown->per_layer, "with --format: a column per run and routed layer");
  rb->add_flag("--no-group", breakdown->no_group, "with --format: a column per run (no grouping over seeds)");
  rb->callback([breakdown, &action] {
    action = [breakdown] {
      auto options = breakdown->options;
      options.split = parse_split(breakdown->split, "--split");
      if (!breakdown->by.empty()) {
        options.groupings.clear();
        for (const auto& name : breakdown->by) options.groupings.push_back(parse_token_grouping(name, "--by"));
      }
      if (!breakdown->format.empty()) {
        if (options.groupings.size() != 1)
          throw ConfigError("--format: choose one grouping with --by (e.g. --by class)");
        for (const auto& [flag, set] : {std::pair{"--recompute", breakdown->recompute}, {"--json", breakdown->json}})
          if (set)
            throw ConfigError(std::string("--format: a table reads the kept breakdowns; ") + flag +
                              " is for the per-run tables");
        BreakdownTableOptions how;
        how.per_layer = breakdown->per_layer;
        how.by_seed = !breakdown->no_group;
        how.gates = breakdown->gates;
        how.sets = breakdown->sets;
        how.step = breakdown->step;
        const auto table = routing_breakdown_table(breakdown->db.empty() ? default_db_path() : breakdown->db,
                                                   breakdown->runs, options.groupings.front(), options, how);
        const auto& f = breakdown->format;
        std::cout << (f == "latex" ? to_latex(table) : f == "md" ? to_markdown(table) : to_csv(table));
        return 0;
      }
      if (breakdown->per_layer || breakdown->no_group) throw ConfigError("--per-layer and --no-group need --format");
      auto documents = nlohmann::json::array();
      bool first = true;
      for (const auto id : breakdown->runs) {
        RoutingBreakdown result;
        if (breakdown->recompute) {
          auto run = load_run(breakdown->db, id, breakdown->sets, breakdown->step);
          result = routing_breakdown(run, options);
        } else {
          result = stored_routing_breakdown(breakdown->db, id, options, breakdown->sets, breakdown->step);
        }
        if (breakdown->json)
          documents.push_back(result.to_json());
        else
          std::cout << (first ? "" : "\n") << result.to_table(breakdown->gates);
        first = false;
      }
      // One run: its document; several: an array of them.
      if (breakdown->json) std::cout << (documents.size() == 1 ? documents.front() : documents).dump(2) << "\n";
      return 0;
    };
  });
}

}  // namespace routelab::cli
