// routelab-cli generate, score, kv and bench decode: the KV-cache generation engine from the command line.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "app/cli_registration.h"
#include "core/analysis/run_analysis.h"
#include "core/bench/decode_bench.h"
#include "core/config/experiment_config.h"
#include "core/data/dataset.h"
#include "core/inference/generator.h"
#include "core/inference/kv_cache.h"
#include "core/models/registry.h"
#include "core/util/errors.h"

namespace routelab::cli {
namespace {

struct GenerateArgs {
  std::int64_t run_id = 0, step = 0;
  std::string db, prompt;
  std::vector<std::string> sets;
  GenerateOptions options;
  std::vector<std::string> stops;
  bool json = false;
};

struct ScoreArgs {
  std::int64_t run_id = 0, step = 0, top = 5;
  std::string db, text;
  std::vector<std::string> sets;
  bool json = false;
};

struct KvArgs {
  std::int64_t run_id = 0, step = 0;
  std::string db, preset;
  std::vector<std::string> sets;
  std::vector<std::int64_t> lengths;
  std::uint64_t seed = 1;
  bool json = false;
};

struct DecodeBenchArgs {
  DecodeBenchOptions options;
  bool json = false;
};

int run_generate(const GenerateArgs& args) {
  auto run = load_run(args.db, args.run_id, args.sets, args.step, RunData::Tokenizer);
  auto options = args.options;
  options.stop_strings = args.stops;
  const auto result = generate_text(*run.model, run.tokenizer(), args.prompt, options);
  if (args.json) {
    auto doc = result.to_json();
    doc["run"] = run.run_id;
    doc["checkpoint_step"] = run.step;
    std::cout << doc.dump(2) << "\n";
    return 0;
  }
  std::cout << args.prompt << result.text[0] << "\n";
  const double tokens = static_cast<double>(result.new_ids[0].size());
  std::cerr << "[run " << run.run_id << " (" << result.arch << ", step " << run.step << "): " << result.new_ids[0].size()
            << " new tokens, stop: " << result.stop_reason[0] << ", prefill " << std::fixed << std::setprecision(1)
            << 1000.0 * result.prefill_seconds << " ms, " << (result.decode_seconds > 0 ? tokens / result.decode_seconds : 0.0)
            << " tokens/s, KV " << result.cache_live_bytes << " bytes held (" << result.cache_allocated_bytes
            << " allocated)]\n";
  return 0;
}

int run_score(const ScoreArgs& args) {
  auto run = load_run(args.db, args.run_id, args.sets, args.step, RunData::Tokenizer);
  const auto& tokenizer = run.tokenizer();
  const auto result = score(*run.model, tokenizer.encode(args.text), args.top, &tokenizer);
  if (args.json) {
    auto doc = result.to_json(&tokenizer);
    doc["run"] = run.run_id;
    doc["checkpoint_step"] = run.step;
    std::cout << doc.dump(2) << "\n";
    return 0;
  }
  std::cout << "run " << run.run_id << " (" << result.arch << ", step " << run.step << "), mean log p "
            << std::fixed << std::setprecision(4) << result.mean_logprob
            << "; layers: D = routed path taken, - = skipped/bypassed, T = dense layer\n";
  std::cout << "| pos | token | log p | top next | layers |\n|---|---|---|---|---|\n";
  for (const auto& t : result.tokens) {
    std::string layers;
    for (const auto& l : t.layers) layers += !l.routed ? 'T' : (l.decision ? 'D' : '-');
    std::cout << "| " << t.position << " | " << t.text << " | "
              << (std::isnan(t.logprob) ? std::string("") : std::to_string(t.logprob)) << " | "
              << (t.top.empty() ? std::string("") : tokenizer.token_text(t.top.front().first)) << " | " << layers << " |\n";
  }
  return 0;
}

/// Token ids for the kv measurement: validation text of the run's dataset, repeated samples up to `length`.
torch::Tensor measurement_tokens(const LmDataset& data, std::int64_t length, std::uint64_t seed) {
  std::vector<torch::Tensor> parts;
  std::int64_t have = 0;
  for (std::uint64_t i = 0; have < length; ++i) {
    parts.push_back(data.sample(Split::Val, 1, seed + i).input);  // (1, context)
    have += parts.back().size(1);
  }
  return torch::cat(parts, 1).narrow(1, 0, length);
}

int run_kv(const KvArgs& args) {
  std::shared_ptr<LanguageModel> model;
  std::unique_ptr<LmDataset> owned;
  const LmDataset* data = nullptr;
  std::string label;
  LoadedRun run;
  if (!args.preset.empty()) {
    if (args.run_id != 0) throw ConfigError("kv: give a RUN or --preset, not both");
    const auto config = preset_config(args.preset, args.sets);
    owned = make_dataset(config.data());
    data = owned.get();
    torch::manual_seed(static_cast<std::int64_t>(args.seed));
    model = create_model(config.model(), {data->tokenizer().vocab_size(), data->context()});
    model->eval();
    label = "preset " + args.preset + " (random weights)";
  } else {
    if (args.run_id == 0) throw ConfigError("kv: give a RUN id or --preset NAME");
    run = load_run(args.db, args.run_id, args.sets, args.step);
    model = run.model;
    data = run.dataset.get();
    label = "run " + std::to_string(run.run_id) + " step " + std::to_string(run.step);
  }
  torch::NoGradGuard no_grad;
  auto state = model->begin_decode(1);
  const auto limit = state->context_limit();
  auto lengths = args.lengths;
  if (lengths.empty()) {  // 64, 128, ... and the context itself
    for (std::int64_t l = 64; l <= limit; l *= 2) lengths.push_back(l);
    if (lengths.empty() || lengths.back() != limit) lengths.push_back(limit);
  }
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  if (lengths.front() < 1 || lengths.back() > limit)
    throw ConfigError("kv --lengths: each length must be in [1, " + std::to_string(limit) + "] (the model's context)");
  const auto device = model->parameters().front().device();
  const auto tokens = measurement_tokens(*data, lengths.back(), args.seed).to(device);  // (1, T)
  // Token by token, as generation builds the cache; measured after each length is reached.
  const auto entry = state->caches().front().entry_bytes();
  const auto dense_entry = [&] {  // a dense layer of this shape: every token, every layer
    return entry * static_cast<std::int64_t>(model->num_layers());
  }();
  nlohmann::json rows = nlohmann::json::array();
  std::int64_t fed = 0;
  for (const auto length : lengths) {
    while (fed < length) model->decode(*state, tokens.narrow(1, fed++, 1));
    std::map<int, std::int64_t> per_layer;
    for (const auto& c : state->caches()) per_layer[c.layer()] += c.live_bytes();
    const auto full = model->forward(tokens.narrow(1, 0, length), /*trace=*/true);
    const auto analytic = analytic_kv_entries(full.trace, 1, length);
    std::int64_t analytic_total = 0;
    nlohmann::json layers = nlohmann::json::array();
    for (std::size_t i = 0; i < analytic.size(); ++i) {
      analytic_total += analytic[i] * entry;
      nlohmann::json l = {{"layer", i}, {"analytic_bytes", analytic[i] * entry}, {"dense_bytes", length * entry}};
      if (per_layer.count(static_cast<int>(i))) l["measured_bytes"] = per_layer[static_cast<int>(i)];
      layers.push_back(std::move(l));
    }
    nlohmann::json row = {{"length", length},
                          {"measured_bytes", state->live_bytes()},
                          {"allocated_bytes", state->allocated_bytes()},
                          {"analytic_bytes", analytic_total},
                          {"dense_bytes", length * dense_entry},
                          {"ratio_vs_dense", static_cast<double>(state->live_bytes()) / static_cast<double>(length * dense_entry)},
                          {"layers", layers}};
    if (per_layer.count(-1)) row["unified_bytes"] = per_layer[-1];
    rows.push_back(std::move(row));
  }
  if (args.json) {
    std::cout << nlohmann::json({{"source", label}, {"arch", model->arch_id()}, {"entry_bytes", entry}, {"rows", rows}}).dump(2)
              << "\n";
    return 0;
  }
  std::cout << "KV cache of " << model->arch_id() << ", " << label << ": bytes held by the cache tensors (token-by-token "
            << "decoding of validation text) vs the analytic count from the full forward's routing vs a dense model "
            << "(every token, every layer; " << entry << " bytes per entry)\n";
  std::cout << "| length | measured | analytic | dense | measured / dense | allocated |\n|---|---|---|---|---|---|\n";
  for (const auto& r : rows)
    std::cout << "| " << r["length"] << " | " << r["measured_bytes"] << " | " << r["analytic_bytes"] << " | "
              << r["dense_bytes"] << " | " << std::fixed << std::setprecision(3) << r["ratio_vs_dense"].get<double>()
              << " | " << r["allocated_bytes"] << " |\n";
  const auto& last = rows.back();
  std::cout << "\nper layer at length " << last["length"] << ":\n| layer | measured | analytic | dense |\n|---|---|---|---|\n";
  for (const auto& l : last["layers"])
    std::cout << "| " << l["layer"] << " | " << (l.contains("measured_bytes") ? l["measured_bytes"].dump() : std::string("(unified)"))
              << " | " << l["analytic_bytes"] << " | " << l["dense_bytes"] << " |\n";
  if (last.contains("unified_bytes")) std::cout << "unified store: " << last["unified_bytes"] << " bytes\n";
  return 0;
}

}  // namespace

void add_generate_commands(CLI::App& app, CLI::App& bench, CommandAction& action) {
  auto gen = std::make_shared<GenerateArgs>();
  auto* gen_cmd = app.add_subcommand("generate", "generate text from a stored run with its KV-cache decode path");
  gen_cmd->add_option("RUN", gen->run_id, "run id")->required();
  gen_cmd->add_option("--prompt", gen->prompt, "prompt text (encoded with the run's tokenizer)")->required();
  gen_cmd->add_option("--max-new", gen->options.max_new_tokens, "new tokens at most")->check(CLI::Range(1, 1000000000));
  gen_cmd->add_option("--temperature", gen->options.sampling.temperature, "sampling temperature (> 0)");
  gen_cmd->add_option("--top-k", gen->options.sampling.top_k, "keep the k most likely tokens (0: off)");
  gen_cmd->add_option("--top-p", gen->options.sampling.top_p, "nucleus sampling mass in (0, 1]");
  gen_cmd->add_option("--seed", gen->options.sampling.seed, "sampling seed (same seed, same text)");
  gen_cmd->add_flag("--greedy", gen->options.sampling.greedy, "argmax decoding");
  gen_cmd->add_option("--stop", gen->stops, "stop string (repeatable); the text is cut before it");
  gen_cmd->add_option("--stop-id", gen->options.stop_ids, "stop token id (repeatable)");
  gen_cmd->add_option("--max-cache-bytes", gen->options.max_cache_bytes, "KV cache budget in bytes (0: none)");
  gen_cmd->add_option("--set", gen->sets, "eval-only override, e.g. --set model.exit_threshold=0.9 (repeatable)");
  gen_cmd->add_option("--db", gen->db, "run store");
  gen_cmd->add_option("--step", gen->step, "checkpoint step (default: the latest)");
  gen_cmd->add_flag("--json", gen->json, "machine-readable output");
  gen_cmd->callback([&action, gen] { action = [gen] { return run_generate(*gen); }; });

  auto sc = std::make_shared<ScoreArgs>();
  auto* score_cmd = app.add_subcommand(
      "score", "per position: token, log-probability, top next-token predictions, each layer's routing and gate");
  score_cmd->add_option("RUN", sc->run_id, "run id")->required();
  score_cmd->add_option("--text", sc->text, "text to score")->required();
  score_cmd->add_option("--top", sc->top, "next-token predictions per position");
  score_cmd->add_option("--set", sc->sets, "eval-only override (repeatable)");
  score_cmd->add_option("--db", sc->db, "run store");
  score_cmd->add_option("--step", sc->step, "checkpoint step (default: the latest)");
  score_cmd->add_flag("--json", sc->json, "machine-readable output");
  score_cmd->callback([&action, sc] { action = [sc] { return run_score(*sc); }; });

  auto kv = std::make_shared<KvArgs>();
  auto* kv_cmd = app.add_subcommand(
      "kv", "KV-cache bytes vs sequence length, per layer and total: measured, analytic and dense (DTRNet Fig. 6)");
  kv_cmd->add_option("RUN", kv->run_id, "run id");
  kv_cmd->add_option("--preset", kv->preset, "a preset's model with random weights instead of a run");
  kv_cmd->add_option("--lengths", kv->lengths, "lengths (default: 64, 128, ... up to the context)")->delimiter(',');
  kv_cmd->add_option("--set", kv->sets, "override (repeatable)");
  kv_cmd->add_option("--seed", kv->seed, "seed of the validation samples (and of a preset's weights)");
  kv_cmd->add_option("--db", kv->db, "run store");
  kv_cmd->add_option("--step", kv->step, "checkpoint step (default: the latest)");
  kv_cmd->add_flag("--json", kv->json, "machine-readable output");
  kv_cmd->callback([&action, kv] { action = [kv] { return run_kv(*kv); }; });

  auto db = std::make_shared<DecodeBenchArgs>();
  auto* decode_cmd = bench.add_subcommand(
      "decode", "tokens/s of KV-cache decoding per architecture at equal shape after a 1K/4K/8K prefill, with KV bytes");
  decode_cmd->add_option("--archs", db->options.archs, "architectures (default: every language model)")->delimiter(',');
  decode_cmd->add_option("--contexts", db->options.contexts, "prefilled context lengths")->delimiter(',');
  decode_cmd->add_option("--steps", db->options.steps, "timed decode steps")->check(CLI::Range(1, 1000000000));
  decode_cmd->add_option("--batch", db->options.batch, "sequences decoded together")->check(CLI::Range(1, 1000000000));
  decode_cmd->add_option("--embd", db->options.n_embd, "model width");
  decode_cmd->add_option("--layers", db->options.n_layer, "layers");
  decode_cmd->add_option("--heads", db->options.n_head, "attention heads");
  decode_cmd->add_option("--kv-heads", db->options.n_kv_head, "key/value heads (0: all)");
  decode_cmd->add_option("--threads", db->options.threads, "threads (0: all cores)")->check(CLI::Range(0, 1024));
  decode_cmd->add_option("--device", db->options.device, "cpu, cuda or cuda:N");
  decode_cmd->add_flag("--quick", db->options.quick, "smoke test: contexts 64 and 128, 4 steps, a tiny shape");
  decode_cmd->add_flag("--json", db->json, "machine-readable output");
  decode_cmd->callback([&action, db] {
    action = [db] {
      const auto result = bench_decode(db->options);
      if (db->json)
        std::cout << result.to_json().dump(2) << "\n";
      else
        std::cout << result.to_table();
      return 0;
    };
  });
}

}  // namespace routelab::cli
