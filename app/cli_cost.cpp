// routelab-cli flops (the FLOPs model: ratio versus sequence length, DTRNet Figure 4, and a per-layer breakdown,
// from a stored run's measured routing or from fractions given by hand), bench forward (sparse execution speed),
// bench eviction (D-LLM's training attention, chunked vs materialised) and bench step (any config's training step
// and where its time goes).
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/cli_commands.h"
#include "app/cli_registration.h"
#include "core/analysis/run_analysis.h"
#include "core/bench/eviction_bench.h"
#include "core/bench/forward_bench.h"
#include "core/bench/step_bench.h"
#include "core/config/experiment_config.h"
#include "core/cost/flops_model.h"
#include "core/data/dataset.h"
#include "core/util/errors.h"
#include "core/util/paths.h"

namespace routelab::cli {
namespace {

struct FlopsArgs {
  std::int64_t run_id = 0, step = 0, batch = 1, at = 2048, vocab = 0, batches = 0;
  std::string db, preset, config, split = "val";
  std::vector<std::string> sets;
  std::vector<double> fractions;
  std::vector<std::int64_t> lengths{128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
  bool json = false, csv = false;
};

struct BenchForwardArgs {
  ForwardBenchOptions options;
  std::string precision = "fp32";
  bool json = false;
};

struct BenchStepArgs {
  StepBenchOptions options;
  std::string preset, config, device, precision, against;
  std::vector<std::string> sets, against_sets;
  int threads = -1;
  bool json = false;
};

/// One set of routed fractions to price (a curve).
struct FractionSet {
  std::string label;
  std::vector<double> fractions;  ///< empty: the architecture's defaults
};

std::string join(const std::vector<double>& v, int precision) {
  std::string out;
  for (const double x : v) {
    if (!out.empty()) out += ',';
    out += fixed(x, precision);
  }
  return out;
}

int run_flops(const FlopsArgs& a) {
  const int sources = (a.run_id > 0) + !a.preset.empty() + !a.config.empty();
  if (sources != 1) throw ConfigError("flops: give exactly one of RUN, --preset P or --config FILE");
  if (a.lengths.empty()) throw ConfigError("flops --lengths: no length given");

  nlohmann::json model;
  std::int64_t vocab = a.vocab;
  std::string origin;
  std::vector<FractionSet> sets;
  if (a.run_id > 0) {
    auto run = load_run(a.db, a.run_id, a.sets, a.step);
    model = run.config.model();
    if (vocab <= 0) vocab = run.model->vocab_size();
    origin = "run " + std::to_string(run.run_id) + " " + run.name + ", checkpoint step " + std::to_string(run.step);
    if (a.fractions.empty()) {
      RunEvalOptions options;
      options.split = parse_split(a.split, "--split");
      options.batches = a.batches;
      const auto report = evaluate_run(run, options);
      origin += ", fractions measured on " + report.split + " (" + std::to_string(report.batches) + " batches of " +
                std::to_string(report.batch_size) + ")";
      sets.push_back({"measured", fractions_from_trace(report.arch, report.layers)});
    }
  } else {
    const auto config = a.preset.empty() ? resolve_config(load_json_file(a.config), a.sets, a.config)
                                         : preset_config(a.preset, a.sets);
    model = config.model();
    origin = a.preset.empty() ? "config " + a.config : "preset " + a.preset;
    if (vocab <= 0) vocab = make_dataset(config.data())->tokenizer().vocab_size();
  }
  const auto arch = model.at("arch").get<std::string>();
  routed_fraction_meaning(arch);  // an architecture without a FLOPs model fails here, before any pricing
  if (!a.fractions.empty()) sets.push_back({"f=" + join(a.fractions, 2), a.fractions});
  const auto price = [&](const FractionSet& set, std::int64_t T) {
    FlopsQuery q;
    q.seq = T;
    q.batch = a.batch;
    q.fractions = set.fractions;
    return estimate_flops(model, vocab, q);
  };
  if (sets.empty()) {
    // What-if curves, one per fraction; where the executed FLOPs ignore the fractions (dense, DRR, soft TSA, ...),
    // as priced at the longest length, one curve.
    for (const double f : {0.1, 0.3, 0.7}) sets.push_back({"f=" + fixed(f, 2), {f}});
    const auto longest = *std::max_element(a.lengths.begin(), a.lengths.end());
    if (price(sets.front(), longest).layer_flops() == price(sets.back(), longest).layer_flops())
      sets = {{"default", {}}};
  }
  const auto breakdown = price(sets.front(), a.at);

  if (a.json) {
    nlohmann::json curves = nlohmann::json::array();
    for (const auto& set : sets) {
      nlohmann::json points = nlohmann::json::array();
      for (const auto T : a.lengths) {
        const auto e = price(set, T);
        points.push_back({{"seq", T}, {"layer_ratio", e.layer_ratio()}, {"total_ratio", e.total_ratio()},
                          {"flops", e.total_flops()}, {"dense_flops", e.dense_total_flops()}});
      }
      curves.push_back({{"label", set.label}, {"fractions", set.fractions}, {"curve", points}});
    }
    std::cout << nlohmann::json{{"arch", arch}, {"origin", origin}, {"vocab", vocab}, {"batch", a.batch},
                                {"convention", flops_convention()}, {"curves", curves},
                                {"breakdown", breakdown.to_json()}}
                     .dump(2)
              << "\n";
    return 0;
  }
  if (a.csv) {
    std::cout << "arch,set,seq,layer_ratio,total_ratio,flops,dense_flops\n";
    for (const auto& set : sets)
      for (const auto T : a.lengths) {
        const auto e = price(set, T);
        std::cout << arch << ",\"" << set.label << "\"," << T << "," << e.layer_ratio() << "," << e.total_ratio() << ","
                  << e.total_flops() << "," << e.dense_total_flops() << "\n";
      }
    return 0;
  }

  std::cout << "FLOPs model: " << arch << " (" << origin << "), batch " << a.batch << ", vocabulary " << vocab << "\n"
            << "convention: " << flops_convention() << "\n";
  for (const auto& note : breakdown.notes) std::cout << "note: " << note << "\n";
  for (const auto& set : sets)
    if (!set.fractions.empty() && set.fractions.size() > 1)
      std::cout << "fractions per layer (" << set.label << "): " << join(set.fractions, 3) << "\n";
  std::cout << "\nFLOPs ratio versus a dense model of the same shape: layers only | whole forward (with the LM head)\n";
  std::cout << std::setw(7) << "T";
  for (const auto& set : sets) std::cout << "  " << std::setw(17) << (set.label.size() > 17 ? set.label.substr(0, 17) : set.label);
  std::cout << "\n";
  for (const auto T : a.lengths) {
    std::cout << std::setw(7) << T;
    for (const auto& set : sets) {
      const auto e = price(set, T);
      std::cout << "  " << std::setw(7) << fixed(e.layer_ratio(), 4) << " | " << std::setw(7) << fixed(e.total_ratio(), 4);
    }
    std::cout << "\n";
  }

  // Per-layer breakdown at one length, in GFLOPs.
  std::vector<std::string> parts;
  for (const auto& l : breakdown.layers)
    for (const auto& [name, f] : l.parts)
      if (std::find(parts.begin(), parts.end(), name) == parts.end()) parts.push_back(name);
  std::cout << "\nper-layer breakdown at T " << a.at << " (" << sets.front().label << "), GFLOPs\n";
  std::cout << std::setw(5) << "layer" << std::setw(12) << "kind" << std::setw(9) << "fraction";
  for (const auto& p : parts) std::cout << std::setw(12) << p;
  std::cout << std::setw(12) << "total" << std::setw(12) << "dense" << std::setw(8) << "ratio" << "\n";
  const auto g = [](double f) { return fixed(f / 1e9, 4); };
  for (const auto& l : breakdown.layers) {
    std::cout << std::setw(5) << l.layer << std::setw(12) << l.kind << std::setw(9) << fixed(l.fraction, 3);
    for (const auto& p : parts) {
      double v = 0;
      for (const auto& [name, f] : l.parts)
        if (name == p) v = f;
      std::cout << std::setw(12) << (v == 0 ? std::string("-") : g(v));
    }
    std::cout << std::setw(12) << g(l.flops) << std::setw(12) << g(l.dense_flops) << std::setw(8)
              << fixed(l.dense_flops > 0 ? l.flops / l.dense_flops : 1.0, 3) << "\n";
  }
  std::cout << "layers " << g(breakdown.layer_flops()) << " of dense " << g(breakdown.dense_layer_flops())
            << " GFLOPs; LM head " << g(breakdown.head_flops) << "; embeddings " << g(breakdown.embedding_flops)
            << " (lookups); total " << g(breakdown.total_flops()) << " of " << g(breakdown.dense_total_flops())
            << " (ratio " << fixed(breakdown.total_ratio(), 4) << ")\n";
  return 0;
}

int run_bench_forward(const BenchForwardArgs& a) {
  auto options = a.options;
  options.bf16 = a.precision == "bf16";
  const auto result = bench_forward(options);
  if (a.json)
    std::cout << result.to_json().dump(2) << "\n";
  else
    std::cout << result.to_table();
  return 0;
}

int run_bench_eviction(const EvictionBenchOptions& o) {
  const auto rows = bench_eviction(o);
  std::cout << "D-LLM training attention (multiplicative eviction), forward + backward on " << o.device << ": batch "
            << o.batch << ", " << o.heads << " heads of " << o.head_dim
            << (o.kv_heads > 0 && o.kv_heads != o.heads ? " (" + std::to_string(o.kv_heads) + " key/value heads)" : "")
            << ", " << 100.0 * o.executed << "% of keys executed, median of " << o.reps << " after " << o.warmup
            << " warm-up\n"
            << "(forms: chunked, its query chunks of the rows shown; flash, cudnn and efficient, the flash form on "
               "flash attention, cuDNN's and memory-efficient attention; cpu, RouteLab's CPU kernel; materialised, "
               "every (B, H, T, T) kept. Peak: the most held above the inputs; saved: held after the forward, until "
               "the backward; differences from the materialised form, gradients of q, k, v and the flags)\n"
            << "| precision | T | form | ms | chunked / form | peak / saved MB | max |out diff| / |grad diff| | "
               "max |grad| |\n"
               "|---|---|---|---|---|---|---|---|\n";
  const auto num = [](double v, int precision) { return v < 0 ? std::string("-") : fixed(v, precision); };
  const auto ratio = [](double a, double b) { return a < 0 || b <= 0 ? std::string("-") : fixed(a / b, 2) + "x"; };
  const auto sci = [](double v) {
    if (v < 0) return std::string("-");
    std::ostringstream s;
    s << std::scientific << std::setprecision(2) << v;
    return s.str();
  };
  for (const auto& r : rows) {
    const double chunked = r.forms.front().ms;
    for (const auto& f : r.forms)
      std::cout << "| " << r.precision << " | " << r.context << " | " << f.form
                << (f.form == "chunked" ? " (" + std::to_string(r.chunk_rows) + " rows)" : std::string()) << " | "
                << num(f.ms, 1) << " | " << ratio(chunked, f.ms) << " | " << num(f.peak_mb, 0) << " / "
                << num(f.saved_mb, 0) << " | " << sci(f.output_diff) << " / " << sci(f.grad_diff) << " | "
                << (f.output_diff < 0 ? std::string("-") : sci(r.grad_max)) << " |\n";
  }
  for (const auto& r : rows)
    for (const auto& f : r.forms)
      if (!f.error.empty())
        std::cout << r.precision << ", T " << r.context << ": the " << f.form << " form failed: " << f.error << "\n";
  return 0;
}

int run_bench_step(const BenchStepArgs& a) {
  if (a.preset.empty() == a.config.empty())
    throw ConfigError("bench step: give exactly one of --preset P or --config FILE");
  std::vector<std::string> common;  // the options train takes, as train turns them into settings: both configs'
  if (a.threads >= 0) common.push_back("run.threads=" + std::to_string(a.threads));
  if (!a.device.empty()) common.push_back("run.device=" + a.device);
  if (!a.precision.empty()) common.push_back("train.precision=" + a.precision);
  auto sets = a.sets;
  sets.insert(sets.end(), common.begin(), common.end());
  const auto config = a.preset.empty() ? resolve_config(load_json_file(a.config), sets, a.config)
                                       : preset_config(a.preset, sets);
  const auto origin = a.preset.empty() ? "config " + a.config : "preset " + a.preset;
  std::optional<ExperimentConfig> against;
  std::string against_origin;
  if (!a.against_sets.empty() && a.against.empty())
    throw ConfigError("bench step --against-set: give the baseline with --against P");
  if (!a.against.empty()) {  // a config file where one exists by that name, else a preset
    const bool file = std::filesystem::is_regular_file(a.against);
    auto against_sets = a.against_sets;
    against_sets.insert(against_sets.end(), common.begin(), common.end());
    against = file ? resolve_config(load_json_file(a.against), against_sets, a.against)
                   : preset_config(a.against, against_sets);
    against_origin = (file ? "config " : "preset ") + a.against;
  }
  auto options = a.options;
  if (options.db.empty()) options.db = default_db_path();
  const auto result = run_step_bench(config, origin, options, against ? &*against : nullptr, against_origin);
  if (a.json)
    std::cout << result.to_json().dump(2) << "\n";
  else
    std::cout << result.to_table();
  return 0;
}

}  // namespace

void add_cost_commands(CLI::App& app, CLI::App& bench, CommandAction& action) {
  auto f = std::make_shared<FlopsArgs>();
  auto* flops_cmd = app.add_subcommand(
      "flops", "FLOPs model: ratio versus a dense model of the same shape for T from 128 to 32K, and a per-layer "
               "breakdown, from a run's measured routing or from fractions given by hand");
  flops_cmd->add_option("RUN", f->run_id, "run id (routed fractions measured on its evaluation data)");
  flops_cmd->add_option("--db", f->db, "run store");
  flops_cmd->add_option("--preset", f->preset, "a preset's model (fractions by hand)");
  flops_cmd->add_option("--config", f->config, "a config file's model (fractions by hand)");
  flops_cmd->add_option("--set", f->sets, "override, e.g. --set model.n_layer=12 (repeatable)");
  flops_cmd->add_option("--fractions", f->fractions, "routed fractions: one for every routed layer or one per layer")
      ->delimiter(',');
  flops_cmd->add_option("--lengths", f->lengths, "sequence lengths of the curve")->delimiter(',');
  flops_cmd->add_option("--batch", f->batch, "sequences per forward")->check(CLI::Range(1, 1000000000));
  flops_cmd->add_option("--at", f->at, "sequence length of the per-layer breakdown");
  flops_cmd->add_option("--vocab", f->vocab, "vocabulary size for the LM head (default: the data's tokenizer)");
  flops_cmd->add_option("--split", f->split, "RUN: split the fractions are measured on")
      ->check(CLI::IsMember({"val", "test", "train"}));
  flops_cmd->add_option("--batches", f->batches, "RUN: evaluation batches (default: the run's train.eval_batches)")->check(CLI::Range(1, 1000000000));
  flops_cmd->add_option("--step", f->step, "RUN: checkpoint step (default: the latest)");
  flops_cmd->add_flag("--json", f->json, "machine-readable output");
  flops_cmd->add_flag("--csv", f->csv, "the curves as CSV");
  flops_cmd->callback([&action, f] { action = [f] { return run_flops(*f); }; });

  auto b = std::make_shared<BenchForwardArgs>();
  auto& o = b->options;
  auto* fwd = bench.add_subcommand(
      "forward", "eval-mode forward (--train: training-step) time of dense vs DTRNet, MoD, D-LLM and TSA (sparse) "
                 "with routers forced to routed fractions: time ratio next to FLOPs ratio, and where they part, "
                 "which op class costs what");
  fwd->add_option("--lengths", o.lengths, "sequence lengths (default 512,1024,2048,4096,8192)")->delimiter(',');
  fwd->add_option("--fractions", o.fractions, "routed fractions to force (default 0.1,0.3,0.7)")->delimiter(',');
  fwd->add_option("--archs", o.archs, "routed architectures (default: every one whose routers can be forced)")->delimiter(',');
  fwd->add_option("--batch", o.batch, "sequences per forward")->check(CLI::Range(1, 1000000000));
  fwd->add_option("--embd", o.n_embd, "model width");
  fwd->add_option("--layers", o.n_layer, "layers");
  fwd->add_option("--heads", o.n_head, "attention heads");
  fwd->add_option("--kv-heads", o.n_kv_head, "key/value heads (0: all)");
  fwd->add_option("--reps", o.reps, "timed forwards per model (median)")->check(CLI::Range(1, 1000000000));
  fwd->add_option("--warmup", o.warmup, "untimed forwards per model")->check(CLI::Range(0, 1000000000));
  fwd->add_option("--threads", o.threads, "threads (0: all cores)")->check(CLI::Range(0, 1024));
  fwd->add_option("--device", o.device, "cpu, cuda or cuda:N");
  fwd->add_option("--precision", b->precision, "fp32, or bf16 autocast on every model")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  fwd->add_option("--tf32", o.tf32, "CUDA: fp32 matmuls on TF32 tensor cores, as train.tf32 (default true)");
  fwd->add_option("--calibration-passes", o.calibration_passes, "router bias calibration passes per fraction");
  fwd->add_option("--breakdown-above", o.breakdown_threshold, "print a breakdown where time/FLOPs ratio exceeds this");
  fwd->add_option("--breakdown-from", o.breakdown_min_seq, "breakdowns at sequence lengths from this one (default 2048)")
      ->check(CLI::Range(0, 1000000000));
  fwd->add_option("--kernels", o.kernels,
                  "breakdowns: also the N longest kernels of each model and of dense (GPU), or the N top-level ops "
                  "each model dispatches most beyond dense (host)")
      ->check(CLI::Range(0, 1000));
  fwd->add_flag("--train", o.train,
                "time training steps (training-mode forward, loss, backward, clipping, AdamW at learning rate 0) "
                "instead of eval-mode forwards");
  fwd->add_flag("--cuda-graph", o.cuda_graph,
                "on a GPU: capture the forwards (with --train: the steps, as train.cuda_graph) of dense and of the "
                "architectures whose forwards (steps) have fixed shapes as CUDA graphs and time their replays; the "
                "others run eager");
  fwd->add_flag("--quick", o.quick, "smoke test: T 128 and 256, d 128, 4 layers, 1 rep");
  fwd->add_flag("--json", b->json, "machine-readable output");
  fwd->callback([&action, b] { action = [b] { return run_bench_forward(*b); }; });

  auto e = std::make_shared<EvictionBenchOptions>();
  auto* eviction = bench.add_subcommand(
      "eviction", "D-LLM's training attention (skipped tokens evicted as keys): the chunked kernel, the flash "
                  "form (on a GPU on flash, cuDNN's and memory-efficient attention) and the CPU kernel vs the "
                  "materialised (B, H, T, T) form, forward + backward: time, peak memory, differences");
  eviction->add_option("--batch", e->batch, "sequences")->check(CLI::Range(1, 1000000000));
  eviction->add_option("--heads", e->heads, "attention heads")->check(CLI::Range(1, 1000000));
  eviction->add_option("--kv-heads", e->kv_heads, "key/value heads, dividing --heads (0: all)")
      ->check(CLI::Range(0, 1000000));
  eviction->add_option("--head-dim", e->head_dim, "head width")->check(CLI::Range(1, 1000000));
  eviction->add_option("--lengths", e->contexts, "sequence lengths (default 1024,2048)")->delimiter(',')
      ->check(CLI::Range(1, 1000000000));
  eviction->add_option("--executed", e->executed, "share of keys that execute")->check(CLI::Range(0.0, 1.0));
  eviction->add_option("--device", e->device, "cpu, cuda or cuda:N");
  eviction->add_option("--precision", e->precision, "fp32, bf16 or both")
      ->check(CLI::IsMember({"fp32", "bf16", "both"}));
  eviction->add_option("--reps", e->reps, "timed repetitions (median)")->check(CLI::Range(1, 1000000));
  eviction->add_option("--warmup", e->warmup, "untimed repetitions first")->check(CLI::Range(0, 1000000));
  eviction->add_option("--threads", e->threads, "threads (0: all cores)")->check(CLI::Range(0, 1024));
  eviction->add_option("--chunk", e->query_chunk, "query rows per chunk of the chunked kernel (0: automatic)")
      ->check(CLI::Range(0, 1000000000));
  eviction->add_flag("--chunked-only", [e](std::int64_t n) { e->materialised = n == 0; },
                     "leave out the materialised form (it needs O(B H T^2) memory; nothing is compared then)");
  eviction->callback([&action, e] { action = [e] { return run_bench_eviction(*e); }; });

  auto st = std::make_shared<BenchStepArgs>();
  auto* step = bench.add_subcommand(
      "step", "a preset's or config's training step as train runs it (model, data, batch, accumulation, precision, "
              "device): ms/step, tokens/s, and where the step's time goes by part of the model and by op (a GPU: by "
              "kernel); for every architecture, those no benchmark can force included");
  auto* config = step->add_option("--config", st->config, "JSON config file");
  step->add_option("--preset", st->preset, "preset name (see `presets`)")->excludes(config);
  step->add_option("--set", st->sets, "override, e.g. --set model.n_layer=4 (repeatable)");
  step->add_option("--device", st->device, "cpu, cuda or cuda:N");
  step->add_option("--threads", st->threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 1024));
  step->add_option("--precision", st->precision, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  step->add_option("--steps", st->options.steps, "timed steps (median)")->check(CLI::Range(1, 1000000));
  step->add_option("--warmup", st->options.warmup, "untimed steps first")->check(CLI::Range(0, 1000000));
  step->add_option("--profile-steps", st->options.profiled, "profiled steps after the timed ones (0: no breakdown)")
      ->check(CLI::Range(0, 1000));
  step->add_option("--top", st->options.top, "top-level ops (kernels) listed per part")->check(CLI::Range(0, 1000));
  step->add_option("--against", st->against,
                   "another preset or config file (e.g. the dense baseline) whose steps are timed interleaved with "
                   "these: the time ratio, and its parts beside these (--device, --threads, --precision apply to "
                   "both, --set to the first only)");
  step->add_option("--against-set", st->against_sets,
                   "override for the --against config only, e.g. --against-set data.tokenizer=byte (repeatable)");
  step->add_option("--progress", st->options.progress,
                   "the point of the run the model is told it is at, 0 to 1 (schedules such as Radial's depth "
                   "penalty warm-up)")
      ->check(CLI::Range(0.0, 1.0));
  step->add_option("--db", st->options.db,
                   "run store holding a distilled config's teacher (train.distill_from; default: the user data dir)");
  step->add_flag("--json", st->json, "machine-readable output");
  step->callback([&action, st] { action = [st] { return run_bench_step(*st); }; });
}

}  // namespace routelab::cli
