// The FLOPs model against counted work, variant by variant (styles, routing modes, forced Radial paths): the
// matrix-product FLOPs that ATen executes in one eval-mode forward (FlopCounter) equal the FLOPs model priced from
// that forward's own routed fractions, within 1%; the counter on bare products; the model against LayerTrace; the
// shape of the ratio curve; and the errors. The registry-wide checks at defaults, inference and training mode,
// are in test_conformance.
#include <QtTest>

#include <cmath>

#include <torch/torch.h>

#include "core/cost/cost_curve.h"
#include "core/cost/flop_counter.h"
#include "core/cost/flops_model.h"
#include "core/models/dllm.h"
#include "core/models/dtrnet.h"
#include "core/models/language_model.h"
#include "core/models/mod.h"
#include "core/models/radial.h"
#include "core/models/registry.h"
#include "core/models/tsa.h"
#include "core/train/evaluation.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_flops {

using namespace routelab;

namespace {

constexpr std::int64_t kVocab = 29;
constexpr std::int64_t kSeq = 40;

nlohmann::json small(const std::string& arch) {
  return {{"arch", arch}, {"n_layer", 4}, {"n_embd", 32}, {"n_head", 4}, {"n_kv_head", 2}, {"max_seq_len", 64}};
}

/// Spreads a router's decisions to both sides (random init routes nearly every token the same way).
void spread(torch::nn::Linear& out, double scale) {
  torch::NoGradGuard no_grad;
  out->weight.mul_(scale);
  out->bias.zero_();
}

/// The per-layer fractions of a forward's trace, in estimate_flops's form.
std::vector<double> measured(const std::string& arch, const std::vector<LayerTrace>& trace) {
  InferenceRouting routing;
  routing.add(trace);
  return fractions_from_trace(arch, routing.layers());
}

/// A model section: the architecture's schema defaults under the given keys.
nlohmann::json with_defaults(const nlohmann::json& model) {
  auto full = schema_defaults(architecture(model.at("arch").get<std::string>()).options);
  for (const auto& [k, v] : model.items()) full[k] = v;
  return full;
}

/// One traced forward of `batch` random sequences under the FLOP counter, in training or eval mode.
std::pair<ModelOutput, double> counted_forward(LanguageModel& model, std::int64_t batch, bool training) {
  model.train(training);
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, kVocab, {batch, kSeq}, torch::kLong);
  FlopCounter counter;
  auto out = model.forward(tokens, true);
  counter.stop();
  return {std::move(out), counter.flops()};
}

bool near(double a, double b, double rel) { return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)); }

}  // namespace

class TestFlops : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    torch::manual_seed(0);
    at::set_num_threads(2);
  }

  void counter_counts_bare_products() {
    const auto a = torch::randn({3, 4}), b = torch::randn({4, 5});
    {
      FlopCounter c;
      torch::mm(a, b);
      QCOMPARE(c.flops(), 2.0 * 3 * 4 * 5);
      QCOMPARE(c.calls(), std::int64_t(1));
    }
    {
      // at::linear with a bias on 3-D input: one addmm; without: matmul folded into one mm. Neither is counted twice.
      const auto x = torch::randn({2, 3, 4}), w = torch::randn({5, 4}), bias = torch::randn({5});
      FlopCounter c;
      at::linear(x, w, bias);
      at::linear(x, w);
      torch::nn::functional::linear(x, w, bias);
      QCOMPARE(c.flops(), 3 * 2.0 * 2 * 3 * 4 * 5);
      QCOMPARE(c.calls(), std::int64_t(3));
    }
    {
      const auto x = torch::randn({2, 3, 4}), y = torch::randn({2, 4, 5});
      FlopCounter outer;
      torch::bmm(x, y);
      FlopCounter inner;
      torch::matmul(torch::randn({2, 2, 3, 4}), torch::randn({2, 2, 4, 5}));  // -> one bmm over 4 matrices
      torch::baddbmm(torch::zeros({2, 3, 5}), x, y);
      inner.stop();
      torch::mm(a, b);  // after the inner counter stopped
      QCOMPARE(inner.flops(), 2.0 * 4 * 3 * 4 * 5 + 2.0 * 2 * 3 * 4 * 5);
      QCOMPARE(outer.flops(), 2.0 * 2 * 3 * 4 * 5 + inner.flops() + 2.0 * 3 * 4 * 5);
      QVERIFY(outer.flops_by_op().count("aten::bmm") && outer.flops_by_op().count("aten::baddbmm"));
    }
    {
      FlopCounter c;
      torch::relu(a) + a;  // no matrix product
      QCOMPARE(c.flops(), 0.0);
    }
    QCOMPARE(at::get_num_threads(), 2);  // restored after counting
  }

  void counted_equals_modelled_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QString>("setup");
    const auto row = [](const char* name, nlohmann::json m, const char* setup = "") {
      QTest::newRow(name) << QString::fromStdString(m.dump()) << QString(setup);
    };
    row("dense-llama", small("dense"));
    auto gpt2 = small("dense");
    gpt2["style"] = "gpt2";
    gpt2["n_kv_head"] = 0;
    gpt2["tie_weights"] = false;
    row("dense-gpt2-untied", gpt2);
    auto dtr = small("dtrnet");
    dtr["routed_layers"] = "T-D-D-T";
    row("dtrnet-bilayer", [&] { auto m = small("dtrnet"); m["routed_layers"] = "bilayer"; return m; }(), "dtrnet");
    row("dtrnet-trilayer", [&] { auto m = small("dtrnet"); m["n_layer"] = 6; m["routed_layers"] = "trilayer"; return m; }(), "dtrnet");
    row("dtrnet-skip", [&] { auto m = dtr; m["routing"] = "skip"; return m; }());
    row("dtrnet-expert", [&] { auto m = dtr; m["routing"] = "expert"; return m; }(), "dtrnet-expert");
    row("dtrnet-wo-vo", [&] { auto m = dtr; m["bypass"] = "none"; return m; }(), "dtrnet");
    row("dtrnet-masked", [&] { auto m = dtr; m["attention"] = "masked"; return m; }(), "dtrnet");
    row("dtrnet-gpt2", [&] { auto m = dtr; m["style"] = "gpt2"; m["n_kv_head"] = 0; return m; }(), "dtrnet");
    row("mod", small("mod"), "mod");
    row("dllm", small("dllm"), "dllm");
    row("tsa-soft", small("tsa"), "tsa");
    row("tsa-sparse", [&] { auto m = small("tsa"); m["inference"] = "sparse"; return m; }(), "tsa");
    row("early-exit-off", small("early-exit"));
    row("early-exit", [&] { auto m = small("early-exit"); m["exit_threshold"] = 0.06; return m; }());
    row("radial-forced", small("radial"), "radial");
    row("radial-forced-depth6", [&] { auto m = small("radial"); m["max_depth"] = 6; return m; }(), "radial6");
    row("drr-causal", [&] { auto m = small("drr"); m["n_layer"] = 5; m["block_size"] = 2; m["short_window"] = 2;
                            m["summary_tokens"] = 4; m["n_kv_head"] = 0; return m; }());
  }

  void counted_equals_modelled() {
    QFETCH(QString, config);
    QFETCH(QString, setup);
    const auto full = with_defaults(nlohmann::json::parse(config.toStdString()));
    const auto arch = full.at("arch").get<std::string>();
    torch::manual_seed(1);
    auto model = create_model(full, {kVocab, 64});
    model->eval();
    if (setup == "dtrnet" || setup == "dtrnet-expert") {
      for (auto& layer : dynamic_cast<DTRNet&>(*model).routed)
        if (layer) {
          spread(layer->router_out, 60.0);
          if (setup == "dtrnet-expert") spread(layer->predictor->linear, 60.0);
        }
    }
    if (setup == "mod") {
      auto& mod = dynamic_cast<MixtureOfDepths&>(*model);
      for (auto& layer : mod.mod_layers)
        if (layer) spread(layer->predictor->linear, 60.0);
    }
    if (setup == "dllm") {
      auto& dllm = dynamic_cast<DLLM&>(*model);
      for (auto& r : dllm.routers)
        if (r) spread(r->fc2, 60.0);
    }
    if (setup == "tsa") {
      auto& tsa = dynamic_cast<TokenSelectiveAttention&>(*model);
      for (auto& r : tsa.routers) spread(r->fc2, 60.0);
    }
    if (setup == "radial") dynamic_cast<RadialNetwork&>(*model).set_forced_path(torch::tensor({0, 2, 0, -1}));
    if (setup == "radial6") dynamic_cast<RadialNetwork&>(*model).set_forced_path(torch::tensor({3, 1, 3, 3, 2, -1}));

    torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(0, kVocab, {1, kSeq}, torch::kLong);
    ModelOutput out;
    double counted = 0;
    {
      FlopCounter counter;
      out = model->forward(tokens, true);
      counted = counter.flops();
    }
    FlopsQuery q;
    q.seq = kSeq;
    q.batch = 1;
    q.fractions = measured(arch, out.trace);
    const auto est = estimate_flops(full, kVocab, q);
    std::string fractions;
    for (const double f : q.fractions) fractions += " " + std::to_string(f).substr(0, 5);
    qInfo("%s: counted %.6g, modelled %.6g, fractions%s", arch.c_str(), counted, est.total_flops(), fractions.c_str());
    QVERIFY2(near(counted, est.total_flops(), 0.01),
             qPrintable(QString("%1: counted %2, modelled %3 (layers %4, head %5)")
                            .arg(QString::fromStdString(arch))
                            .arg(counted, 0, 'g', 10)
                            .arg(est.total_flops(), 0, 'g', 10)
                            .arg(est.layer_flops(), 0, 'g', 10)
                            .arg(est.head_flops, 0, 'g', 10)));
    // The routing must really have varied where the setup spreads the routers (otherwise the test proves little).
    if (!setup.isEmpty() && arch != "radial") {
      bool mixed = false;
      for (const double f : q.fractions) mixed = mixed || (f > 0.05 && f < 0.95);
      QVERIFY2(mixed, "every routed layer took one path for every token");
    }
    // Where the model prices what the trace prices, the two agree (up to float rounding).
    if (arch == "dense" || arch == "dtrnet" || arch == "mod" || arch == "dllm" || arch == "tsa") {
      double trace_flops = 0, trace_dense = 0;
      for (const auto& t : out.trace) trace_flops += t.flops, trace_dense += t.dense_flops;
      QVERIFY2(near(trace_flops, est.layer_flops(), 1e-9),
               qPrintable(QString("trace %1 vs model %2").arg(trace_flops, 0, 'g', 12).arg(est.layer_flops(), 0, 'g', 12)));
      QVERIFY(near(trace_dense, est.dense_layer_flops(), 1e-12));
    }
  }

  void counted_equals_modelled_batched() {
    // Batch 2, dense and DTRNet Masked (no per-sequence compaction): exact whatever each sequence routes.
    for (const auto* arch : {"dense", "dtrnet"}) {
      auto m = small(arch);
      if (std::string(arch) == "dtrnet") m["attention"] = "masked";
      const auto full = with_defaults(m);
      auto model = create_model(full, {kVocab, 64});
      const auto [out, counted] = counted_forward(*model, 2, /*training=*/false);
      FlopsQuery q;
      q.seq = kSeq;
      q.batch = 2;
      q.fractions = measured(arch, out.trace);
      QVERIFY(near(counted, estimate_flops(full, kVocab, q).total_flops(), 1e-9));
    }
  }

  void ratio_curve_shape() {
    auto m = small("dtrnet");
    m["n_layer"] = 8;
    m["n_embd"] = 512;
    m["n_head"] = 8;
    m["n_kv_head"] = 0;
    FlopsQuery q;
    q.fractions = {0.3};
    double previous = 2.0;
    for (std::int64_t T = 128; T <= 32768; T *= 2) {
      q.seq = T;
      const auto est = estimate_flops(m, 49152, q);
      QVERIFY2(est.layer_ratio() < previous, qPrintable(QString("T %1: %2 >= %3").arg(T).arg(est.layer_ratio()).arg(previous)));
      QVERIFY(est.total_ratio() < 1.0 && est.layer_ratio() < 1.0);
      previous = est.layer_ratio();
    }
    // A routed fraction of 1 costs more than dense (the router), and the ratio grows with the fraction.
    q.seq = 2048;
    q.fractions = {1.0};
    QVERIFY(estimate_flops(m, 256, q).layer_ratio() > 1.0);
    double last = 0;
    for (const double f : {0.1, 0.3, 0.7, 1.0}) {
      q.fractions = {f};
      const double r = estimate_flops(m, 256, q).layer_ratio();
      QVERIFY(r > last);
      last = r;
    }
    // Dense is 1 at every length; TSA sparse at a fixed FFN share tends to 1 as attention dominates.
    auto tsa = small("tsa");
    tsa["inference"] = "sparse";
    q.fractions = {0.5};
    double tsa_previous = 0;
    for (std::int64_t T = 128; T <= 32768; T *= 4) {
      q.seq = T;
      QCOMPARE(estimate_flops(small("dense"), 256, q).total_ratio(), 1.0);
      const double r = estimate_flops(tsa, 256, q).layer_ratio();
      QVERIFY(r > tsa_previous && r < 1.0);
      tsa_previous = r;
    }
  }

  void breakdown_and_json() {
    FlopsQuery q;
    q.seq = 256;
    q.fractions = {1, 0.25, 1, 0.5};
    const auto est = estimate_flops(small("dtrnet"), kVocab, q);
    QCOMPARE(int(est.layers.size()), 4);
    QCOMPARE(est.layers[1].fraction, 0.25);
    QCOMPARE(est.layers[0].fraction, 1.0);  // a dense layer ignores its value
    for (const auto& l : est.layers) {
      double sum = 0;
      for (const auto& [k, v] : l.parts) sum += v;
      QVERIFY(near(sum, l.flops, 1e-12));
    }
    const auto j = est.to_json();
    QVERIFY(j.at("convention").get<std::string>().find("2 FLOPs per multiply-add") != std::string::npos);
    QCOMPARE(j.at("layers").size(), std::size_t(4));
    QVERIFY(j.at("layers")[1].at("parts").contains("router"));
  }

  void pricedCurveFollowsEachArchitecturesKvRule() {
    // The cost-versus-length curve every view draws (core/cost/cost_curve.h) prices an evaluation's layers by the
    // registry: D-LLM keeps a dense-sized cache (its prompt pass stores every slot), DTRNet caches its routed tokens.
    std::vector<routelab::LayerRouting> layers(4);
    for (int l = 0; l < 4; ++l) layers[l] = {l, "dense", l % 2 == 1, l % 2 ? 0.25 : 1.0, 0, 0, {}};
    for (const std::string arch : {"dtrnet", "dllm"}) {
      for (auto& l : layers)
        if (l.routed) l.kind = arch;
      const nlohmann::json shape = {
          {"arch", arch}, {"n_layer", 4}, {"n_embd", 64}, {"n_head", 4}, {"routed_layers", "T-D-T-D"}};
      auto model = routelab::schema_defaults(routelab::architecture(arch).options);
      for (const auto& [key, value] : shape.items()) model[key] = value;
      const auto lengths = routelab::default_cost_lengths(100);
      QCOMPARE(lengths.front(), std::int64_t{64});
      QCOMPARE(lengths.back(), std::int64_t{8192});
      const auto priced = routelab::priced_cost_curve(model, layers, 4.0, lengths);
      QCOMPARE(priced.size(), lengths.size());
      for (const auto& p : priced) {
        QVERIFY(p.flops < p.dense_flops);
        if (arch == "dllm")
          QCOMPARE(p.kv_bytes, p.dense_kv_bytes);
        else
          QVERIFY(std::abs(p.kv_bytes - p.dense_kv_bytes * (1.0 + 0.25) / 2.0) < 1e-6 * p.dense_kv_bytes);
      }
      // Records that do not fit the model (another layer count) are named.
      try {
        routelab::priced_cost_curve(model, {{0, "dense", true, 0.5, 0, 0, {}}}, 4.0, lengths);
        QFAIL("one record for four layers must be refused");
      } catch (const routelab::ConfigError& e) {
        QVERIFY2(std::string(e.what()).find("layers") != std::string::npos, e.what());
      }
    }
  }

  void errors() {
    try {
      estimate_flops({{"arch", "nope"}}, kVocab, {});
      QFAIL("no error");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("unsupported architecture 'nope'") && QString(e.what()).contains("dtrnet"),
               e.what());
    }
    FlopsQuery q;
    q.fractions = {0.5, 0.5};
    QVERIFY_THROWS_EXCEPTION(ConfigError, estimate_flops(small("dtrnet"), kVocab, q));
    q.fractions = {1.5};
    QVERIFY_THROWS_EXCEPTION(ConfigError, estimate_flops(small("mod"), kVocab, q));
    q.fractions = {};
    q.seq = 0;
    QVERIFY_THROWS_EXCEPTION(ConfigError, estimate_flops(small("dense"), kVocab, q));
    QVERIFY_THROWS_EXCEPTION(ConfigError, routed_fraction_meaning("nope"));
  }
};

}  // namespace test_flops

ROUTELAB_TEST_SUITE(test_flops, TestFlops)
#include "test_flops.moc"
