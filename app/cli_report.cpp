// `routelab-cli table`: paper tables (LaTeX booktabs, Markdown, tidy CSV) from stored runs, and `tables`, the
// named layouts.
#include <fstream>
#include <iostream>
#include <memory>

#include "app/cli_commands.h"
#include "app/cli_registration.h"
#include "core/report/tables/run_tables.h"
#include "core/store/run_query.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/paths.h"

namespace routelab::cli {
namespace {

struct TableArgs {
  std::string name, db, format = "md", out;
  std::vector<std::int64_t> runs;
  std::vector<std::string> metrics;
  bool no_group = false;
  std::string where;  ///< instead of runs: the runs that meet this query
  bool all = false;   ///< with where: archived runs too
};

int run_table(const TableArgs& args) {
  const auto db = args.db.empty() ? default_db_path() : args.db;
  RunStore store(db, /*mark_crashed=*/false);
  const auto spec = args.metrics.empty() ? table_spec(args.name) : custom_table_spec(args.metrics);
  if (args.runs.empty() && args.where.empty()) throw ConfigError("table: give --runs or --where");
  const auto ids = args.where.empty() ? args.runs : run_ids_where(store, args.where, args.all);
  const auto table = build_run_table(store, spec, ids, !args.no_group);
  const std::string text = args.format == "latex" ? to_latex(table) : args.format == "csv" ? to_csv(table)
                                                                                         : to_markdown(table);
  if (args.out.empty()) {
    std::cout << text;
    return 0;
  }
  check_output_path(args.out, db);
  std::ofstream file(args.out, std::ios::binary);
  file << text;
  if (!file) throw Error("cannot write " + args.out);
  std::cout << "wrote " << args.out << " (" << table.rows.size() << " rows, " << table.columns.size()
            << " columns)\n";
  return 0;
}

}  // namespace

void add_report_commands(CLI::App& app, CLI::App& /*bench*/, CommandAction& action) {
  auto args = std::make_shared<TableArgs>();
  auto* table = app.add_subcommand("table", "a paper table from stored runs: LaTeX (booktabs), Markdown or tidy CSV");
  table->add_option("NAME", args->name, "layout (see `tables`); ignored with --metrics")->default_val("summary");
  auto* runs =
      table->add_option("--runs", args->runs, "run ids (runs differing only in seed become one row, mean ± std)")
          ->delimiter(',');
  auto* where =
      table->add_option("--where", args->where, "instead of --runs: the runs that meet a query, as `runs --where`")
          ->excludes(runs);
  table->add_flag("--all", args->all, "with --where: archived runs too")->needs(where);
  table->add_option("--db", args->db, "run store");
  table->add_option("--format", args->format, "latex, md or csv")->check(CLI::IsMember({"latex", "md", "csv"}));
  table->add_option("--out", args->out, "output file (default: stdout)");
  table->add_option("--metrics", args->metrics, "metric keys instead of a named layout")->delimiter(',');
  table->add_flag("--no-group", args->no_group, "one row per run (no grouping over seeds)");
  table->callback([args, &action] { action = [args] { return run_table(*args); }; });

  auto* list = app.add_subcommand("tables", "list the named table layouts");
  list->callback([&action] {
    action = [] {
      for (const auto& spec : table_specs()) {
        std::cout << spec.name << "\n    " << spec.description << "\n    columns:";
        for (const auto& c : spec.columns) std::cout << " " << c.key;
        std::cout << "\n";
      }
      return 0;
    };
  });
}

}  // namespace routelab::cli
