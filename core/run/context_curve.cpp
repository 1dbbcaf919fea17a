#include "core/run/context_curve.h"

#include <sstream>

#include <spdlog/fmt/fmt.h>

#include "core/run/json_reader.h"
#include "core/store/run_store.h"

namespace routelab {

using run_detail::kNaN;
using run_detail::Reader;

nlohmann::json ContextCurve::to_json() const {
  nlohmann::json points_json = nlohmann::json::array();
  for (const auto& p : points)
    points_json.push_back(
        {{"length", p.length}, {"loss", p.loss}, {"ppl", p.ppl}, {"bpc", p.bpc}, {"windows", p.windows}});
  return {{"run", run_id}, {"name", name}, {"arch", arch}, {"step", step}, {"trained_context", trained_context},
          {"rope_scaling", scaling}, {"rope_factor", factor}, {"points", points_json}};
}

std::string ContextCurve::split_name() const { return fmt::format("context:{}x{:g}", scaling, factor); }

std::string ContextCurve::to_table() const {
  std::ostringstream out;
  out << fmt::format("run {} {} ({}), checkpoint step {}, trained context {}, RoPE scaling {} (factor {:g})\n",
                     run_id, name, arch, step, trained_context, scaling, factor);
  out << "| length | x trained | loss | ppl | windows |\n|---|---|---|---|---|\n";
  for (const auto& p : points)
    out << fmt::format("| {} | {:.2f} | {:.4f} | {:.3f} | {} |\n", p.length,
                       static_cast<double>(p.length) / static_cast<double>(trained_context), p.loss, p.ppl, p.windows);
  return out.str();
}

bool is_context_curve(const EvalRow& row) { return row.split.rfind("context:", 0) == 0; }

ContextCurve read_context_curve(const EvalRow& row) {
  const std::string where = "evaluation '" + row.split + "' at step " + std::to_string(row.step);
  const auto doc = nlohmann::json::parse(row.extra_json, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) throw DataError(where + ": its document is not a JSON object");
  const Reader in(doc, where, "");
  ContextCurve c;
  c.run_id = in.integer("run").value_or(0);
  c.step = in.integer("step").value_or(row.step);
  c.trained_context = in.integer("trained_context").value_or(0);
  c.name = in.text("name").value_or("");
  c.arch = in.text("arch").value_or("");
  c.scaling = in.text("rope_scaling").value_or("none");
  c.factor = in.number("rope_factor").value_or(1.0);
  const auto* points = in.array("points");
  for (std::size_t i = 0; points && i < points->size(); ++i) {
    const Reader p = in.element("points", i);
    c.points.push_back({p.integer("length").value_or(0), p.number("loss").value_or(kNaN),
                        p.number("ppl").value_or(kNaN), p.number("bpc").value_or(kNaN),
                        p.integer("windows").value_or(0)});
  }
  return c;
}

}  // namespace routelab
