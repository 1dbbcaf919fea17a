// Tables for papers: rows of runs (or groups of seeds) by metric columns, each cell a mean with its standard
// deviation over the group, written as LaTeX (booktabs, best value per column in bold, units in the headers,
// caption and label), Markdown, or tidy CSV. No Torch, no Qt: the CLI and the GUI export the same bytes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace routelab {

/// Mean and sample standard deviation (n - 1) of the values of one cell; n = 1 has std 0.
struct CellSummary {
  double mean = 0;
  double std = 0;
  std::int64_t n = 0;
};
/// Summarises the finite values; nullopt when there are none.
std::optional<CellSummary> summarize(const std::vector<double>& values);

enum class Better { Lower, Higher, None };

struct TableColumn {
  std::string header;      ///< plain text, e.g. "Val. loss" (escaped on output)
  std::string unit;        ///< plain text, e.g. "%", "" for none; shown as "header (unit)"
  Better better = Better::None;
  int precision = 3;       ///< digits after the decimal point
  double scale = 1.0;      ///< value shown = stored value x scale (e.g. 100 for a fraction shown in %)
};

struct TableRow {
  std::string label;                              ///< plain text (escaped on output)
  std::vector<std::optional<CellSummary>> cells;  ///< one per column; nullopt is shown as a dash
};

struct ReportTable {
  std::string caption;       ///< plain text
  std::string label;         ///< LaTeX label, e.g. "tab:dtrnet-table1"
  std::string row_header = "Run";
  std::vector<TableColumn> columns;
  std::vector<TableRow> rows;
};

/// The row index holding the best mean of column `c` (ties: the first), or -1 when the column has no better
/// direction or no values.
int best_row(const ReportTable& table, std::size_t c);

/// Escapes LaTeX's special characters (& % $ # _ { } ~ ^ \) in plain text.
std::string latex_escape(const std::string& text);

/// A complete `table` environment with booktabs rules; cells `$m \pm s$` (just `$m$` when every group of the
/// column has one run), the best per column in bold, "--" for missing values, arrows for the better direction.
std::string to_latex(const ReportTable& table);
/// A GitHub Markdown table with the same content (best in **bold**, "–" for missing values).
std::string to_markdown(const ReportTable& table);
/// Tidy CSV: one line per (row, column): row,column,unit,mean,std,n (values unscaled, full precision; RFC 4180
/// quoting).
std::string to_csv(const ReportTable& table);

/// One CSV field quoted when it holds a comma, a quote or a line break (RFC 4180).
std::string csv_field(const std::string& text);
/// Parses RFC 4180 CSV text into rows of fields (for round-trip checks and imports). Throws DataError naming
/// `source` and the line on an unterminated quote.
std::vector<std::vector<std::string>> parse_csv(const std::string& text, const std::string& source = "csv");

}  // namespace routelab
