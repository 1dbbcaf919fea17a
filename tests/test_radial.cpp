// Radial Networks: trace and token data, causality (training with seeded Gumbel noise, and eval), the unified store
// never exposing a later token, the parallel forward against a token-by-token reference with an explicit growing
// store, the forced exit at max_depth, min_depth, layer reuse, counts and FLOPs of a forced path, the expected-depth
// regulariser and its gradient, the straight-through gradient, the residual probe, config errors and a short
// training run.
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "core/config/experiment_config.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/radial.h"
#include "core/models/registry.h"
#include "core/train/checkpoint.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/errors.h"

#include "model_test_support.h"
#include "tests/suite.h"

namespace test_radial {

using namespace routelab;

namespace {

constexpr std::int64_t kVocab = 37;

TransformerOptions small(ModelStyle style = ModelStyle::Llama, std::int64_t kv_heads = 0, std::int64_t layers = 3) {
  return test::small_transformer(style, kv_heads, layers, kVocab, 64);
}

using test::add_style_rows;

/// Router weights of order one, so that different tokens take different paths and exit at different steps, and
/// sharp attention, so that a wrong entry, position or step in the store would show in the outputs.
void spread(RadialNetwork& model, double exit_bias = 0.5) {
  torch::NoGradGuard no_grad;
  model.router->fc1->weight.normal_(0.0, 0.5);
  model.router->fc2->weight.normal_(0.0, 0.5);
  model.router->fc2->bias.zero_();
  model.router->fc2->bias[model.exit_choice()].fill_(exit_bias);
  for (auto& layer : model.layers) layer->attn->qkv->weight.normal_(0.0, 0.3);
}

/// The router prefers `layer` at every step whatever the input (exit logit -10).
void pin_router(RadialNetwork& model, std::int64_t layer) {
  torch::NoGradGuard no_grad;
  model.router->fc2->weight.zero_();
  model.router->fc2->bias.zero_();
  model.router->fc2->bias[layer].fill_(10.0);
  model.router->fc2->bias[model.exit_choice()].fill_(-10.0);
}

struct Reference {
  torch::Tensor logits;  // (B, T, V)
  torch::Tensor path;    // (B, T, S)
};

/// Incremental decoding written independently of the parallel forward: tokens one at a time, in order, each
/// running its steps to the exit, with an explicit growing store of (k, v, position, step) entries. The query of
/// token t at step s reads the entries with step <= s (every entry in the store belongs to a token <= t).
/// Inference routing (argmax), or the given (B, T, S) path.
Reference reference_forward(RadialNetwork& model, const torch::Tensor& tokens, const torch::Tensor& forced = {}) {
  torch::NoGradGuard no_grad;
  const auto B = tokens.size(0), T = tokens.size(1), L = model.num_layers(), S = model.max_depth();
  const auto& o = model.options();
  const auto C = o.n_embd(), H = o.n_head(), Hkv = o.n_kv_head() > 0 ? o.n_kv_head() : H, hd = C / H;
  const auto embedded = model.embed_tokens(tokens);  // (B, T, C)
  Reference ref{torch::zeros({B, T, o.vocab_size()}), torch::full({B, T, S}, -1, torch::kLong)};
  struct Entry {
    torch::Tensor k, v;  // (Hkv, hd)
    std::int64_t position, step;
  };
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<Entry> store;
    for (std::int64_t t = 0; t < T; ++t) {
      auto h = embedded[b][t].view({1, 1, C});
      for (std::int64_t s = 0; s < S; ++s) {
        auto z = model.router(h).view({-1}).clone();  // (L + 1)
        if (s < model.radial_options().min_depth()) z[L] = -std::numeric_limits<float>::infinity();
        std::int64_t c = forced.defined() ? forced[b][t][s].item<std::int64_t>() : z.argmax().item<std::int64_t>();
        if (c < 0 || c == L) break;
        ref.path[b][t][s] = c;
        auto& layer = model.layers[static_cast<std::size_t>(c)];
        const auto qkv = layer->attn->project(layer->norm1(h), torch::full({1, 1}, t, torch::kLong));
        store.push_back({qkv.k[0].select(1, 0), qkv.v[0].select(1, 0), t, s});  // (Hkv, hd)
        std::vector<torch::Tensor> keys, values;
        for (const auto& e : store) {
          QTEST_ASSERT(e.position <= t);
          if (e.step <= s) keys.push_back(e.k), values.push_back(e.v);
        }
        const auto K = torch::stack(keys, 1), V = torch::stack(values, 1);  // (Hkv, n, hd)
        const auto q = qkv.q[0].select(1, 0);                               // (H, hd)
        std::vector<torch::Tensor> heads;
        for (std::int64_t head = 0; head < H; ++head) {
          const auto kv = head / (H / Hkv);
          const auto p = torch::softmax(torch::mv(K[kv], q[head]) / std::sqrt(double(hd)), 0);  // (n)
          heads.push_back(torch::mv(V[kv].t(), p));                                         // (hd)
        }
        const auto a = linear(torch::cat(heads).view({1, 1, C}), layer->attn->proj);
        h = h + a;
        h = h + layer->mlp(layer->norm2(h));
      }
      ref.logits[b][t] = model.output_logits(h).view({-1});
    }
  }
  return ref;
}

/// (B, T, S) path of a run, from its token data.
torch::Tensor path_of(const ModelOutput& out) { return out.token_data.at("path"); }

QString max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return QString("max diff %1").arg((a - b).abs().max().item<double>());
}

}  // namespace

class TestRadial : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void init() { torch::manual_seed(7); }

  void forwardShapesTraceAndTokenData_data() { add_style_rows(); }
  void forwardShapesTraceAndTokenData() {
    QFETCH(int, style);
    QFETCH(int, kv);
    RadialNetwork model(small(ModelStyle(style), kv), RadialOptions().max_depth(4));
    spread(model);
    QCOMPARE(model.arch_id(), std::string("radial"));
    QCOMPARE(model.max_depth(), std::int64_t(4));
    const std::int64_t B = 3, T = 12, L = 3, S = 4;
    const auto out = model.forward(torch::randint(0, kVocab, {B, T}, torch::kLong), true);
    QCOMPARE(out.logits.sizes().vec(), (std::vector<std::int64_t>{B, T, kVocab}));
    QVERIFY(out.aux_loss.requires_grad());
    QCOMPARE(out.trace.size(), std::size_t(L));
    const auto depth = out.token_data.at("depth"), path = path_of(out);
    QCOMPARE(depth.sizes().vec(), (std::vector<std::int64_t>{B, T}));
    QCOMPARE(depth.scalar_type(), torch::kLong);
    QCOMPARE(path.sizes().vec(), (std::vector<std::int64_t>{B, T, S}));
    QCOMPARE(path.scalar_type(), torch::kLong);
    // -1 after the exit and only there; depth = layers run.
    const auto ran = path.ge(0);
    QVERIFY(torch::equal(ran.sum(-1), depth));
    QVERIFY(torch::equal(ran, torch::arange(S).view({1, 1, S}).lt(depth.unsqueeze(-1))));
    QVERIFY(path.max().item<std::int64_t>() < L);
    QVERIFY(depth.min().item<std::int64_t>() != depth.max().item<std::int64_t>());  // dynamic depth
    const auto shape = layer_shape(model.options());
    std::int64_t runs_total = 0;
    for (std::int64_t l = 0; l < L; ++l) {
      const auto& t = out.trace[std::size_t(l)];
      QCOMPARE(t.layer, int(l));
      QCOMPARE(t.kind, std::string("radial"));
      QVERIFY(t.routed);
      const auto runs = path.eq(l).sum(-1);  // (B, T)
      QVERIFY(torch::equal(t.decision, runs.gt(0)));
      QCOMPARE(t.decision.scalar_type(), torch::kBool);
      QCOMPARE(t.gate.sizes().vec(), (std::vector<std::int64_t>{B, T}));
      QCOMPARE(t.gate.scalar_type(), torch::kFloat);
      QVERIFY(!t.gate.requires_grad());
      QVERIFY(t.gate.min().item<double>() > 0.0 && t.gate.max().item<double>() < 1.0);
      const auto n = runs.sum().item<std::int64_t>();
      QCOMPARE(t.tokens_processed.at("attn"), n);
      QCOMPARE(t.tokens_processed.at("mlp"), n);
      QCOMPARE(t.routed_fraction, double(n) / double(B * T));
      QCOMPARE(t.dense_flops, dense_layer_flops(B, T, shape));
      QVERIFY(t.flops > 0);
      QVERIFY(t.stats.count("repeat_fraction"));
      runs_total += n;
    }
    QCOMPARE(double(runs_total) / double(B * T), out.stats.at("mean_depth"));
    QCOMPARE(out.stats.at("max_depth_share"), depth.eq(S).to(torch::kDouble).mean().item<double>());
    QCOMPARE(out.stats.at("exit_at_0"), depth.eq(0).to(torch::kDouble).mean().item<double>());
    for (const auto* key : {"expected_depth", "reuse_share", "distinct_layers"}) QVERIFY2(out.stats.count(key), key);
    // The gate of a layer is the router's mean probability of it over the token's router evaluations: the layer
    // probabilities plus the mean exit probability sum to one.
    auto gate_sum = torch::zeros({B, T});
    for (const auto& t : out.trace) gate_sum += t.gate;
    QVERIFY((gate_sum - 1).abs().max().item<double>() > 1e-3);  // the exit takes a share
    QVERIFY(gate_sum.max().item<double>() < 1.0);
    // aux = depth_coeff * mean expected depth.
    QVERIFY(std::abs(out.aux_loss.item<double>() - 0.01 * out.stats.at("expected_depth")) < 1e-6);
    // Without tracing nothing is recorded.
    const auto quiet = model.forward(torch::randint(0, kVocab, {B, T}, torch::kLong));
    QVERIFY(quiet.trace.empty() && quiet.stats.empty() && quiet.token_data.empty());
  }

  void parallelForwardEqualsTokenByTokenReference_data() {
    QTest::addColumn<int>("style");
    QTest::addColumn<int>("kv");
    QTest::addColumn<int>("max_depth");
    QTest::addColumn<int>("min_depth");
    QTest::addColumn<bool>("training");
    QTest::newRow("llama eval") << int(ModelStyle::Llama) << 0 << 0 << 0 << false;
    QTest::newRow("llama-gqa eval, max depth 5 > L") << int(ModelStyle::Llama) << 2 << 5 << 0 << false;
    QTest::newRow("gpt2 eval, min depth 1") << int(ModelStyle::GPT2) << 0 << 4 << 1 << false;
    QTest::newRow("llama train, no noise") << int(ModelStyle::Llama) << 0 << 4 << 0 << true;
    QTest::newRow("llama-gqa train, no noise, min depth 2") << int(ModelStyle::Llama) << 2 << 3 << 2 << true;
  }
  void parallelForwardEqualsTokenByTokenReference() {
    QFETCH(int, style);
    QFETCH(int, kv);
    QFETCH(int, max_depth);
    QFETCH(int, min_depth);
    QFETCH(bool, training);
    RadialNetwork model(small(ModelStyle(style), kv),
                        RadialOptions().max_depth(max_depth).min_depth(min_depth).gumbel_noise(false));
    spread(model);
    model.train(training);
    const auto tokens = torch::randint(0, kVocab, {2, 10}, torch::kLong);
    const auto out = model.forward(tokens, true);
    const auto ref = reference_forward(model, tokens);
    QVERIFY(torch::equal(path_of(out), ref.path));
    const auto depth = out.token_data.at("depth");
    QVERIFY2(depth.min().item<std::int64_t>() < depth.max().item<std::int64_t>(), "depths should vary");
    QVERIFY(depth.min().item<std::int64_t>() >= min_depth);
    QVERIFY2(torch::allclose(out.logits, ref.logits, 1e-4, 1e-5), qPrintable(max_diff(out.logits, ref.logits)));
  }

  void sampledTrainingPathMatchesReference() {
    // Training routes by a Gumbel sample: the parallel forward on that path equals decoding the same path.
    RadialNetwork model(small(ModelStyle::Llama, 2), RadialOptions().max_depth(4));
    spread(model);
    model.train();
    const auto tokens = torch::randint(0, kVocab, {2, 9}, torch::kLong);
    const auto out = model.forward(tokens, true);
    torch::NoGradGuard no_grad;
    model.eval();
    const auto argmax_path = path_of(model.forward(tokens, true));
    QVERIFY2(!torch::equal(path_of(out), argmax_path), "the noise should change some routes");
    const auto ref = reference_forward(model, tokens, path_of(out));
    QVERIFY(torch::equal(path_of(out), ref.path));
    QVERIFY2(torch::allclose(out.logits, ref.logits, 1e-4, 1e-5), qPrintable(max_diff(out.logits, ref.logits)));
  }

  void causality_data() {
    QTest::addColumn<int>("style");
    QTest::addColumn<int>("kv");
    QTest::addColumn<bool>("training");
    QTest::newRow("llama train (seeded Gumbel noise)") << int(ModelStyle::Llama) << 0 << true;
    QTest::newRow("llama-gqa train (seeded Gumbel noise)") << int(ModelStyle::Llama) << 2 << true;
    QTest::newRow("gpt2 train (seeded Gumbel noise)") << int(ModelStyle::GPT2) << 0 << true;
    QTest::newRow("llama eval") << int(ModelStyle::Llama) << 0 << false;
    QTest::newRow("gpt2 eval") << int(ModelStyle::GPT2) << 0 << false;
  }
  void causality() {
    QFETCH(int, style);
    QFETCH(int, kv);
    QFETCH(bool, training);
    RadialNetwork model(small(ModelStyle(style), kv), RadialOptions().max_depth(4));
    spread(model);
    model.train(training);
    torch::NoGradGuard no_grad;
    const std::int64_t B = 2, T = 16;
    const auto a = torch::randint(0, kVocab, {B, T}, torch::kLong);
    for (std::int64_t t : {0, 6, 14}) {
      auto b = a.clone();
      b.narrow(1, t + 1, T - t - 1).random_(0, kVocab);
      RadialRecord ra, rb;
      torch::manual_seed(123);  // the same Gumbel noise for both forwards
      const auto oa = model.run(a, true, &ra);
      torch::manual_seed(123);
      const auto ob = model.run(b, true, &rb);
      QVERIFY(test::close_to_scale(oa.logits.narrow(1, 0, t + 1), ob.logits.narrow(1, 0, t + 1)));
      QVERIFY(!torch::allclose(oa.logits.narrow(1, t + 1, T - t - 1), ob.logits.narrow(1, t + 1, T - t - 1)));
      QVERIFY(torch::equal(path_of(oa).narrow(1, 0, t + 1), path_of(ob).narrow(1, 0, t + 1)));
      // The stream at every earlier position after every step.
      for (std::size_t s = 0; s < std::min(ra.steps.size(), rb.steps.size()); ++s)
        QVERIFY(test::close_to_scale(ra.steps[s].hidden.narrow(1, 0, t + 1), rb.steps[s].hidden.narrow(1, 0, t + 1)));
    }
  }

  void unifiedStoreNeverExposesLaterToken() {
    RadialNetwork model(small(ModelStyle::Llama, 2), RadialOptions().max_depth(4));
    spread(model, -1.0);  // deep paths: many entries per token
    model.eval();
    torch::NoGradGuard no_grad;
    const std::int64_t B = 2, T = 14, t = 5;
    const auto a = torch::randint(0, kVocab, {B, T}, torch::kLong);
    auto b = a.clone();
    b.narrow(1, t + 1, T - t - 1).random_(0, kVocab);
    RadialRecord ra, rb;
    model.run(a, true, &ra);
    model.run(b, true, &rb);
    QVERIFY(ra.steps.size() >= 2);
    int steps_with_later_entries = 0;
    for (std::size_t s = 0; s < std::min(ra.steps.size(), rb.steps.size()); ++s) {
      const auto& sa = ra.steps[s];
      const auto& sb = rb.steps[s];
      // Every query's visible entries: positions <= its own, steps <= s.
      const auto step_a = torch::full_like(sa.query_index, std::int64_t(s));
      const auto visible = ra.store.visible(sa.query_index, step_a).logical_and(sa.query_valid.unsqueeze(2));
      const auto later = ra.store.position.unsqueeze(1).gt(sa.query_index.unsqueeze(2));  // (B, K, N)
      QVERIFY(!visible.logical_and(later).any().item<bool>());
      const auto later_step = ra.store.step.unsqueeze(1).gt(std::int64_t(s));
      QVERIFY(!visible.logical_and(later_step).any().item<bool>());
      // The attention recomputed from the final store reproduces the step's outputs (entries of later steps
      // are hidden by the step tag).
      QVERIFY(torch::allclose(unified_attention(sa.q, ra.store, visible), sa.heads, 1e-5, 1e-6));
      // Leaky rule (positions ignored): the earlier queries would read the later tokens' entries, and since the
      // later tokens differ between a and b, their outputs would differ. The real rule keeps them equal.
      const auto step_b = torch::full_like(sb.query_index, std::int64_t(s));
      const auto leaky_a = ra.store.valid.unsqueeze(1).logical_and(ra.store.step.unsqueeze(1).le(step_a.unsqueeze(2)));
      const auto leaky_b = rb.store.valid.unsqueeze(1).logical_and(rb.store.step.unsqueeze(1).le(step_b.unsqueeze(2)));
      const auto leaky_heads_a = unified_attention(sa.q, ra.store, leaky_a);
      const auto leaky_heads_b = unified_attention(sb.q, rb.store, leaky_b);
      for (std::int64_t row = 0; row < B; ++row) {
        // The earlier tokens that ran at this step come first in the compacted rows, in the same order in a and b.
        const auto early = sa.query_valid[row].logical_and(sa.query_index[row].le(t)).sum().item<std::int64_t>();
        QCOMPARE(sb.query_valid[row].logical_and(sb.query_index[row].le(t)).sum().item<std::int64_t>(), early);
        if (early == 0) continue;
        QVERIFY(torch::equal(sa.query_index[row].narrow(0, 0, early), sb.query_index[row].narrow(0, 0, early)));
        // Equal up to rounding: the two runs compact different numbers of rows, so their GEMMs differ in shape.
        QVERIFY(test::close_to_scale(sa.heads[row].narrow(1, 0, early), sb.heads[row].narrow(1, 0, early)));
        const auto later_entries = ra.store.valid[row].logical_and(ra.store.position[row].gt(t)).logical_and(
            ra.store.step[row].le(std::int64_t(s)));
        if (!later_entries.any().item<bool>()) continue;
        ++steps_with_later_entries;
        QVERIFY2(!torch::allclose(leaky_heads_a[row].narrow(1, 0, early), leaky_heads_b[row].narrow(1, 0, early),
                                  1e-4, 1e-4),
                 "a later token's entries must matter when visible");
      }
    }
    QVERIFY(steps_with_later_entries > 0);
  }

  void maxDepthForcesExit_data() {
    QTest::addColumn<int>("max_depth");
    QTest::newRow("S = 2 < L") << 2;
    QTest::newRow("S = L (default)") << 0;
    QTest::newRow("S = 5 > L") << 5;
  }
  /// The staircase kernel (queries see the valid entries up to their own position, the rows in position order, only
  /// about half the rectangle scored) equals the masked attention over the whole store, outputs and gradients of q,
  /// keys and values: entries of three steps with padding, grouped heads, steps of more rows than one block of the
  /// kernel, a padding query row and a real row before every entry (which sees nothing and gets zeros); bf16 inputs
  /// up-cast.
  void staircaseAttentionEqualsMaskedStore() {
    const std::int64_t B = 2, H = 4, Hkv = 2, hd = 8, T = 160;
    const std::vector<std::int64_t> step_rows = {120, 70, 90};  // padded rows per step; real ones below
    const std::vector<std::vector<std::int64_t>> real = {{120, 64, 90}, {101, 70, 33}};
    std::vector<torch::Tensor> positions, valids;
    for (std::size_t s = 0; s < step_rows.size(); ++s) {
      auto pos = torch::zeros({B, step_rows[s]}, torch::kLong), valid = torch::zeros({B, step_rows[s]}, torch::kBool);
      for (std::int64_t b = 0; b < B; ++b) {
        const auto n = real[std::size_t(b)][s];
        pos[b].narrow(0, 0, n).copy_(std::get<0>(torch::randperm(T).narrow(0, 0, n).sort()));
        valid[b].narrow(0, 0, n).fill_(true);
      }
      positions.push_back(pos), valids.push_back(valid);
    }
    UnifiedKVStore store;
    store.position = torch::cat(positions, 1), store.valid = torch::cat(valids, 1);
    store.step = torch::zeros_like(store.position);
    const auto N = store.position.size(1);
    const auto keys = torch::randn({B, Hkv, N, hd}).requires_grad_();
    const auto values = torch::randn({B, Hkv, N, hd}).requires_grad_();
    store.keys = keys, store.values = values;
    // The queries: the last step's rows, the first of sequence 1 moved before every entry.
    auto q_position = positions.back().clone();
    const std::vector<std::int64_t> rows = {real[0].back(), real[1].back()};
    q_position[1][0] = -1;
    const auto q = torch::randn({B, H, step_rows.back(), hd}).requires_grad_();
    const auto row_real = torch::arange(step_rows.back()).unsqueeze(0).lt(torch::tensor(rows).unsqueeze(1));  // (B, K)
    const auto visible = store.valid.unsqueeze(1)
                             .logical_and(store.position.unsqueeze(1).le(q_position.unsqueeze(2)))
                             .logical_and(row_real.unsqueeze(2));
    const auto weight = torch::randn({B, H, step_rows.back(), hd});
    QVERIFY(staircase_attention_runs(q, store.keys, store.values, 0.0, true));
    const auto gradients = [&](const torch::Tensor& out) {
      const auto g = torch::autograd::grad({(out * weight).sum()}, {q, keys, values});
      return std::vector<torch::Tensor>{out.detach(), g[0], g[1], g[2]};
    };
    double pairs = 0;
    const auto got = gradients(unified_attention_to_position(q, store, q_position, rows, &pairs));
    const auto want = gradients(unified_attention(q, store, visible));
    QCOMPARE(pairs, double(rows[0] + rows[1]) * double(N));
    QVERIFY(got[0][1].select(1, 0).abs().max().item<double>() == 0.0);  // the row that sees nothing
    QVERIFY(got[0][1].narrow(1, rows[1], step_rows.back() - rows[1]).abs().max().item<double>() == 0.0);  // padding
    for (std::size_t i = 0; i < got.size(); ++i)
      QVERIFY2(torch::allclose(got[i], want[i], 1e-5, 1e-5),
               qPrintable(QString("tensor %1: max difference %2")
                              .arg(i)
                              .arg((got[i] - want[i]).abs().max().item<double>())));
    // bf16 inputs (autocast's) go through the fp32 kernel up-cast, the output and gradients rounded back: the masked
    // attention of the same values in fp32, to bf16's rounding.
    const auto half = [](const torch::Tensor& t) { return t.detach().to(torch::kBFloat16).requires_grad_(); };
    UnifiedKVStore half_store = store, up_store = store;
    const auto qh = half(q), kh = half(keys), vh = half(values);
    half_store.keys = kh, half_store.values = vh;
    const auto qu = qh.detach().to(torch::kFloat).requires_grad_();
    up_store.keys = kh.detach().to(torch::kFloat).requires_grad_();
    up_store.values = vh.detach().to(torch::kFloat).requires_grad_();
    QVERIFY(staircase_attention_runs(qh, half_store.keys, half_store.values, 0.0, true));
    const auto out_h = unified_attention_to_position(qh, half_store, q_position, rows);
    QCOMPARE(out_h.scalar_type(), torch::kBFloat16);
    const auto got_h = torch::autograd::grad({(out_h.to(torch::kFloat) * weight).sum()}, {qh, kh, vh});
    const auto out_u = unified_attention(qu, up_store, visible);
    const auto want_h = torch::autograd::grad({(out_u * weight).sum()}, {qu, up_store.keys, up_store.values});
    QVERIFY(torch::allclose(out_h.to(torch::kFloat), out_u, 1e-2, 1e-2));
    for (std::size_t i = 0; i < 3; ++i) {
      QCOMPARE(got_h[i].scalar_type(), torch::kBFloat16);
      QVERIFY(torch::allclose(got_h[i].to(torch::kFloat), want_h[i], 2e-2, 2e-2));
    }
  }

  void maxDepthForcesExit() {
    QFETCH(int, max_depth);
    // An exit logit far below the layers': the router never chooses the exit, so max_depth ends every path.
    RadialNetwork model(small(), RadialOptions().max_depth(max_depth).exit_bias(-30.0));
    const std::int64_t S = max_depth > 0 ? max_depth : 3;
    QCOMPARE(model.max_depth(), S);
    for (bool training : {true, false}) {
      model.train(training);
      const auto out = model.forward(torch::randint(0, kVocab, {2, 8}, torch::kLong), true);
      QVERIFY(torch::equal(out.token_data.at("depth"), torch::full({2, 8}, S, torch::kLong)));
      QVERIFY(path_of(out).ge(0).all().item<bool>());
      QCOMPARE(path_of(out).size(2), S);
      QCOMPARE(out.stats.at("max_depth_share"), 1.0);
      QCOMPARE(out.stats.at("mean_depth"), double(S));
      QCOMPARE(out.stats.at("exit_at_0"), 0.0);
      std::int64_t runs = 0;
      for (const auto& t : out.trace) runs += t.tokens_processed.at("mlp");
      QCOMPARE(runs, 2 * 8 * S);
    }
  }

  void minDepthDelaysExit() {
    // A router that always wants to exit: min_depth decides the depth, and with 0 the model is its embedding.
    RadialNetwork model(small(), RadialOptions().max_depth(4).min_depth(2).exit_bias(30.0));
    model.eval();
    const auto tokens = torch::randint(0, kVocab, {2, 8}, torch::kLong);
    const auto out = model.forward(tokens, true);
    QVERIFY(torch::equal(out.token_data.at("depth"), torch::full({2, 8}, 2, torch::kLong)));
    QCOMPARE(out.stats.at("max_depth_share"), 0.0);
    QVERIFY(torch::allclose(out.logits, reference_forward(model, tokens).logits, 1e-4, 1e-5));

    RadialNetwork shallow(small(), RadialOptions().max_depth(4).min_depth(0).exit_bias(30.0));
    shallow.eval();
    const auto out0 = shallow.forward(tokens, true);
    QCOMPARE(out0.stats.at("exit_at_0"), 1.0);
    QCOMPARE(out0.stats.at("mean_depth"), 0.0);
    for (const auto& t : out0.trace) QCOMPARE(t.tokens_processed.at("mlp"), std::int64_t(0));
    QVERIFY(torch::equal(out0.logits, shallow.output_logits(shallow.embed_tokens(tokens))));
  }

  void sequentialPriorStartsOnTheSequentialPath() {
    // model.sequential_prior: a step bias that prefers layer s at step s (and the exit after the last layer) over an
    // untrained router, so the network starts as the sequential stack (a distilled network: its teacher's path).
    const auto tokens = torch::randint(0, kVocab, {2, 8}, torch::kLong);
    for (const std::int64_t max_depth : {0, 5}) {
      RadialNetwork model(small(), RadialOptions().max_depth(max_depth).sequential_prior(30.0));
      const auto L = model.exit_choice();
      QVERIFY(model.step_bias.defined());
      QCOMPARE(model.step_bias.size(0), model.max_depth());
      QVERIFY(!model.decays("step_bias", model.step_bias));
      model.eval();
      const auto out = model.forward(tokens, true);
      QVERIFY(torch::equal(out.token_data.at("depth"), torch::full({2, 8}, L, torch::kLong)));
      const auto sequential = torch::arange(L, torch::kLong);
      QVERIFY(torch::equal(path_of(out).narrow(2, 0, L), sequential.view({1, 1, L}).expand({2, 8, L})));
      model.set_forced_path(torch::cat({sequential, torch::full({model.max_depth() - L}, -1, torch::kLong)}));
      QVERIFY(torch::equal(out.logits, model.forward(tokens).logits));
      model.set_forced_path(torch::Tensor());
    }
    // It is learned: the language-model loss reaches it through the straight-through weights.
    RadialNetwork model(small(), RadialOptions().sequential_prior(2.0).depth_coeff(0.0));
    model.train();
    const auto out = model.forward(tokens);
    torch::nn::functional::cross_entropy(out.logits.reshape({-1, kVocab}), tokens.reshape({-1})).backward();
    QVERIFY(model.step_bias.grad().defined() && model.step_bias.grad().abs().sum().item<double>() > 0);
    RadialNetwork plain(small(), RadialOptions());
    QVERIFY(!plain.step_bias.defined());
  }

  void layerReuse() {
    RadialNetwork model(small(), RadialOptions().max_depth(4));
    spread(model);
    pin_router(model, 1);
    model.eval();
    const auto tokens = torch::randint(0, kVocab, {2, 7}, torch::kLong);
    const auto out = model.forward(tokens, true);
    QVERIFY(torch::equal(path_of(out), torch::full({2, 7, 4}, 1, torch::kLong)));
    QCOMPARE(out.trace[1].routed_fraction, 4.0);
    QCOMPARE(out.trace[1].tokens_processed.at("mlp"), std::int64_t(2 * 7 * 4));
    QCOMPARE(out.trace[1].stats.at("repeat_fraction"), 1.0);
    QVERIFY(out.trace[1].decision.all().item<bool>());
    for (int l : {0, 2}) {
      QCOMPARE(out.trace[std::size_t(l)].routed_fraction, 0.0);
      QVERIFY(!out.trace[std::size_t(l)].decision.any().item<bool>());
    }
    QCOMPARE(out.stats.at("reuse_share"), 1.0);
    QCOMPARE(out.stats.at("distinct_layers"), 1.0);
    // Running a layer four times is not running it once: every pass changes the stream.
    const auto ref = reference_forward(model, tokens);
    QVERIFY(torch::allclose(out.logits, ref.logits, 1e-4, 1e-5));
    model.set_forced_path(torch::tensor({1, -1, -1, -1}, torch::kLong));
    QVERIFY(!torch::allclose(model.forward(tokens).logits, out.logits, 1e-3, 1e-3));
  }

  void forcedPathCountsAndFlops() {
    const std::int64_t B = 2, T = 6, L = 3, S = 4;
    RadialNetwork model(small(), RadialOptions().max_depth(S));
    model.eval();
    // A hand-written path per token (L = exit): depths 0..4, reuse, different layers per step.
    const std::vector<std::vector<std::int64_t>> paths = {
        {0, 1, 2, 3}, {3, 0, 0, 0}, {2, 2, 3, 0}, {1, 0, 2, 1}, {0, 3, 1, 1}, {2, 1, 0, 3},
        {1, 1, 1, 1}, {0, 2, 3, 3}, {3, 3, 3, 3}, {2, 0, 1, 2}, {0, 0, 3, 2}, {1, 2, 0, 0}};
    auto forced = torch::empty({B, T, S}, torch::kLong);
    for (std::int64_t i = 0; i < B * T; ++i)
      for (std::int64_t s = 0; s < S; ++s) forced[i / T][i % T][s] = paths[std::size_t(i)][std::size_t(s)];
    model.set_forced_path(forced);
    const auto tokens = torch::randint(0, kVocab, {B, T}, torch::kLong);
    const auto out = model.forward(tokens, true);
    QVERIFY(torch::allclose(out.logits, reference_forward(model, tokens, forced).logits, 1e-4, 1e-5));

    // Expected counts and FLOPs from the path, by brute force, priced as the forward executes them: the router on
    // all B T rows at every step until one where no token runs; every running query scored against the whole store,
    // whose width grows each step by the most tokens any sequence runs (its compacted, padded row count).
    auto path = torch::full({B, T, S}, -1, torch::kLong);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t s = 0; s < S; ++s) {
          const auto c = forced[b][t][s].item<std::int64_t>();
          if (c == L) break;
          path[b][t][s] = c;
        }
    std::vector<double> runs(L, 0), pairs(L, 0);
    double evaluations = 0, store = 0;
    for (std::int64_t s = 0; s < S; ++s) {
      evaluations += double(B * T);
      std::int64_t widest = 0;
      for (std::int64_t b = 0; b < B; ++b) {
        std::int64_t running = 0;
        for (std::int64_t t = 0; t < T; ++t) running += path[b][t][s].item<std::int64_t>() >= 0;
        widest = std::max(widest, running);
      }
      if (widest == 0) break;
      store += double(widest);
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t t = 0; t < T; ++t)
          if (const auto c = path[b][t][s].item<std::int64_t>(); c >= 0) {
            runs[std::size_t(c)] += 1;
            pairs[std::size_t(c)] += store;
          }
    }
    QVERIFY(torch::equal(path_of(out), path));
    QCOMPARE(runs[0] + runs[1] + runs[2], 29.0);
    const auto shape = layer_shape(model.options());
    const double hidden = 16;  // n_embd / 2
    const double router = 2 * evaluations * (32 * hidden + hidden * (L + 1));
    for (std::int64_t l = 0; l < L; ++l) {
      const auto& t = out.trace[std::size_t(l)];
      const double n = runs[std::size_t(l)];
      QCOMPARE(double(t.tokens_processed.at("attn")), n);
      QCOMPARE(t.routed_fraction, n / double(B * T));
      const double expected = 2 * n * 32 * (32 + 2 * 32) + 4 * pairs[std::size_t(l)] * 32 + 2 * n * 32 * 32 +
                              2 * n * 32 * (2 * shape.d_ff) + 2 * n * shape.d_ff * 32 + router / L;
      QVERIFY2(std::abs(t.flops - expected) < 1e-9 * expected,
               qPrintable(QString("layer %1: %2 vs %3").arg(l).arg(t.flops).arg(expected)));
    }
    QCOMPARE(out.stats.at("exit_at_0"), 2.0 / 12.0);        // two paths start with the exit
    QCOMPARE(out.stats.at("max_depth_share"), 4.0 / 12.0);  // four run all four steps
    model.set_forced_path({});
    QVERIFY(!torch::equal(path_of(model.forward(tokens, true)), path));
  }

  void expectedDepthRegulariser_data() {
    QTest::addColumn<int>("min_depth");
    QTest::addColumn<int>("exit_step");  // forced exit at this step; -1: none (forced out at S)
    QTest::newRow("free") << 0 << -1;
    QTest::newRow("min depth 2") << 2 << -1;
    QTest::newRow("exit at step 2") << 0 << 2;
  }
  void expectedDepthRegulariser() {
    QFETCH(int, min_depth);
    QFETCH(int, exit_step);
    const std::int64_t S = 4, L = 3;
    const double coeff = 0.3, bias = -0.7;
    RadialNetwork model(small(), RadialOptions().max_depth(S).min_depth(min_depth).depth_coeff(coeff).gumbel_noise(false));
    // Router logits independent of the input: layers 0, exit `bias`; q = e^bias / (L + e^bias) at every step.
    {
      torch::NoGradGuard no_grad;
      model.router->fc2->weight.zero_();
      model.router->fc2->bias.zero_();
      model.router->fc2->bias[L].fill_(bias);
    }
    if (exit_step >= 0) {
      auto path = torch::zeros({S}, torch::kLong);
      path[exit_step] = L;
      model.set_forced_path(path);
    }
    model.train();
    const auto out = model.forward(torch::randint(0, kVocab, {2, 5}, torch::kLong), true);
    const double q = std::exp(bias) / (L + std::exp(bias));
    // E = sum over the steps the router ran of prod_{j <= s} (1 - q_j), q_j = 0 before min_depth.
    double expected = 0, survive = 1, d_expected = 0, d_log_survive = 0;
    const std::int64_t evaluated = exit_step >= 0 ? exit_step + 1 : S;
    for (std::int64_t s = 0; s < evaluated; ++s) {
      if (s >= min_depth) {
        survive *= 1 - q;
        d_log_survive += -q;  // d log(1 - q) / d bias = -q
      }
      expected += survive;
      d_expected += survive * d_log_survive;
    }
    QVERIFY2(std::abs(out.stats.at("expected_depth") - expected) < 1e-5,
             qPrintable(QString("%1 vs %2").arg(out.stats.at("expected_depth")).arg(expected)));
    QCOMPARE(out.stats.at("mean_depth"), double(exit_step >= 0 ? exit_step : S));
    QVERIFY(std::abs(out.aux_loss.item<double>() - coeff * expected) < 1e-5);
    // depth_warmup ramps the coefficient with the training progress.
    QCOMPARE(model.depth_weight(), coeff);
    RadialNetwork ramped(small(), RadialOptions().depth_coeff(coeff).depth_warmup(0.5));
    ramped.set_progress(0.0);
    QCOMPARE(ramped.depth_weight(), 0.0);
    ramped.set_progress(0.9);
    QCOMPARE(ramped.depth_weight(), coeff);
    ramped.set_progress(0.1);
    const auto ramped_out = ramped.forward(torch::randint(0, kVocab, {1, 4}, torch::kLong), true);
    QVERIFY(std::abs(ramped_out.aux_loss.item<double>() - 0.2 * coeff * ramped_out.stats.at("expected_depth")) < 1e-6);
    // Its gradient reaches the router's exit bias.
    out.aux_loss.backward();
    const double grad = model.router->fc2->bias.grad()[L].item<double>();
    QVERIFY2(std::abs(grad - coeff * d_expected) < 1e-5, qPrintable(QString("%1 vs %2").arg(grad).arg(coeff * d_expected)));
  }

  void straightThroughGradientReachesRouter() {
    RadialNetwork model(small(), RadialOptions().max_depth(4).depth_coeff(0.0));
    spread(model);
    const auto x = torch::randint(0, kVocab, {2, 10}, torch::kLong), y = torch::randint(0, kVocab, {2, 10}, torch::kLong);
    const auto loss_of = [&](const ModelOutput& out) {
      return lm_loss(out.logits, y, {}) + out.aux_loss;  // aux is zero here: only the LM loss routes
    };
    // Eval (hard argmax, no straight-through): the router gets no gradient.
    model.eval();
    model.zero_grad();
    loss_of(model.forward(x)).backward();
    for (const auto& p : model.router->parameters())
      QVERIFY(!p.grad().defined() || p.grad().abs().sum().item<double>() == 0.0);
    // Training: the chosen option's soft weight carries the gradient; with and without the Gumbel noise.
    for (bool noise : {true, false}) {
      RadialNetwork m(small(), RadialOptions().max_depth(4).depth_coeff(0.0).gumbel_noise(noise));
      spread(m);
      m.train();
      const auto out = m.forward(x, true);
      loss_of(out).backward();
      QVERIFY(m.router->fc1->weight.grad().abs().sum().item<double>() > 0);
      const auto bias_grad = m.router->fc2->bias.grad();  // (L + 1)
      for (std::int64_t l = 0; l <= 3; ++l) QVERIFY2(bias_grad[l].item<double>() != 0.0, qPrintable(QString::number(l)));
      // Every logit's gradient sums to zero across the softmax.
      QVERIFY(std::abs(bias_grad.sum().item<double>()) < 1e-6);
      // The straight-through weight is exactly one in the forward: training without noise equals eval.
      torch::NoGradGuard no_grad;
      m.train(!noise);
      const auto train_logits = m.forward(x).logits;
      m.eval();
      if (!noise) QVERIFY(torch::equal(train_logits, m.forward(x).logits));
    }
  }

  void residualProbeRecordsEveryExecutedSubBlock() {
    RadialNetwork model(small(), RadialOptions().max_depth(3));
    spread(model);
    model.eval();
    torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(0, kVocab, {2, 9}, torch::kLong);
    ResidualProbe probe;
    const auto out = model.forward(tokens, true);
    const auto path = path_of(out);
    std::int64_t executions = 0;
    for (const auto& sample : probe.samples) {
      QVERIFY(sample.block == "attn" || sample.block == "mlp");
      QVERIFY(sample.step >= 0 && sample.step < 3);
      QCOMPARE(sample.ratio.sizes().vec(), (std::vector<std::int64_t>{2, 9}));
      const auto ran = path.select(2, sample.step).eq(sample.layer);  // (B, T)
      QVERIFY(torch::equal(sample.ratio.isnan().logical_not(), ran));
      QVERIFY(sample.ratio.masked_select(ran).gt(0).all().item<bool>());
      if (sample.block == "mlp") executions += ran.sum().item<std::int64_t>();
    }
    QCOMPARE(executions, path.ge(0).sum().item<std::int64_t>());
    QVERIFY(executions > 0);
  }

  void registryEntry() {
    const auto& entry = architecture("radial");
    QCOMPARE(entry.display_name, std::string("Radial Networks"));
    auto model_json = schema_defaults(entry.options);
    model_json["arch"] = "radial";
    QCOMPARE(model_json.at("max_depth").get<int>(), 0);
    QCOMPARE(model_json.at("depth_coeff").get<double>(), 0.01);
    model_json["max_depth"] = 6;
    model_json["min_depth"] = 1;
    model_json["temperature"] = 0.5;
    model_json["exit_bias"] = -1.0;
    entry.check(model_json, "model");
    const auto model = create_model(model_json, {kVocab, 32});
    auto* radial = dynamic_cast<RadialNetwork*>(model.get());
    QVERIFY(radial);
    QCOMPARE(radial->max_depth(), std::int64_t(6));
    QCOMPARE(radial->radial_options().min_depth(), std::int64_t(1));
    QCOMPARE(radial->radial_options().temperature(), 0.5);
    QCOMPARE(radial->router->fc2->bias[radial->exit_choice()].item<double>(), -1.0);
    const auto params = radial->named_parameters();
    QVERIFY(params.contains("layers.0.attn.proj.weight"));
    QVERIFY(params.contains("router.fc2.weight"));
    // Residual projections of the layers get the scaled init.
    QVERIFY(params["layers.0.attn.proj.weight"].std().item<double>() < 0.013);
    QVERIFY(params["layers.0.attn.qkv.weight"].std().item<double>() > 0.017);
    QVERIFY(QString::fromStdString(radial->describe()).contains("max depth 6"));
  }

  // Cross-field rules of this architecture; every option out of its schema range or of the wrong type is checked
  // for every architecture by test_conformance.
  void configErrorNamesKey_data() {
    QTest::addColumn<QString>("overrides");
    QTest::addColumn<QString>("key");
    QTest::newRow("min depth above default max") << R"({"arch":"radial","min_depth":5})" << "model.min_depth";
    QTest::newRow("min depth above max") << R"({"arch":"radial","max_depth":2,"min_depth":3})" << "model.min_depth";
  }
  void configErrorNamesKey() {
    QFETCH(QString, overrides);
    QFETCH(QString, key);
    test::check_config_error_names_key(overrides, key, "radial");
    // Direct construction checks the same.
    QVERIFY_THROWS_EXCEPTION(ConfigError, RadialNetwork(small(), RadialOptions().max_depth(2).min_depth(3)));
  }

  void shortTrainingLowersLoss() {
    // min_depth 1: on this memorisation task the router otherwise drifts toward exiting at step 0 within a hundred
    // steps (with the default depth_coeff), and a token that runs no layer cannot read its context.
    RadialNetwork model(small(), RadialOptions().max_depth(3).min_depth(1));
    auto opt = make_optimizer(model, nlohmann::json::parse(
                                         R"({"lr":3e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.0})"));
    const auto x = torch::randint(0, kVocab, {4, 16}, torch::kLong), y = torch::randint(0, kVocab, {4, 16}, torch::kLong);
    double first = 0, last = 0;
    for (int i = 0; i < 100; ++i) {
      const auto r = train_step(model, *opt, {x, y, {}}, 1.0, false, false);
      last = r.loss.item<double>();
      if (i == 0) first = last;
    }
    QVERIFY2(last < 0.2 * first, qPrintable(QString("%1 -> %2").arg(first).arg(last)));
    model.eval();
    torch::NoGradGuard no_grad;
    const auto out = model.forward(x, true);
    QVERIFY(lm_loss(out.logits, y, {}).item<double>() < 0.3 * first);
    QVERIFY(out.stats.at("mean_depth") >= 1.0);
  }

  void bf16StepRuns() {
    RadialNetwork model(small(ModelStyle::Llama, 2), RadialOptions().max_depth(4));
    spread(model);
    auto opt = make_optimizer(model, nlohmann::json::parse(
                                         R"({"lr":3e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.0})"));
    const auto x = torch::randint(0, kVocab, {3, 12}, torch::kLong);
    const auto r = train_step(model, *opt, {x, x, {}}, 1.0, /*bf16=*/true, /*trace=*/true);
    QVERIFY(std::isfinite(r.loss.item<double>()) && std::isfinite(r.aux_loss.item<double>()));
    QCOMPARE(r.output.trace.size(), std::size_t(3));
  }
};

}  // namespace test_radial

ROUTELAB_TEST_SUITE(test_radial, TestRadial)
#include "test_radial.moc"
