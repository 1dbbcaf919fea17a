// Seed 001's (DRR) named figure: the parameters and forward FLOPs Depth Routing Residuals add to a PreNorm
// transformer of the same shape.
#include "core/models/drr.h"
#include "core/report/seed_figure_detail.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {
namespace {

const char* kDrrTitle = "Added cost of Depth Routing Residuals: parameters and forward FLOPs versus a standard "
                        "PreNorm transformer of the same shape (seed 001, \"Added cost\")";

Figure seed001_overhead(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kDrrTitle);
  FigurePanel params, flops;
  params.y_label = "Parameters (M)";
  flops.y_label = "Forward FLOPs per sequence (GFLOPs)";
  params.title = "Parameters";
  flops.title = "FLOPs";
  FigureBars::Member base_p, drr_p, base_f, drr_f;
  base_p.label = base_f.label = "PreNorm";
  drr_p.label = drr_f.label = "DRR";
  base_p.color = base_f.color = arch_color("dense");
  drr_p.color = drr_f.color = arch_color("drr");
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    if (rec.arch != "drr")
      throw ConfigError(request.name + ": run " + std::to_string(id) + " is a '" + rec.arch + "' run, not 'drr'");
    const auto config = run_config(store, rec);
    const auto shape = data_shape_of(config);
    const auto context = shape.context;
    const auto t = drr_transformer_options_from_json(config.at("model"), shape.vocab, context);
    const auto o = drr_overhead(t, drr_options_from_json(config.at("model")), context);
    const auto prefix = request.run_ids.size() > 1 ? run_label(rec) + ": " : std::string();
    for (auto* panel : {&params, &flops}) {
      panel->bars.categories.push_back(prefix + "model");
      panel->bars.categories.push_back(prefix + "layers");
    }
    base_p.values.insert(base_p.values.end(), {o.base_params / 1e6, o.base_stack_params / 1e6});
    drr_p.values.insert(drr_p.values.end(), {o.drr_params / 1e6, o.drr_stack_params / 1e6});
    base_f.values.insert(base_f.values.end(), {o.base_flops / 1e9, o.base_stack_flops / 1e9});
    drr_f.values.insert(drr_f.values.end(), {o.drr_flops / 1e9, o.drr_stack_flops / 1e9});
    f.meta["overhead"][std::to_string(id)] = {{"seq", o.seq},
                                              {"param_overhead", o.param_overhead()},
                                              {"stack_param_overhead", o.stack_param_overhead()},
                                              {"flops_overhead", o.flops_overhead()},
                                              {"stack_flops_overhead", o.stack_flops_overhead()}};
  }
  params.bars.members = {base_p, drr_p};
  flops.bars.members = {base_f, drr_f};
  f.panels = {params, flops};
  return f;
}

}  // namespace

std::vector<FigureInfo> seed001_figures() {
  return {
      {"seed001-overhead", kDrrTitle,
       "Bars: parameters and forward FLOPs of one sequence of the training context, whole model and layers only, "
       "for each drr run and the plain PreNorm (GPT-2 style) stack of the same shape (drr_overhead). Reads run_ids.",
       1, seed001_overhead},
  };
}

}  // namespace routelab::figure_detail
