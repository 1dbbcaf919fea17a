// The figure model's JSON sidecar: written with every field, read back with errors naming the key path.
#include "core/report/figure/figure.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/util/errors.h"

namespace routelab {
namespace {

using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

json numbers_to_json(const std::vector<double>& values) {
  json out = json::array();
  for (double v : values) out.push_back(std::isfinite(v) ? json(v) : json(nullptr));
  return out;
}

/// Reads sidecars: every accessor names the origin and the key path in its error.
class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw ConfigError(origin_ + ": " + path + ": " + what);
  }

  const json& field(const json& object, const std::string& key, const std::string& path) const {
    if (!object.is_object()) fail(path, "expected an object");
    const auto it = object.find(key);
    if (it == object.end()) fail(path + "." + key, "missing");
    return *it;
  }

  std::string text(const json& object, const std::string& key, const std::string& path,
                   const std::string& fallback = "") const {
    if (!object.contains(key)) return fallback;
    const json& v = object.at(key);
    if (!v.is_string()) fail(path + "." + key, "expected a string");
    return v.get<std::string>();
  }

  double number(const json& object, const std::string& key, const std::string& path, double fallback) const {
    if (!object.contains(key)) return fallback;
    const json& v = object.at(key);
    if (v.is_null()) return kNaN;
    if (!v.is_number()) fail(path + "." + key, "expected a number");
    return v.get<double>();
  }

  int integer(const json& object, const std::string& key, const std::string& path, int fallback) const {
    if (!object.contains(key)) return fallback;
    const json& v = object.at(key);
    if (!v.is_number_integer()) fail(path + "." + key, "expected an integer");
    return v.get<int>();
  }

  bool flag(const json& object, const std::string& key, const std::string& path, bool fallback) const {
    if (!object.contains(key)) return fallback;
    const json& v = object.at(key);
    if (!v.is_boolean()) fail(path + "." + key, "expected true or false");
    return v.get<bool>();
  }

  std::vector<double> numbers(const json& object, const std::string& key, const std::string& path) const {
    std::vector<double> out;
    if (!object.contains(key)) return out;
    const json& v = object.at(key);
    if (!v.is_array()) fail(path + "." + key, "expected an array of numbers");
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i].is_null()) {
        out.push_back(kNaN);
      } else if (v[i].is_number()) {
        out.push_back(v[i].get<double>());
      } else {
        fail(path + "." + key + "[" + std::to_string(i) + "]", "expected a number or null");
      }
    }
    return out;
  }

  std::vector<std::string> texts(const json& object, const std::string& key, const std::string& path) const {
    std::vector<std::string> out;
    if (!object.contains(key)) return out;
    const json& v = object.at(key);
    if (!v.is_array()) fail(path + "." + key, "expected an array of strings");
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) fail(path + "." + key + "[" + std::to_string(i) + "]", "expected a string");
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }

  const json& array(const json& object, const std::string& key, const std::string& path) const {
    static const json kEmpty = json::array();
    if (!object.contains(key)) return kEmpty;
    const json& v = object.at(key);
    if (!v.is_array()) fail(path + "." + key, "expected an array");
    return v;
  }

 private:
  std::string origin_;
};

json series_to_json(const FigureSeries& s) {
  return {{"label", s.label},         {"x", numbers_to_json(s.x)},       {"y", numbers_to_json(s.y)},
          {"y_lo", numbers_to_json(s.y_lo)}, {"y_hi", numbers_to_json(s.y_hi)}, {"kind", to_string(s.kind)},
          {"color", s.color},         {"dash", s.dash},                  {"faint", s.faint},
          {"marked", s.marked}};
}

FigureSeries series_from_json(const Reader& r, const json& doc, const std::string& path) {
  FigureSeries s;
  s.label = r.text(doc, "label", path);
  s.x = r.numbers(doc, "x", path);
  s.y = r.numbers(doc, "y", path);
  if (s.x.size() != s.y.size()) r.fail(path, "x and y differ in length");
  s.y_lo = r.numbers(doc, "y_lo", path);
  s.y_hi = r.numbers(doc, "y_hi", path);
  if ((!s.y_lo.empty() && s.y_lo.size() != s.y.size()) || s.y_lo.size() != s.y_hi.size())
    r.fail(path, "y_lo and y_hi must both be empty or both the length of y");
  s.kind = parse_series_kind(r.text(doc, "kind", path, "line"), path + ".kind");
  s.color = r.integer(doc, "color", path, 0);
  s.dash = r.integer(doc, "dash", path, 0);
  if (s.dash < 0 || s.dash > 3) r.fail(path + ".dash", "expected 0 (solid) to 3 (dash-dot)");
  s.faint = r.flag(doc, "faint", path, false);
  s.marked = r.flag(doc, "marked", path, false);
  return s;
}

json bars_to_json(const FigureBars& bars) {
  json members = json::array();
  for (const auto& m : bars.members)
    members.push_back({{"label", m.label},
                       {"values", numbers_to_json(m.values)},
                       {"errors", numbers_to_json(m.errors)},
                       {"color", m.color},
                       {"hatched", m.hatched},
                       {"faint", m.faint}});
  return {{"categories", bars.categories}, {"members", members}};
}

FigureBars bars_from_json(const Reader& r, const json& doc, const std::string& path) {
  FigureBars bars;
  bars.categories = r.texts(doc, "categories", path);
  const json& members = r.array(doc, "members", path);
  for (std::size_t i = 0; i < members.size(); ++i) {
    const std::string p = path + ".members[" + std::to_string(i) + "]";
    FigureBars::Member m;
    m.label = r.text(members[i], "label", p);
    m.values = r.numbers(members[i], "values", p);
    if (m.values.size() != bars.categories.size()) r.fail(p + ".values", "expected one value per category");
    m.errors = r.numbers(members[i], "errors", p);
    if (!m.errors.empty() && m.errors.size() != m.values.size())
      r.fail(p + ".errors", "expected none or one per category");
    m.color = r.integer(members[i], "color", p, 0);
    m.hatched = r.flag(members[i], "hatched", p, false);
    m.faint = r.flag(members[i], "faint", p, false);
    bars.members.push_back(std::move(m));
  }
  return bars;
}

json heatmap_to_json(const FigureHeatmap& h) {
  return {{"rows", h.rows},
          {"cols", h.cols},
          {"values", numbers_to_json(h.values)},
          {"row_labels", h.row_labels},
          {"col_labels", h.col_labels},
          {"lo", h.lo},
          {"hi", h.hi},
          {"colour_label", h.colour_label},
          {"diverging", h.diverging},
          {"row_lo", numbers_to_json(h.row_lo)},
          {"row_hi", numbers_to_json(h.row_hi)},
          {"cell_text", h.cell_text}};
}

FigureHeatmap heatmap_from_json(const Reader& r, const json& doc, const std::string& path) {
  FigureHeatmap h;
  const int rows = r.integer(doc, "rows", path, 0);
  const int cols = r.integer(doc, "cols", path, 0);
  if (rows < 0 || cols < 0) r.fail(path, "rows and cols must be >= 0");
  h.rows = static_cast<std::size_t>(rows);
  h.cols = static_cast<std::size_t>(cols);
  h.values = r.numbers(doc, "values", path);
  if (h.values.size() != h.rows * h.cols) r.fail(path + ".values", "expected rows x cols values");
  h.row_labels = r.texts(doc, "row_labels", path);
  if (!h.row_labels.empty() && h.row_labels.size() != h.rows) r.fail(path + ".row_labels", "expected one per row");
  h.col_labels = r.texts(doc, "col_labels", path);
  if (!h.col_labels.empty() && h.col_labels.size() != h.cols)
    r.fail(path + ".col_labels", "expected one per column");
  h.lo = r.number(doc, "lo", path, 0.0);
  h.hi = r.number(doc, "hi", path, 1.0);
  h.colour_label = r.text(doc, "colour_label", path);
  h.diverging = r.flag(doc, "diverging", path, false);
  h.row_lo = r.numbers(doc, "row_lo", path);
  h.row_hi = r.numbers(doc, "row_hi", path);
  if (!(h.row_lo.empty() && h.row_hi.empty()) && (h.row_lo.size() != h.rows || h.row_hi.size() != h.rows))
    r.fail(path + ".row_lo", "expected none, or one lo and one hi per row");
  h.cell_text = r.texts(doc, "cell_text", path);
  if (!h.cell_text.empty() && h.cell_text.size() != h.rows * h.cols)
    r.fail(path + ".cell_text", "expected none, or one text per cell");
  return h;
}

}  // namespace

const std::vector<std::string>& figure_palette() {
  static const std::vector<std::string> kPalette = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                    "#E69F00", "#56B4E9", "#F0E442", "#000000",
                                                    "#882255", "#44AA99", "#999933", "#AA4499"};
  return kPalette;
}

double FigureHeatmap::colour_value(std::size_t r, std::size_t c) const {
  const std::size_t index = r * cols + c;
  const double v = index < values.size() ? values[index] : kNaN;
  if (row_lo.empty() || r >= row_lo.size() || r >= row_hi.size()) return v;
  const double row_lo_r = row_lo[r], span = row_hi[r] - row_lo_r;
  if (!std::isfinite(v) || v < row_lo_r) return kNaN;
  const double at = span > 0 ? (v - row_lo_r) / span : 0.5;
  return lo + std::min(1.0, at) * (hi - lo);
}

bool Figure::empty() const {
  for (const auto& p : panels) {
    for (const auto& s : p.series)
      if (!s.x.empty()) return false;
    if (!p.bars.members.empty() || !p.heatmap.values.empty()) return false;
  }
  return true;
}

std::string layer_label(std::int64_t layer) {
  std::string label = "L";  // appended: "L" + to_string() draws GCC 12's false -Warray-bounds where it is inlined
  return label.append(std::to_string(layer));
}

std::string to_string(SeriesKind kind) {
  switch (kind) {
    case SeriesKind::Line: return "line";
    case SeriesKind::Points: return "points";
    case SeriesKind::Step: return "step";
  }
  return "line";
}

SeriesKind parse_series_kind(const std::string& text, const std::string& key) {
  if (text == "line") return SeriesKind::Line;
  if (text == "points") return SeriesKind::Points;
  if (text == "step") return SeriesKind::Step;
  throw ConfigError(key + ": unknown series kind '" + text + "' (known: line, points, step)");
}

nlohmann::json to_json(const Figure& figure) {
  json panels = json::array();
  for (const auto& p : figure.panels) {
    json series = json::array();
    for (const auto& s : p.series) series.push_back(series_to_json(s));
    panels.push_back({{"title", p.title},
                      {"x_label", p.x_label},
                      {"y_label", p.y_label},
                      {"log_x", p.log_x},
                      {"log_y", p.log_y},
                      {"legend", p.legend},
                      {"series", series},
                      {"bars", bars_to_json(p.bars)},
                      {"heatmap", heatmap_to_json(p.heatmap)}});
  }
  return {{"name", figure.name},         {"title", figure.title},       {"columns", figure.columns},
          {"width_cm", figure.width_cm}, {"height_cm", figure.height_cm}, {"font_pt", figure.font_pt},
          {"meta", figure.meta},         {"panels", panels}};
}

Figure figure_from_json(const nlohmann::json& doc, const std::string& origin) {
  const Reader r(origin);
  if (!doc.is_object()) r.fail("(document)", "expected a JSON object");
  Figure f;
  f.name = r.text(doc, "name", "figure");
  f.title = r.text(doc, "title", "figure");
  f.columns = r.integer(doc, "columns", "figure", 0);
  if (f.columns < 0) r.fail("figure.columns", "must be >= 0");
  f.width_cm = r.number(doc, "width_cm", "figure", f.width_cm);
  f.height_cm = r.number(doc, "height_cm", "figure", f.height_cm);
  f.font_pt = r.number(doc, "font_pt", "figure", f.font_pt);
  if (!(f.width_cm > 0) || !(f.height_cm > 0)) r.fail("figure.width_cm", "width and height must be > 0 cm");
  if (!(f.font_pt > 0)) r.fail("figure.font_pt", "must be > 0 pt");
  if (doc.contains("meta")) {
    if (!doc.at("meta").is_object()) r.fail("figure.meta", "expected an object");
    f.meta = doc.at("meta");
  }
  const json& panels = r.array(doc, "panels", "figure");
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const std::string path = "figure.panels[" + std::to_string(i) + "]";
    const json& pd = panels[i];
    if (!pd.is_object()) r.fail(path, "expected an object");
    FigurePanel p;
    p.title = r.text(pd, "title", path);
    p.x_label = r.text(pd, "x_label", path);
    p.y_label = r.text(pd, "y_label", path);
    p.log_x = r.flag(pd, "log_x", path, false);
    p.log_y = r.flag(pd, "log_y", path, false);
    p.legend = r.flag(pd, "legend", path, true);
    const json& series = r.array(pd, "series", path);
    for (std::size_t k = 0; k < series.size(); ++k)
      p.series.push_back(series_from_json(r, series[k], path + ".series[" + std::to_string(k) + "]"));
    if (pd.contains("bars")) p.bars = bars_from_json(r, pd.at("bars"), path + ".bars");
    if (pd.contains("heatmap")) p.heatmap = heatmap_from_json(r, pd.at("heatmap"), path + ".heatmap");
    f.panels.push_back(std::move(p));
  }
  return f;
}

}  // namespace routelab
