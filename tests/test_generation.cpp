// KV-cache generation engine: for every language-model architecture the logits of incremental decoding (a prefill,
// then token by token, batch 2 routing differently) equal an eval-mode full forward; the cache holds exactly the
// entries the inference rules imply; seeded sampling is reproducible, greedy decoding is the full forward's argmax;
// contexts and cache budgets beyond the limits are clear errors; score reports the full forward's routing.
#include <QtTest>

#include <cmath>

#include <torch/torch.h>

#include "core/config/options.h"
#include "core/inference/generator.h"
#include "core/inference/kv_cache.h"
#include "core/models/early_exit.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/models/tsa.h"
#include "core/store/run_store.h"
#include "core/train/evaluation.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_generation {

using namespace routelab;

namespace {

constexpr std::int64_t kVocab = 37, kContext = 64, kBatch = 2, kSeq = 40, kPrefill = 16;

/// A tiny model of `arch` from its registry defaults plus `sets` ({key: value}).
std::shared_ptr<LanguageModel> tiny(const std::string& arch, const nlohmann::json& sets = nlohmann::json::object()) {
  auto m = schema_defaults(architecture(arch).options);
  m["n_layer"] = 4;
  m["n_embd"] = 32;
  m["n_head"] = 4;
  m["max_seq_len"] = kContext;
  for (const auto& [key, value] : sets.items()) m[key] = value;
  architecture(arch).check(m, "model");
  m["arch"] = arch;
  auto model = create_model(m, {kVocab, kContext});
  // Routers of order one (so decisions differ between tokens and sequences) and sharp attention (so a wrong cache
  // entry, position or mask would show in the logits). Norms keep their ones.
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    const auto& name = item.key();
    auto& p = item.value();
    if (name.find("norm") != std::string::npos) continue;
    const bool router = name.find("router") != std::string::npos || name.find("predictor") != std::string::npos;
    if (router) {
      if (p.dim() >= 2)
        p.normal_(0.0, 0.5);
      else
        p.zero_();
    } else if (name.find("qkv.weight") != std::string::npos || name.find("mem_attn") != std::string::npos) {
      p.normal_(0.0, 0.3);
    }
  }
  model->eval();
  return model;
}

/// Early exit: a threshold at the median confidence of the first exit head, so about half the tokens leave early.
void median_threshold(EarlyExitTransformer& model, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  model.train();  // training forwards return every exit head's logits (no dropout in these models)
  const auto first_exit = model.forward(tokens).exit_logits.front();
  model.eval();
  const auto confidence = torch::softmax(first_exit, -1).amax(-1).reshape({-1});
  // Midway between two neighbouring confidences, so float noise between the two execution forms cannot flip a token.
  const auto sorted = std::get<0>(confidence.sort());
  const auto mid = confidence.numel() / 2;
  model.set_exit_threshold(0.5 * (sorted[mid - 1].item<double>() + sorted[mid].item<double>()));
}

/// Whether some routed layer's decision differs between tokens (or, for Radial Networks, the depth does).
bool routing_varies(const ModelOutput& out) {
  for (const auto& t : out.trace) {
    if (!t.routed || !t.decision.defined()) continue;
    const auto share = t.decision.to(torch::kFloat).mean().item<double>();
    if (share > 0 && share < 1) return true;
  }
  const auto depth = out.token_data.find("depth");
  return depth != out.token_data.end() && depth->second.min().item<std::int64_t>() != depth->second.max().item<std::int64_t>();
}

/// Whether the two sequences of the batch route differently somewhere.
bool sequences_differ(const ModelOutput& out) {
  for (const auto& t : out.trace)
    if (t.routed && t.decision.defined() && !t.decision[0].equal(t.decision[1])) return true;
  return false;
}

void add_arch_rows() {
  QTest::addColumn<QString>("arch");
  QTest::addColumn<QString>("sets");
  QTest::newRow("dense") << "dense" << "{}";
  QTest::newRow("dense-gqa") << "dense" << R"({"n_kv_head": 2})";
  QTest::newRow("dense-gpt2") << "dense" << R"({"style": "gpt2"})";
  QTest::newRow("dtrnet") << "dtrnet" << R"({"routed_layers": "T-D-D-T"})";
  QTest::newRow("dtrnet-gqa") << "dtrnet" << R"({"routed_layers": "T-D-D-T", "n_kv_head": 2})";
  QTest::newRow("dtrnet-expert") << "dtrnet" << R"({"routed_layers": "T-D-D-T", "routing": "expert"})";
  QTest::newRow("dtrnet-masked-novo") << "dtrnet" << R"({"routed_layers": "T-D-D-T", "attention": "masked", "bypass": "none"})";
  QTest::newRow("mod") << "mod" << "{}";
  QTest::newRow("mod-reference") << "mod" << R"({"residual": "reference", "router_weight": "logit"})";
  QTest::newRow("dllm") << "dllm" << R"({"router_hidden": 16})";
  QTest::newRow("tsa-soft") << "tsa" << "{}";
  QTest::newRow("tsa-sparse") << "tsa" << R"({"inference": "sparse"})";
  QTest::newRow("early-exit") << "early-exit" << "{}";
  QTest::newRow("radial") << "radial" << "{}";
  QTest::newRow("radial-reuse") << "radial" << R"({"max_depth": 6, "n_kv_head": 2})";
  QTest::newRow("drr") << "drr" << R"({"block_size": 2, "short_window": 2, "summary_tokens": 4})";
}

std::shared_ptr<LanguageModel> model_for_row(const QString& arch, const QString& sets, const torch::Tensor& tokens) {
  auto model = tiny(arch.toStdString(), nlohmann::json::parse(sets.toStdString()));
  if (auto* ee = dynamic_cast<EarlyExitTransformer*>(model.get())) median_threshold(*ee, tokens);
  return model;
}

/// Entries per layer the cache must hold after a prefill of `prefill` tokens and single-token steps to `seq`.
std::vector<std::int64_t> expected_entries(const LanguageModel& model, const ModelOutput& full, std::int64_t prefill) {
  auto entries = analytic_kv_entries(full.trace, kBatch, kSeq);
  if (model.arch_id() == "dllm")  // official decode path: the prefill stores every slot (skipped ones masked)
    for (std::size_t i = 0; i < full.trace.size(); ++i)
      if (full.trace[i].routed)
        entries[i] = kBatch * prefill + full.trace[i].decision.narrow(1, prefill, kSeq - prefill).sum().item<std::int64_t>();
  return entries;
}

}  // namespace

class TestGeneration : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void init() { torch::manual_seed(11); }

  void promptCacheEqualsTheRegistryRule_data() { add_arch_rows(); }
  void promptCacheEqualsTheRegistryRule() {
    // After a prompt pass the cache holds what the architecture's registered KV rule (layer_kv_entries: the
    // cost-length figure, DTRNet Figure 6 and the Compare view price memory with it) computes from the stored
    // evaluation record of the same forward. D-LLM's prompt pass writes every slot, so its rule is dense's.
    QFETCH(QString, arch);
    QFETCH(QString, sets);
    const auto tokens = torch::randint(kVocab, {1, kSeq}, torch::TensorOptions().dtype(torch::kLong));
    auto model = model_for_row(arch, sets, tokens);
    torch::NoGradGuard no_grad;
    const auto full = model->forward(tokens, /*trace=*/true);
    InferenceRouting routing;
    routing.add(full.trace);
    const auto stored = read_evaluation({0, "val", 0, 0, 0, evaluation_extra_json(routing.record()).dump()});
    double priced = 0;
    for (const auto& layer : stored.layers) priced += layer_kv_entries(layer, double(kSeq));
    auto state = model->begin_decode(1);
    model->decode(*state, tokens);
    const auto held = static_cast<double>(state->entries());
    QVERIFY2(std::abs(held - priced) <= 1e-9 * priced,
             qPrintable(QString("%1: cache holds %2 entries, the rule prices %3").arg(arch).arg(held).arg(priced)));
    if (arch == "dllm") QCOMPARE(held, double(model->num_layers() * kSeq));
  }

  void incrementalEqualsFullForward_data() { add_arch_rows(); }
  void incrementalEqualsFullForward() {
    QFETCH(QString, arch);
    QFETCH(QString, sets);
    const auto tokens = torch::randint(kVocab, {kBatch, kSeq}, torch::TensorOptions().dtype(torch::kLong));
    auto model = model_for_row(arch, sets, tokens);
    torch::NoGradGuard no_grad;
    const auto full = model->forward(tokens, /*trace=*/true);
    if (arch != "dense") {
      QVERIFY2(routing_varies(full), "routing is trivial: the test would not exercise the routed cache");
      if (arch != "radial") QVERIFY2(sequences_differ(full), "both sequences route alike");
    }

    auto state = model->begin_decode(kBatch);
    std::vector<torch::Tensor> parts{model->decode(*state, tokens.narrow(1, 0, kPrefill))};
    for (std::int64_t t = kPrefill; t < kSeq; ++t) parts.push_back(model->decode(*state, tokens.narrow(1, t, 1)));
    const auto incremental = torch::cat(parts, 1);  // (B, T, V)
    QCOMPARE(state->length(), kSeq);
    const auto diff = (incremental - full.logits).abs().max().item<double>();
    QVERIFY2(diff < 1e-4, qPrintable(QString("max |incremental - full| = %1").arg(diff)));

    // KV bytes measured from the cache tensors equal the analytic count from the full forward's decisions.
    const auto expected = expected_entries(*model, full, kPrefill);
    std::int64_t expected_total = 0;
    for (const auto e : expected) expected_total += e;
    const auto& caches = state->caches();
    const auto entry = caches.front().entry_bytes();
    if (arch == "radial") {
      QCOMPARE(caches.size(), std::size_t{1});
    } else if (arch == "drr") {
      QCOMPARE(caches.size(), 3 * expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i)
        QCOMPARE(caches[3 * i].entries() + caches[3 * i + 1].entries() + caches[3 * i + 2].entries(), expected[i]);
    } else {
      QCOMPARE(caches.size(), expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i) QCOMPARE(caches[i].entries(), expected[i]);
    }
    QCOMPARE(state->live_bytes(), expected_total * entry);
    QVERIFY(state->allocated_bytes() >= state->live_bytes());
    QVERIFY(state->estimate_bytes(kSeq) >= state->live_bytes());
  }

  void prefillOnlyEqualsFullForward_data() { add_arch_rows(); }
  void prefillOnlyEqualsFullForward() {
    // One decode call over everything (the score path) and a one-token start then steps of three.
    QFETCH(QString, arch);
    QFETCH(QString, sets);
    const auto tokens = torch::randint(kVocab, {kBatch, kSeq}, torch::TensorOptions().dtype(torch::kLong));
    auto model = model_for_row(arch, sets, tokens);
    torch::NoGradGuard no_grad;
    const auto full = model->forward(tokens).logits;
    auto state = model->begin_decode(kBatch);
    QVERIFY((model->decode(*state, tokens) - full).abs().max().item<double>() < 1e-4);
    auto chunked = model->begin_decode(kBatch);
    std::vector<torch::Tensor> parts{model->decode(*chunked, tokens.narrow(1, 0, 1))};
    for (std::int64_t t = 1; t < kSeq; t += 3) parts.push_back(model->decode(*chunked, tokens.narrow(1, t, std::min<std::int64_t>(3, kSeq - t))));
    QVERIFY((torch::cat(parts, 1) - full).abs().max().item<double>() < 1e-4);
  }

  void greedyIsFullForwardArgmax_data() { add_arch_rows(); }
  void greedyIsFullForwardArgmax() {
    QFETCH(QString, arch);
    QFETCH(QString, sets);
    const auto prompt = torch::randint(kVocab, {1, 8}, torch::TensorOptions().dtype(torch::kLong));
    auto model = model_for_row(arch, sets, prompt.repeat({2, 3}));
    std::vector<std::int64_t> ids(prompt.data_ptr<std::int64_t>(), prompt.data_ptr<std::int64_t>() + 8);
    GenerateOptions options;
    options.sampling.greedy = true;
    options.max_new_tokens = 12;
    const auto result = generate(*model, {ids}, options);
    QCOMPARE(result.new_ids[0].size(), std::size_t{12});
    auto all = ids;
    all.insert(all.end(), result.new_ids[0].begin(), result.new_ids[0].end() - 1);
    torch::NoGradGuard no_grad;
    const auto logits = model->forward(torch::tensor(all).view({1, -1})).logits[0];  // (T, V)
    for (std::size_t i = 0; i < result.new_ids[0].size(); ++i)
      QCOMPARE(logits[static_cast<std::int64_t>(ids.size() - 1 + i)].argmax().item<std::int64_t>(), result.new_ids[0][i]);
  }

  void seededSamplingIsReproducible() {
    auto model = tiny("dtrnet", {{"routed_layers", "T-D-D-T"}});
    GenerateOptions options;
    options.sampling.temperature = 1.5;  // flat enough that different seeds differ
    options.sampling.top_k = 20;
    options.sampling.top_p = 0.95;
    options.max_new_tokens = 24;
    const std::vector<std::int64_t> prompt{1, 2, 3, 4, 5};
    options.sampling.seed = 3;
    const auto a = generate(*model, {prompt, prompt}, options);
    const auto b = generate(*model, {prompt, prompt}, options);
    QCOMPARE(a.new_ids, b.new_ids);
    options.sampling.seed = 4;
    const auto c = generate(*model, {prompt, prompt}, options);
    QVERIFY(c.new_ids != a.new_ids);
    // top-k 1 is greedy whatever the temperature and seed
    options.sampling.top_k = 1;
    const auto k1 = generate(*model, {prompt}, options);
    options.sampling = {};
    options.sampling.greedy = true;
    QCOMPARE(k1.new_ids, generate(*model, {prompt}, options).new_ids);
  }

  void stopIdsEndASequence() {
    auto model = tiny("dense");
    GenerateOptions options;
    options.sampling.greedy = true;
    options.max_new_tokens = 10;
    const std::vector<std::int64_t> prompt{3, 1, 4};
    const auto free_run = generate(*model, {prompt}, options);
    options.stop_ids = {free_run.new_ids[0][2]};
    const auto stopped = generate(*model, {prompt}, options);
    QCOMPARE(stopped.stop_reason[0], std::string("stop_id"));
    QVERIFY(stopped.new_ids[0].size() <= 3);
    QCOMPARE(stopped.new_ids[0].back(), options.stop_ids[0]);
  }

  void limitsAreClearErrors() {
    auto model = tiny("dtrnet", {{"routed_layers", "T-D-D-T"}});
    GenerateOptions options;
    options.max_new_tokens = 10;
    const std::vector<std::int64_t> long_prompt(60, 1);
    try {
      generate(*model, {long_prompt}, options);
      QFAIL("a context beyond max_seq_len was accepted");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("context of 64"), e.what());
    }
    options.max_cache_bytes = 1000;
    try {
      generate(*model, {{1, 2, 3}}, options);
      QFAIL("a cache above max_cache_bytes was accepted");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("max_cache_bytes"), e.what());
    }
    auto state = model->begin_decode(1);
    model->decode(*state, torch::ones({1, kContext}, torch::TensorOptions().dtype(torch::kLong)));
    QVERIFY_EXCEPTION_THROWN(model->decode(*state, torch::ones({1, 1}, torch::TensorOptions().dtype(torch::kLong))),
                             ConfigError);
    QVERIFY_EXCEPTION_THROWN(score(*model, std::vector<std::int64_t>(kContext + 1, 2)), ConfigError);
    options = {};
    options.sampling.top_p = 0;
    QVERIFY_EXCEPTION_THROWN(generate(*model, {{1, 2}}, options), ConfigError);
  }

  void scoreReportsLogprobsAndRouting() {
    auto model = tiny("mod");
    const auto tokens = torch::randint(kVocab, {1, 30}, torch::TensorOptions().dtype(torch::kLong));
    std::vector<std::int64_t> ids(tokens.data_ptr<std::int64_t>(), tokens.data_ptr<std::int64_t>() + 30);
    const auto result = score(*model, ids, 3);
    torch::NoGradGuard no_grad;
    const auto full = model->forward(tokens, true);
    const auto logprobs = torch::log_softmax(full.logits[0], -1);
    QCOMPARE(result.tokens.size(), std::size_t{30});
    QVERIFY(std::isnan(result.tokens[0].logprob));
    for (std::int64_t t = 1; t < 30; ++t)
      QVERIFY(std::abs(result.tokens[t].logprob - logprobs[t - 1][ids[t]].item<double>()) < 1e-4);
    QCOMPARE(result.tokens[5].top.size(), std::size_t{3});
    QCOMPARE(result.tokens[5].top[0].first, logprobs[5].argmax().item<std::int64_t>());
    for (std::size_t l = 0; l < full.trace.size(); ++l) {
      QCOMPARE(result.tokens[0].layers[l].routed, full.trace[l].routed);
      if (!full.trace[l].routed) continue;
      for (std::int64_t t = 0; t < 30; ++t) {
        QCOMPARE(result.tokens[t].layers[l].decision, full.trace[l].decision[0][t].item<bool>());
        QVERIFY(std::abs(result.tokens[t].layers[l].gate - full.trace[l].gate[0][t].item<double>()) < 1e-5);
      }
    }
    const auto json = result.to_json();
    QCOMPARE(json["positions"].size(), std::size_t{30});
    QVERIFY(json["positions"][0]["logprob"].is_null());
  }

  void cacheGrowsByDoublingWithPerSequenceLengths() {
    KVCache cache("layer", 0, 2, 2, 4);
    const auto k = torch::randn({2, 2, 1, 4}), v = torch::randn({2, 2, 1, 4});
    for (std::int64_t t = 0; t < 20; ++t) {
      const auto keep = torch::tensor({true, t % 2 == 0}).view({2, 1});
      cache.append(k * static_cast<double>(t), v, torch::full({1}, t, torch::kLong), keep);
    }
    QCOMPARE(cache.length(0), std::int64_t{20});
    QCOMPARE(cache.length(1), std::int64_t{10});
    QCOMPARE(cache.capacity(), std::int64_t{32});  // 16, then doubled
    QCOMPARE(cache.entry_bytes(), std::int64_t{2 * 2 * 4 * 4});
    QCOMPARE(cache.live_bytes(), std::int64_t{30 * 2 * 2 * 4 * 4});
    QCOMPARE(cache.allocated_bytes(), std::int64_t{2 * 2 * 2 * 32 * 4 * 4});
    // A query at position 5 of sequence 1 sees its entries at positions 0, 2, 4 only: with equal values the output
    // is that value, and a query before any entry of its sequence gets zeros.
    KVCache one("layer", 0, 1, 1, 2);
    one.append(torch::zeros({1, 1, 3, 2}), torch::tensor({1.0f, 1.0f, 2.0f, 2.0f, 9.0f, 9.0f}).view({1, 1, 3, 2}),
               torch::tensor({3, 4, 8}));
    const auto out = one.attend(torch::zeros({1, 1, 3, 2}), torch::tensor({2, 5, 8}));
    QCOMPARE(out[0][0][0][0].item<float>(), 0.0f);
    QCOMPARE(out[0][0][1][0].item<float>(), 1.5f);
    QVERIFY(std::abs(out[0][0][2][0].item<float>() - 4.0f) < 1e-6);
  }
};

}  // namespace test_generation

ROUTELAB_TEST_SUITE(test_generation, TestGeneration)
#include "test_generation.moc"
