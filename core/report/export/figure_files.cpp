// The renderer-free files of a figure bundle: tidy CSV of every plotted number, a pgfplots picture that reads
// that CSV, and the JSON sidecar (write_figure_data_files).
#include "core/report/export/figure_files.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

#include "core/report/tables/table.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// Rows of the tidy CSV in the order figure_to_csv writes them; pgfplots reads ranges of them by row index.
struct CsvRow {
  std::size_t panel;
  std::string kind, series, category;
  double x, y;
  std::optional<double> lo, hi, value;
};

/// Per panel: the first row and row count of each series, each bar member and the heat map.
struct CsvLayout {
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> series, members;
  std::vector<std::pair<std::size_t, std::size_t>> heatmap;
};

std::vector<CsvRow> csv_rows(const Figure& figure, CsvLayout* layout) {
  std::vector<CsvRow> rows;
  if (layout) *layout = {};
  for (std::size_t p = 0; p < figure.panels.size(); ++p) {
    const auto& panel = figure.panels[p];
    if (layout) layout->series.emplace_back(), layout->members.emplace_back();
    for (std::size_t k = 0; k < panel.series.size(); ++k) {
      const auto& s = panel.series[k];
      const auto first = rows.size();
      const bool band = !s.y_lo.empty();
      for (std::size_t i = 0; i < s.x.size(); ++i)
        rows.push_back({p, to_string(s.kind), s.label, "", s.x[i], s.y[i], band ? std::optional(s.y_lo[i]) : std::nullopt,
                        band ? std::optional(s.y_hi[i]) : std::nullopt, std::nullopt});
      if (layout) layout->series.back().emplace_back(first, rows.size() - first);
    }
    for (const auto& m : panel.bars.members) {
      const auto first = rows.size();
      const bool errors = !m.errors.empty();
      for (std::size_t c = 0; c < m.values.size(); ++c) {
        const double v = m.values[c];
        const std::string category = c < panel.bars.categories.size() ? panel.bars.categories[c] : "";
        rows.push_back({p, "bar", m.label, category, static_cast<double>(c), v,
                        errors ? std::optional(v - m.errors[c]) : std::nullopt,
                        errors ? std::optional(v + m.errors[c]) : std::nullopt, std::nullopt});
      }
      if (layout) layout->members.back().emplace_back(first, rows.size() - first);
    }
    const auto& h = panel.heatmap;
    const auto first = rows.size();
    for (std::size_t r = 0; r < h.rows; ++r)
      for (std::size_t c = 0; c < h.cols; ++c)
        rows.push_back({p, "cell", r < h.row_labels.size() ? h.row_labels[r] : "",
                        c < h.col_labels.size() ? h.col_labels[c] : "", static_cast<double>(c), static_cast<double>(r),
                        std::nullopt, std::nullopt, h.values[r * h.cols + c]});
    if (layout) layout->heatmap.emplace_back(first, rows.size() - first);
  }
  return rows;
}

std::string tex_colour_name(int color) {
  const auto n = static_cast<int>(figure_palette().size());
  return "routelab" + std::string(1, static_cast<char>('A' + ((color % n) + n) % n));
}

const char* tex_dash(int dash) {
  switch (dash) {
    case 1: return "dashed";
    case 2: return "dotted";
    case 3: return "dashdotted";
    default: return "solid";
  }
}

/// Plain text for a pgfplots label: LaTeX specials escaped, control characters shown as escapes, braces
/// balanced by construction.
std::string tex_text(const std::string& text) {
  // pdflatex knows few characters beyond ASCII: the tokenizers' marks for a line break and a tab become escapes,
  // anything else beyond ASCII (or a control character) a '?'.
  std::string printable;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto ch = static_cast<unsigned char>(text[i]);
    if (text.compare(i, 3, "\u23CE") == 0) {  // ⏎
      printable += "\\n";
      i += 2;
    } else if (text.compare(i, 3, "\u21E5") == 0) {  // ⇥
      printable += "\\t";
      i += 2;
    } else if (ch == '\n') {
      printable += "\\n";
    } else if (ch == '\t') {
      printable += "\\t";
    } else if (ch < 0x20 || ch == 0x7F) {
      printable += '?';
    } else if (ch >= 0x80) {
      printable += '?';
      while (i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) ++i;  // one code point
    } else {
      printable += static_cast<char>(ch);
    }
  }
  auto escaped = latex_escape(printable);
  // Spaces at the ends of a token are invisible: show them.
  if (!escaped.empty() && escaped.front() == ' ') escaped = "\\textvisiblespace{}" + escaped.substr(1);
  if (escaped.size() > 1 && escaped.back() == ' ') escaped = escaped.substr(0, escaped.size() - 1) + "\\textvisiblespace{}";
  if (escaped == " ") escaped = "\\textvisiblespace{}";
  return escaped;
}

std::string tex_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string row_range(std::pair<std::size_t, std::size_t> range) {
  return "restrict expr to domain={\\coordindex}{" + std::to_string(range.first) + ":" +
         std::to_string(range.first + range.second - 1) + "}";
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw Error("cannot write " + path);
}

}  // namespace

// -------------------------------------------------------------------------------------------------------------------

std::string figure_to_csv(const Figure& figure) {
  // Numbers first, text last: pgfplots' table reader ignores surplus trailing columns, so a label holding a
  // (quoted) comma cannot shift the numbers it reads.
  std::string out = "panel,x,y,y_lo,y_hi,value,kind,series,category\n";
  // A number that does not apply to a row's kind is written as nan too: pgfplots evaluates expressions on every
  // row it reads, and an empty cell is no number.
  const auto optional_number = [](const std::optional<double>& v) { return csv_number(v ? *v : kNaN); };
  for (const auto& r : csv_rows(figure, nullptr)) {
    out += std::to_string(r.panel) + "," + csv_number(r.x) + "," + csv_number(r.y) + "," + optional_number(r.lo) + "," +
           optional_number(r.hi) + "," + optional_number(r.value) + "," + r.kind + "," + csv_field(r.series) + "," +
           csv_field(r.category) + "\n";
  }
  return out;
}

namespace {

/// The file's head: how to use it, the standalone switch (an article when read before any \documentclass), the
/// palette's colours and the diverging colour map.
void write_pgf_preamble(std::ostringstream& t, const Figure& figure, const std::string& csv_file) {
  t << "% RouteLab figure '" << figure.name << "': " << figure.title << "\n"
    << "% Data: " << csv_file << " (tidy CSV: panel,x,y,y_lo,y_hi,value,kind,series,category; each plot reads its\n"
    << "% rows by index). \\input this file in a document that loads pgfplots with\n"
    << "% \\usepgfplotslibrary{groupplots,fillbetween} and \\usetikzlibrary{patterns}, or compile it alone.\n"
    << "\\makeatletter\n"
    << "\\ifx\\documentclass\\@twoclasseserror\\def\\routelabStandalone{0}\\else\\def\\routelabStandalone{1}\\fi\n"
    << "\\makeatother\n"
    << "\\if1\\routelabStandalone\n"
    << "\\documentclass{article}\n"
    << "\\usepackage[T1]{fontenc}\n"
    << "\\usepackage{pgfplots}\n"
    << "\\usepgfplotslibrary{groupplots,fillbetween}\n"
    << "\\usetikzlibrary{patterns}\n"
    << "\\pgfplotsset{compat=1.16}\n"
    << "\\pagestyle{empty}\n"
    << "\\begin{document}\n"
    << "\\fi\n";
  const auto& palette = figure_palette();
  for (std::size_t i = 0; i < palette.size(); ++i)
    t << "\\definecolor{" << tex_colour_name(static_cast<int>(i)) << "}{HTML}{" << palette[i].substr(1) << "}\n";
  t << "\\pgfplotsset{colormap={routelabdiverging}{rgb255=(33,102,172) rgb255=(247,247,247) rgb255=(178,24,43)}}\n";
}

/// Tick positions 0..n-1 and their LaTeX-escaped labels.
std::pair<std::string, std::string> pgf_ticks(const std::vector<std::string>& labels) {
  std::string pos, text;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) pos += ',', text += ',';
    pos += std::to_string(i);
    text += '{';
    text.append(tex_text(labels[i]));
    text += '}';
  }
  return {pos, text};
}

/// One panel's axis options: title, labels, log axes, the bars' categories, the heat map's ticks and colour bar.
std::string pgf_axis_options(const FigurePanel& panel) {
  std::vector<std::string> axis;
  if (!panel.title.empty()) axis.push_back("title={" + tex_text(panel.title) + "}");
  if (!panel.x_label.empty()) axis.push_back("xlabel={" + tex_text(panel.x_label) + "}");
  if (!panel.y_label.empty()) axis.push_back("ylabel={" + tex_text(panel.y_label) + "}");
  if (panel.log_x) axis.push_back("xmode=log");
  if (panel.log_y) axis.push_back("ymode=log");
  if (!panel.bars.members.empty()) {
    const auto [pos, text] = pgf_ticks(panel.bars.categories);
    axis.push_back("xtick={" + pos + "}, xticklabels={" + text + "}, ymin=0, enlarge x limits={abs=0.6}");
    axis.push_back("legend style={at={(0.5,1.02)}, anchor=south, legend columns=2}");
  }
  const auto& h = panel.heatmap;
  if (!h.values.empty()) {
    const auto [xpos, xtext] = pgf_ticks(h.col_labels);
    const auto [ypos, ytext] = pgf_ticks(h.row_labels);
    if (!h.col_labels.empty())
      axis.push_back("xtick={" + xpos + "}, xticklabels={" + xtext + "}, x tick label style={rotate=90}");
    if (!h.row_labels.empty()) axis.push_back("ytick={" + ypos + "}, yticklabels={" + ytext + "}");
    axis.push_back("y dir=reverse, axis on top, enlargelimits=false, point meta min=" + tex_number(h.lo) +
                   ", point meta max=" + tex_number(h.hi) + ", colorbar, colorbar style={title={" +
                   tex_text(h.colour_label) + "}}, " +
                   (h.diverging ? "colormap name=routelabdiverging" : "colormap name=viridis"));
  }
  std::string options;
  for (const auto& a : axis) options += (options.empty() ? "" : ", ") + a;
  return options;
}

/// Panel `p`'s lines, points and bands, each reading its rows of the CSV.
void write_pgf_series(std::ostringstream& t, const FigurePanel& panel, std::size_t p, const CsvLayout& layout,
                      const std::string& csv_file) {
  for (std::size_t k = 0; k < panel.series.size(); ++k) {
    const auto& s = panel.series[k];
    const auto range = layout.series[p][k];
    if (range.second == 0) continue;
    const std::string colour = tex_colour_name(s.color);
    const std::string rows_of = row_range(range);
    if (!s.y_lo.empty()) {
      const std::string lo = "rlLo" + std::to_string(p) + "x" + std::to_string(k);
      const std::string hi = "rlHi" + std::to_string(p) + "x" + std::to_string(k);
      t << "\\addplot[draw=none, forget plot, name path=" << lo << "] table[col sep=comma, x=x, y=y_lo, " << rows_of
        << "] {" << csv_file << "};\n"
        << "\\addplot[draw=none, forget plot, name path=" << hi << "] table[col sep=comma, x=x, y=y_hi, " << rows_of
        << "] {" << csv_file << "};\n"
        << "\\addplot[fill=" << colour << ", fill opacity=0.2, draw=none, forget plot] fill between[of=" << hi
        << " and " << lo << "];\n";
    }
    std::vector<std::string> style = {"color=" + colour, tex_dash(s.dash)};
    if (s.kind == SeriesKind::Points) {
      style.push_back("only marks, mark=*");
    } else {
      style.push_back(s.marked ? "mark=*" : "no marks");
      if (s.kind == SeriesKind::Step) style.push_back("const plot");
    }
    if (s.faint) style.push_back("opacity=0.3, thin");
    else style.push_back("thick");
    const bool in_legend = panel.legend && !s.label.empty();
    if (!in_legend) style.push_back("forget plot");
    std::string st;
    for (const auto& x : style) st += (st.empty() ? "" : ", ") + x;
    t << "\\addplot[" << st << "] table[col sep=comma, x=x, y=y, " << rows_of << "] {" << csv_file << "};\n";
    if (in_legend) t << "\\addlegendentry{" << tex_text(s.label) << "}\n";
  }
}

/// Panel `p`'s grouped bars: each member offset within its category, error bars on its own bars.
void write_pgf_bars(std::ostringstream& t, const FigurePanel& panel, std::size_t p, const CsvLayout& layout,
                    const std::string& csv_file) {
  const auto n_members = panel.bars.members.size();
  for (std::size_t k = 0; k < n_members; ++k) {
    const auto& m = panel.bars.members[k];
    const auto range = layout.members[p][k];
    if (range.second == 0) continue;
    const double width = 0.8 / static_cast<double>(n_members);
    const double shift = (static_cast<double>(k) - (static_cast<double>(n_members) - 1) / 2.0) * width;
    const std::string colour = tex_colour_name(m.color);
    // The member's offset goes into x itself (not bar shift), so its error bars sit on its bars.
    std::string style = "ybar, bar width=" + tex_number(width) + ", bar shift=0pt, area legend, draw=" + colour +
                        ", fill=" + colour;
    if (m.hatched) style += "!25, postaction={pattern=north east lines, pattern color=" + colour + "}";
    if (m.faint) style += ", fill opacity=0.35";
    std::string table = "col sep=comma, x expr=\\thisrow{x}+" + tex_number(shift) + ", y=y, " + row_range(range);
    const bool in_legend = panel.legend && !m.label.empty();
    if (!in_legend) style += ", forget plot";
    if (!m.errors.empty()) {  // last: the keys after /.cd live under error bars
      style += ", error bars/.cd, y dir=both, y explicit";
      table += ", y error plus expr=\\thisrow{y_hi}-\\thisrow{y}, y error minus expr=\\thisrow{y}-\\thisrow{y_lo}";
    }
    t << "\\addplot[" << style << "] table[" << table << "] {" << csv_file << "};\n";
    if (in_legend) t << "\\addlegendentry{" << tex_text(m.label) << "}\n";
  }
}

/// A heat map: one cell per (row, column), coloured by its colour value. pgfplots' matrix plot takes no slice of a
/// file (filtered rows count as holes), so the cells (the CSV's "cell" rows of this panel) are written inline.
void write_pgf_heatmap(std::ostringstream& t, const FigureHeatmap& h) {
  t << "\\addplot[matrix plot*, point meta=explicit, mesh/cols=" << h.cols << ", mesh/rows=" << h.rows
    << "] table[x=x, y=y, meta=value, row sep=\\\\] {\nx y value\\\\\n";
  for (std::size_t r = 0; r < h.rows; ++r) {
    for (std::size_t c = 0; c < h.cols; ++c) t << c << " " << r << " " << csv_number(h.colour_value(r, c)) << "\\\\ ";
    t << "\n";
  }
  t << "};\n";
}

}  // namespace

std::string figure_to_pgfplots(const Figure& figure, const std::string& csv_file) {
  CsvLayout layout;
  csv_rows(figure, &layout);
  const auto n_panels = figure.panels.size();
  const std::size_t columns =
      figure.columns > 0 ? static_cast<std::size_t>(figure.columns) : std::max<std::size_t>(1, n_panels);
  const std::size_t rows = n_panels == 0 ? 1 : (n_panels + columns - 1) / columns;
  const double panel_w = figure.width_cm / static_cast<double>(std::min(columns, std::max<std::size_t>(1, n_panels)));
  const double panel_h = figure.height_cm / static_cast<double>(rows);
  const std::string font = "\\fontsize{" + tex_number(figure.font_pt) + "}{" + tex_number(1.2 * figure.font_pt) +
                           "}\\selectfont";

  std::ostringstream t;
  write_pgf_preamble(t, figure, csv_file);
  t << "\\begin{tikzpicture}[font=" << font << "]\n";
  const bool grouped = n_panels > 1;
  const std::string common = "width=" + tex_number(panel_w) + "cm, height=" + tex_number(panel_h) +
                             "cm, unbounded coords=jump, legend style={font=" + font +
                             ", draw=none, fill=none}, label style={font=" + font + "}, tick label style={font=" +
                             font + "}, title style={font=" + font + "}";
  if (grouped) {
    // Colour bars sit right of their panel: leave them room.
    const bool colour_bars = std::any_of(figure.panels.begin(), figure.panels.end(),
                                         [](const FigurePanel& p) { return !p.heatmap.values.empty(); });
    t << "\\begin{groupplot}[group style={group size=" << columns << " by " << rows
      << ", horizontal sep=" << (colour_bars ? "3.2cm" : "1.6cm") << ", vertical sep=1.6cm}, " << common << "]\n";
  }
  for (std::size_t p = 0; p < n_panels; ++p) {
    const auto& panel = figure.panels[p];
    const std::string options = pgf_axis_options(panel);
    if (grouped) {
      t << "\\nextgroupplot[" << options << "]\n";
    } else {
      t << "\\begin{axis}[" << common << (options.empty() ? "" : ", ") << options << "]\n";
    }
    write_pgf_series(t, panel, p, layout, csv_file);
    write_pgf_bars(t, panel, p, layout, csv_file);
    if (!panel.heatmap.values.empty()) write_pgf_heatmap(t, panel.heatmap);
    if (!grouped) t << "\\end{axis}\n";
  }
  if (grouped) t << "\\end{groupplot}\n";
  if (n_panels == 0) t << "\\node {(empty figure)};\n";
  t << "\\end{tikzpicture}\n"
    << "\\if1\\routelabStandalone\n"
    << "\\end{document}\n"
    << "\\fi\n";
  return t.str();
}

std::vector<std::string> write_figure_data_files(const Figure& figure, const std::string& stem) {
  namespace fs = std::filesystem;
  const fs::path base(stem);
  if (base.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(base.parent_path(), ec);
    if (ec) throw Error("cannot create " + base.parent_path().string() + ": " + ec.message());
  }
  const std::string csv = stem + ".csv", tex = stem + ".tex", sidecar = stem + ".json";
  write_text_file(csv, figure_to_csv(figure));
  // The picture names the CSV by its file name: the two files travel together.
  write_text_file(tex, figure_to_pgfplots(figure, fs::path(csv).filename().string()));
  write_text_file(sidecar, to_json(figure).dump(2) + "\n");
  return {csv, tex, sidecar};
}

}  // namespace routelab
