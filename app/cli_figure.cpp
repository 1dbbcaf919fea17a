// `routelab-cli figure`: a named figure from stored runs, written as the renderer-free bundle files (tidy CSV,
// pgfplots picture, JSON sidecar) by core, and as PDF/SVG/PNG through routelab-render (the Qt renderer built
// with -DROUTELAB_BUILD_GUI=ON); `figures` lists the catalogue.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>

#include "app/cli_commands.h"
#include "app/cli_registration.h"
#include "core/report/builders/catalog.h"
#include "core/report/export/figure_files.h"
#include "core/report/tables/table.h"
#include "core/store/run_query.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/paths.h"

namespace routelab::cli {
namespace {

namespace fs = std::filesystem;

struct FigureArgs {
  std::string name, db, out, x_axis, format_table;
  std::vector<std::int64_t> runs;
  std::string metric = "val/loss";
  double smoothing = 0;
  bool no_group = false, bundle = false;
  std::vector<double> budgets;
  std::int64_t step = 0;
  std::vector<std::int64_t> lengths;
  std::vector<std::string> options;
  std::string where;  ///< instead of runs: the runs that meet this query
  bool all = false;   ///< with where: archived runs too
  double width_cm = 8.5, height_cm = 6.0, font_pt = 8.0, dpi = 0;
  double width_in = 0, height_in = 0;  ///< when given, replace the sizes in cm
};

/// routelab-render next to this executable, else on PATH; "" when there is none.
std::string find_renderer() {
  std::error_code ec;
  const auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = self.parent_path() / "routelab-render";
    if (fs::is_regular_file(beside, ec)) return beside.string();
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const auto candidate = fs::path(dir) / "routelab-render";
    if (fs::is_regular_file(candidate, ec) && access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return {};
}

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

/// Runs routelab-render on `sidecar` into `out`; throws when it fails.
void render(const std::string& renderer, const std::string& sidecar, const std::string& out, const FigureArgs& a) {
  std::string command = shell_quote(renderer) + " " + shell_quote(sidecar) + " --out " + shell_quote(out) +
                        " --width-cm " + number(a.width_cm) + " --height-cm " + number(a.height_cm) + " --font-pt " +
                        number(a.font_pt);
  if (a.dpi > 0) command += " --dpi " + number(a.dpi);
  const int status = std::system(command.c_str());
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error("routelab-render failed on " + sidecar + " (" + command + ")");
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  file.close();
  if (!file) throw Error("cannot write " + path);
}

int run_figure(const FigureArgs& a) {
  check_output_path(a.out, a.db);
  RunStore store(a.db.empty() ? default_db_path() : a.db, /*mark_crashed=*/false);
  FigureRequest request;
  request.name = a.name;
  if (a.runs.empty() && a.where.empty()) throw ConfigError("figure " + a.name + ": give --runs or --where");
  request.run_ids = a.where.empty() ? a.runs : run_ids_where(store, a.where, a.all);
  request.metric = a.metric;
  // The matched figure compares at equal compute unless told otherwise.
  request.x_axis = !a.x_axis.empty() ? a.x_axis : a.name == "matched" ? "flops" : "step";
  request.smoothing = a.smoothing;
  request.by_seed = !a.no_group;
  request.budgets = a.budgets;
  request.step = a.step;
  request.lengths = a.lengths;
  request.options = a.options;
  request.width_cm = a.width_cm;
  request.height_cm = a.height_cm;
  request.font_pt = a.font_pt;

  if (!a.format_table.empty()) {
    const auto table = figure_table(a.name).build(store, request);
    const std::string text = a.format_table == "latex" ? to_latex(table)
                             : a.format_table == "csv" ? to_csv(table)
                                                       : to_markdown(table);
    if (a.out.empty()) {
      std::cout << text;
    } else {
      write_file(a.out, text);
      std::cout << "wrote " << a.out << " (" << table.rows.size() << " rows, " << table.columns.size() << " columns)\n";
    }
    return 0;
  }
  if (a.out.empty()) throw ConfigError("figure --out: give FILE.pdf, .svg, .png, .csv, .tex or .json");

  const auto figure = build_figure(store, request);
  const fs::path out(a.out);
  const auto ext = out.extension().string();
  const bool bundle_stem = a.bundle && ext.empty();  // --bundle --out fig5: the stem itself
  if (!bundle_stem && ext != ".pdf" && ext != ".svg" && ext != ".png" && ext != ".csv" && ext != ".tex" &&
      ext != ".json")
    throw ConfigError("figure --out " + a.out + ": unknown extension (use .pdf, .svg, .png, .csv, .tex or .json)");
  const auto stem = (out.parent_path() / out.stem()).string();
  const auto written = write_figure_data_files(figure, stem);
  std::string data_files;
  for (const auto& p : written) data_files += (data_files.empty() ? "" : ", ") + p;

  std::vector<std::string> images;
  if (a.bundle) {
    images = {stem + ".pdf", stem + ".svg", stem + ".png"};
  } else if (ext == ".pdf" || ext == ".svg" || ext == ".png") {
    images = {a.out};
  }
  if (!images.empty()) {
    const auto renderer = find_renderer();
    if (renderer.empty()) {
      std::cerr << "error: rendering PDF/SVG/PNG needs routelab-render, built with -DROUTELAB_BUILD_GUI=ON; the CSV, "
                   "pgfplots and JSON files were written: "
                << data_files << "\n";
      return 2;
    }
    for (const auto& image : images) render(renderer, written[2], image, a);
  }
  std::cout << "figure '" << figure.name << "' (" << figure.panels.size() << " panel"
            << (figure.panels.size() == 1 ? "" : "s") << ", " << request.run_ids.size() << " run"
            << (request.run_ids.size() == 1 ? "" : "s") << "): " << data_files;
  for (const auto& image : images) std::cout << ", " << image;
  std::cout << "\n";
  return 0;
}

}  // namespace

void add_figure_commands(CLI::App& app, CLI::App& /*bench*/, CommandAction& action) {
  auto a = std::make_shared<FigureArgs>();
  auto* fig = app.add_subcommand(
      "figure", "a named figure from stored runs: PDF/SVG/PNG (through routelab-render), tidy CSV, pgfplots, JSON");
  fig->add_option("NAME", a->name, "figure (see `figures`)")->required();
  auto* runs = fig->add_option("--runs", a->runs, "run ids (runs differing only in seed become one mean ± std group)")
                   ->delimiter(',');
  auto* where = fig->add_option("--where", a->where, "instead of --runs: the runs that meet a query, as `runs --where`")
                    ->excludes(runs);
  fig->add_flag("--all", a->all, "with --where: archived runs too")->needs(where);
  fig->add_option("--db", a->db, "run store");
  fig->add_option("--metric", a->metric,
                  "metric key (curves, matched, pareto, sweep); 'training'/'both' for routed-layers; "
                  "'gate'/'decision'/'expert' for token-map(s); class, position, frequency, predictability or "
                  "difficulty for routing-by-token")
      ->default_val("val/loss");
  fig->add_option("--x", a->x_axis, "x axis: step, tokens, flops or wall (default: step; matched: flops)")
      ->check(CLI::IsMember({"step", "tokens", "flops", "wall"}));
  fig->add_option("--smoothing", a->smoothing, "debiased EMA weight in [0, 0.999] for train/* metrics");
  fig->add_flag("--no-group", a->no_group, "one line per run (no mean ± std over seeds)");
  fig->add_option("--budgets", a->budgets, "matched: budgets on the x axis")->delimiter(',');
  fig->add_option("--step", a->step,
                  "evaluation / probe step of routing figures, the step of the sweep's values (default: the last)");
  fig->add_option("--lengths", a->lengths, "cost-length: sequence lengths")->delimiter(',');
  fig->add_option("--options", a->options,
                  "sweep-grid: its two options, rows then columns (e.g. train.lr,model.capacity)")
      ->delimiter(',');
  auto* width_cm = fig->add_option("--width-cm", a->width_cm, "figure width in cm")->default_val(8.5);
  auto* height_cm = fig->add_option("--height-cm", a->height_cm, "figure height in cm")->default_val(6.0);
  fig->add_option("--width-in", a->width_in, "figure width in inches (instead of --width-cm)")
      ->check(CLI::PositiveNumber)
      ->excludes(width_cm);
  fig->add_option("--height-in", a->height_in, "figure height in inches (instead of --height-cm)")
      ->check(CLI::PositiveNumber)
      ->excludes(height_cm);
  fig->add_option("--font-pt", a->font_pt, "font size in pt")->default_val(8.0);
  fig->add_option("--dpi", a->dpi, "PNG resolution (default: the renderer's)");
  fig->add_option("--out", a->out,
                  "FILE.pdf|.svg|.png|.csv|.tex|.json (the CSV, .tex and .json are always written); a stem with --bundle");
  fig->add_flag("--bundle", a->bundle, "write stem.{pdf,svg,png,csv,tex,json}");
  fig->add_option("--format-table", a->format_table,
                  "matched, sweep-grid: the figure's numbers as a table, latex, csv or md (to --out or stdout)")
      ->check(CLI::IsMember({"latex", "csv", "md"}));
  fig->callback([a, &action] {
    if (a->width_in > 0) a->width_cm = a->width_in * 2.54;
    if (a->height_in > 0) a->height_cm = a->height_in * 2.54;
    action = [a] { return run_figure(*a); };
  });

  auto* list = app.add_subcommand("figures", "list the named figures");
  list->callback([&action] {
    action = [] {
      for (const auto& info : figure_catalog())
        std::cout << info.name << "  (" << info.min_runs << (info.max_runs == info.min_runs ? "" : "+") << " run"
                  << (info.min_runs == 1 && info.max_runs == 1 ? "" : "s") << ")  " << info.title << "\n";
      return 0;
    };
  });
}

}  // namespace routelab::cli
