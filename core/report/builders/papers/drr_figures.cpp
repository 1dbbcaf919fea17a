// DRR's named figure: the parameters and forward FLOPs Depth Routing Residuals add to a PreNorm
// transformer of the same shape.
#include "core/models/registry.h"
#include "core/report/builders/papers/paper_detail.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {
namespace {

const char* kDrrTitle = "Added cost of Depth Routing Residuals: parameters and forward FLOPs versus a standard "
                        "PreNorm transformer of the same shape (DRR, \"Added cost\")";

Figure drr_overhead(const RunStore& store, const FigureRequest& request) {
  auto f = start(request, kDrrTitle);
  FigurePanel params, flops;
  params.y_label = "Parameters (M)";
  flops.y_label = "Forward FLOPs per sequence (GFLOPs)";
  params.title = "Parameters";
  flops.title = "FLOPs";
  FigureBars::Member base_p, arch_p, base_f, arch_f;
  base_p.label = base_f.label = "PreNorm";
  base_p.color = base_f.color = arch_color(kBaselineArchitecture);
  for (const auto id : request.run_ids) {
    const auto rec = run_record(store, id);
    const auto& entry = architecture(rec.arch);
    if (!entry.overhead)
      throw ConfigError(request.name + ": run " + std::to_string(id) + " is a '" + rec.arch +
                        "' run, whose architecture states no overhead against its plain stack (drr does)");
    if (arch_p.label.empty()) {  // the first run's architecture names and colours the bars
      arch_p.label = arch_f.label = entry.display_name;
      arch_p.color = arch_f.color = arch_color(entry.id);
    }
    const auto config = run_config(store, rec);
    const auto shape = data_shape_of(store, rec, config);
    const auto o = entry.overhead(config.at("model"), shape.vocab, shape.context);
    const auto prefix = request.run_ids.size() > 1 ? run_label(rec) + ": " : std::string();
    for (auto* panel : {&params, &flops}) {
      panel->bars.categories.push_back(prefix + "model");
      panel->bars.categories.push_back(prefix + "layers");
    }
    base_p.values.insert(base_p.values.end(), {o.base_params / 1e6, o.base_stack_params / 1e6});
    arch_p.values.insert(arch_p.values.end(), {o.arch_params / 1e6, o.arch_stack_params / 1e6});
    base_f.values.insert(base_f.values.end(), {o.base_flops / 1e9, o.base_stack_flops / 1e9});
    arch_f.values.insert(arch_f.values.end(), {o.arch_flops / 1e9, o.arch_stack_flops / 1e9});
    f.meta["overhead"][std::to_string(id)] = {{"seq", o.seq},
                                              {"param_overhead", o.param_overhead()},
                                              {"stack_param_overhead", o.stack_param_overhead()},
                                              {"flops_overhead", o.flops_overhead()},
                                              {"stack_flops_overhead", o.stack_flops_overhead()}};
  }
  params.bars.members = {base_p, arch_p};
  flops.bars.members = {base_f, arch_f};
  f.panels = {params, flops};
  return f;
}

}  // namespace

std::vector<FigureInfo> drr_figures() {
  return {
      {"drr-overhead", kDrrTitle,
       "Bars: parameters and forward FLOPs of one sequence of the training context, whole model and layers only, "
       "for each run whose architecture states its overhead (drr: against the plain PreNorm, GPT-2 style, stack of "
       "the same shape). Reads run_ids.",
       1, drr_overhead},
  };
}

}  // namespace routelab::figure_detail
