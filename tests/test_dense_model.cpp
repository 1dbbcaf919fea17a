// The dense Transformer: shapes, causality, the attention kernel against a naive reference, the value-only
// path, the schedule and a tiny batch that overfits (checkpoint round trips: test_conformance, for every model).
#include <QTemporaryDir>
#include <QtTest>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <torch/torch.h>

#include "core/models/blocks/cpu_attention_kernel.h"
#include "core/models/blocks/cpu_softmax.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/dense_transformer.h"
#include "core/train/checkpoint.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/cpu_allocator.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_dense_model {

using namespace routelab;

namespace {

TransformerOptions small(ModelStyle style, std::int64_t kv_heads = 0) {
  TransformerOptions o;
  o.style(style).vocab_size(37).max_seq_len(32).n_layer(2).n_embd(32).n_head(4).n_kv_head(kv_heads);
  return o;
}

/// Naive causal attention: explicit (T, T) masked softmax per head, key/value heads expanded by index.
torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const auto H = q.size(1), T = q.size(2), hd = q.size(3), rep = H / k.size(1);
  std::vector<torch::Tensor> heads;
  for (std::int64_t h = 0; h < H; ++h) {
    const auto qh = q.select(1, h), kh = k.select(1, h / rep), vh = v.select(1, h / rep);  // (B, T, hd)
    auto s = torch::matmul(qh, kh.transpose(1, 2)) / std::sqrt(double(hd));
    s = s.masked_fill(torch::ones({T, T}, torch::kBool).triu(1), -INFINITY);
    heads.push_back(torch::matmul(torch::softmax(s, -1), vh));
  }
  return torch::stack(heads, 1);
}

}  // namespace

class TestDenseModel : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void init() { torch::manual_seed(7); }

  void forwardShapes_data() {
    QTest::addColumn<int>("style");
    QTest::addColumn<int>("kv");
    QTest::newRow("llama") << int(ModelStyle::Llama) << 0;
    QTest::newRow("llama-gqa") << int(ModelStyle::Llama) << 2;
    QTest::newRow("gpt2") << int(ModelStyle::GPT2) << 0;
  }
  void forwardShapes() {
    QFETCH(int, style);
    QFETCH(int, kv);
    DenseTransformer model(small(ModelStyle(style), kv));
    const auto out = model.forward(torch::randint(0, 37, {3, 11}, torch::kLong), true);
    QCOMPARE(out.logits.sizes().vec(), (std::vector<std::int64_t>{3, 11, 37}));
    QCOMPARE(out.aux_loss.item<double>(), 0.0);
    QCOMPARE(out.trace.size(), std::size_t(2));
    QCOMPARE(out.trace[0].tokens_processed.at("attn"), std::int64_t(33));
  }

  void causality_data() { forwardShapes_data(); }
  void causality() {
    QFETCH(int, style);
    QFETCH(int, kv);
    DenseTransformer model(small(ModelStyle(style), kv));
    model.eval();
    torch::NoGradGuard no_grad;
    const auto a = torch::randint(0, 37, {2, 16}, torch::kLong);
    for (std::int64_t t : {0, 5, 14}) {
      auto b = a.clone();
      b.narrow(1, t + 1, 16 - t - 1).random_(0, 37);
      const auto la = model.forward(a).logits, lb = model.forward(b).logits;
      QVERIFY(torch::allclose(la.narrow(1, 0, t + 1), lb.narrow(1, 0, t + 1), 1e-5, 1e-6));
      QVERIFY(!torch::allclose(la.narrow(1, t + 1, 16 - t - 1), lb.narrow(1, t + 1, 16 - t - 1)));
    }
  }

  void cpuAttentionLoopRunsOnEveryThread() {
    // at::parallel_for is a header around `#pragma omp parallel`: built without OpenMP, the kernel's loop ran on one
    // thread (and every small BLAS call in it forked the BLAS's own threads; 2.5x slower at T 1024 on two cores).
    if (std::thread::hardware_concurrency() < 2) QSKIP("one core: nothing to run in parallel");
    const int before = at::get_num_threads();
    at::set_num_threads(2);
    const int threads = routelab::cpu_attention_loop_threads();
    at::set_num_threads(before);
    QCOMPARE(threads, 2);
  }

  void attentionMatchesNaive_data() {
    QTest::addColumn<int>("kv");
    QTest::addColumn<int>("T");
    QTest::addColumn<bool>("recompute");
    for (const bool recompute : {false, true}) {
      const auto row = [&](const char* name) -> QTestData& {
        return QTest::newRow((std::string(name) + (recompute ? ", probabilities recomputed" : "")).c_str());
      };
      row("mha") << 4 << 9 << recompute;
      row("gqa") << 2 << 9 << recompute;
      row("mqa") << 1 << 9 << recompute;
      // Past one block of 128 query rows the CPU kernel scores each block against the keys it can see only.
      row("blocks, last short") << 2 << 300 << recompute;
      row("blocks, one row left") << 4 << 257 << recompute;
      row("blocks, whole") << 1 << 512 << recompute;
      row("three blocks") << 2 << 600 << recompute;
    }
  }
  void attentionMatchesNaive() {
    QFETCH(int, kv);
    QFETCH(int, T);
    QFETCH(bool, recompute);
    std::optional<RecomputeCpuAttention> from_lse;
    if (recompute) from_lse.emplace();
    const auto q = torch::randn({2, 4, T, 8}, torch::requires_grad());
    const auto k = torch::randn({2, kv, T, 8}, torch::requires_grad());
    const auto v = torch::randn({2, kv, T, 8}, torch::requires_grad());
    const auto fast = causal_attention(q, k, v);
    const auto ref = naive_attention(q, k, v);
    QVERIFY(torch::allclose(fast, ref, 1e-5, 1e-6));
    {
      const torch::NoGradGuard no_grad;  // the forward that holds nothing for a backward: the same softmax
      const auto plain = causal_attention(q, k, v);
      QVERIFY(recompute ? torch::allclose(plain, fast, 1e-5, 1e-6) : torch::equal(plain, fast));
    }
    const auto g = torch::randn_like(fast);
    const auto grads_fast = torch::autograd::grad({fast}, {q, k, v}, {g});
    const auto grads_ref = torch::autograd::grad({ref}, {q, k, v}, {g});
    // Key gradients summed block by block over hundreds of keys: fp32 rounding of a few 1e-6 on gradients up to ~7.
    const double atol = T > 256 ? 1e-5 : 1e-6;
    for (int i = 0; i < 3; ++i) QVERIFY(torch::allclose(grads_fast[i], grads_ref[i], 1e-5, atol));
  }

  void fusedSoftmaxEqualsAtens_data() {
    QTest::addColumn<int>("T");
    QTest::addColumn<bool>("recompute");
    for (const bool recompute : {false, true})
      for (const int T : {1, 9, 128, 300, 600})
        QTest::newRow((std::to_string(T) + (recompute ? ", recomputed" : "")).c_str()) << T << recompute;
  }
  void fusedSoftmaxEqualsAtens() {
    // The kernels' AVX-512 row softmax (cpu_softmax.h) against ATen's over masked rows, in the same kernel: the
    // output and every gradient, kept probabilities and recomputed ones, whole squares and causal blocks, each as
    // near the fp64 reference as ATen's is (recomputing from log-sum-exps of scores of tens costs either a few 1e-6).
    if (!cpu_attention::fused_softmax_active()) QSKIP("no AVX-512 here, or ROUTELAB_CPU_FUSED_SOFTMAX=0: ATen's only");
    QFETCH(int, T);
    QFETCH(bool, recompute);
    std::optional<RecomputeCpuAttention> from_lse;
    if (recompute) from_lse.emplace();
    const auto q = (3 * torch::randn({2, 4, T, 16})).requires_grad_();  // scores of a few tens: exp's range used
    const auto k = (3 * torch::randn({2, 2, T, 16})).requires_grad_();
    const auto v = torch::randn({2, 2, T, 16}, torch::requires_grad());
    const auto g = torch::randn({2, 4, T, 16});
    const auto run = [&](bool reference) {
      const auto cast = [&](const torch::Tensor& t) { return reference ? t.to(torch::kDouble) : t; };
      const auto out = reference ? naive_attention(cast(q), cast(k), cast(v)) : causal_attention(q, k, v);
      auto results = torch::autograd::grad({out}, {q, k, v}, {cast(g)});
      results.insert(results.begin(), out);
      return results;
    };
    const auto fused = run(false), exact = run(true);
    std::vector<torch::Tensor> aten;
    {
      const cpu_attention::AtenCpuSoftmax reference;
      QVERIFY(!cpu_attention::fused_softmax_active());
      aten = run(false);
    }
    QVERIFY(cpu_attention::fused_softmax_active());
    for (std::size_t i = 0; i < fused.size(); ++i) {
      const auto error = [&](const torch::Tensor& t) {
        return (t.to(torch::kDouble) - exact[i]).abs().max().item<double>();
      };
      const auto scale = exact[i].abs().max().item<double>();
      QVERIFY2(error(fused[i]) <= 2 * error(aten[i]) + 1e-6 * scale,
               qPrintable(QString("output/gradient %1: %2 against ATen's %3 (largest %4)")
                              .arg(i)
                              .arg(error(fused[i]))
                              .arg(error(aten[i]))
                              .arg(scale)));
    }
  }

  void rowSoftmaxZerosTheFutureAndKeepsNaN() {
    // The row loops read a row's visible keys only: whatever lies past them (here NaN) gives zero probabilities and
    // zero gradients; a NaN among the visible keys makes its row NaN, as ATen's softmax does; -inf gives 0; scores
    // of any size; the log-sum-exps and the probabilities from them are ATen's.
    if (!cpu_attention::fused_softmax_active()) QSKIP("no AVX-512 here, or ROUTELAB_CPU_FUSED_SOFTMAX=0: ATen's only");
    const std::int64_t rows = 5, cols = 37, start = 30;  // rows see 31 .. 35 keys of 37
    auto scores = 20 * torch::randn({rows, cols});
    scores[0][3] = -std::numeric_limits<float>::infinity();
    scores[1][0] = 80.0f;  // exp would overflow without the maximum
    scores[4][2] = std::numeric_limits<float>::quiet_NaN();
    for (std::int64_t a = 0; a < rows; ++a)
      scores[a].narrow(0, start + a + 1, cols - start - a - 1).fill_(std::numeric_limits<float>::quiet_NaN());
    auto probs = torch::empty({rows, cols}), lse = torch::empty({rows});
    cpu_attention::causal_softmax(scores.data_ptr<float>(), probs.data_ptr<float>(), rows, cols, start,
                                  lse.data_ptr<float>());
    for (std::int64_t a = 0; a < rows; ++a) {
      const auto n = start + a + 1;
      const auto visible = scores[a].narrow(0, 0, n);
      QCOMPARE(probs[a].narrow(0, n, cols - n).abs().sum().item<double>(), 0.0);
      if (a == 4) {
        QVERIFY(probs[a].narrow(0, 0, n).isnan().all().item<bool>());
        continue;
      }
      QVERIFY(torch::allclose(probs[a].narrow(0, 0, n), torch::softmax(visible, 0), 1e-5, 1e-7));
      QVERIFY(std::abs(lse[a].item<double>() - torch::logsumexp(visible, 0).item<double>()) < 1e-5);
    }
    QCOMPARE(probs[0][3].item<double>(), 0.0);
    auto again = torch::full({rows - 1, cols}, 7.0f);
    cpu_attention::causal_exp(scores.data_ptr<float>(), again.data_ptr<float>(), rows - 1, cols, start,
                              lse.data_ptr<float>(), 1);
    QVERIFY(torch::allclose(again, probs.narrow(0, 0, rows - 1), 1e-5, 1e-7));
    auto d_probs = torch::randn({rows - 1, cols});
    d_probs.narrow(1, cols - 1, 1).fill_(std::numeric_limits<float>::quiet_NaN());  // past every row's keys
    auto d_scores = torch::full({rows - 1, cols}, 7.0f);
    const auto p = probs.narrow(0, 0, rows - 1).contiguous();
    cpu_attention::causal_softmax_backward(d_probs.data_ptr<float>(), p.data_ptr<float>(), d_scores.data_ptr<float>(),
                                           rows - 1, cols, start);
    for (std::int64_t a = 0; a < rows - 1; ++a) {
      const auto n = start + a + 1;
      const auto pa = p[a].narrow(0, 0, n), da = d_probs[a].narrow(0, 0, n);
      QVERIFY(torch::allclose(d_scores[a].narrow(0, 0, n), pa * (da - (da * pa).sum()), 1e-5, 1e-6));
      QCOMPARE(d_scores[a].narrow(0, n, cols - n).abs().sum().item<double>(), 0.0);
    }
    // The staircase kernel's rows: any count of entries each, clamped to the row, a row that sees none all zeros.
    const std::vector<std::int64_t> visible{0, 3, cols + 5, -2};
    auto stair = torch::full({4, cols}, 7.0f);
    cpu_attention::softmax_visible(scores.data_ptr<float>(), stair.data_ptr<float>(), 4, cols, visible.data());
    QCOMPARE(stair[0].abs().sum().item<double>(), 0.0);
    QCOMPARE(stair[3].abs().sum().item<double>(), 0.0);
    QVERIFY(torch::allclose(stair[1].narrow(0, 0, 3), torch::softmax(scores[1].narrow(0, 0, 3), 0), 1e-5, 1e-7));
    QCOMPARE(stair[1].narrow(0, 3, cols - 3).abs().sum().item<double>(), 0.0);
    QVERIFY(stair[2].isnan().all().item<bool>());  // every entry seen: the NaN past row 2's causal keys too
    auto d_stair = torch::full({4, cols}, 7.0f);
    cpu_attention::softmax_backward_visible(d_probs.data_ptr<float>(), stair.data_ptr<float>(),
                                            d_stair.data_ptr<float>(), 4, cols, visible.data());
    QCOMPARE(d_stair[0].abs().sum().item<double>(), 0.0);
    QCOMPARE(d_stair[1].narrow(0, 3, cols - 3).abs().sum().item<double>(), 0.0);
  }

  void recomputedProbabilitiesGiveTheKeptGradients() {
    // Compacted sequences of three lengths (past two blocks, empty, within one block): the backward that recomputes
    // the probabilities from each row's log-sum-exp gives the kept probabilities' output and gradients to fp32
    // rounding, and zero on the padding.
    const std::vector<std::int64_t> lengths{300, 0, 17};
    const auto q = torch::randn({3, 4, 300, 16}, torch::requires_grad());
    const auto k = torch::randn({3, 2, 300, 16}, torch::requires_grad());
    const auto v = torch::randn({3, 2, 300, 16}, torch::requires_grad());
    const auto g = torch::randn({3, 4, 300, 16});
    const auto run = [&](bool recompute) {
      std::optional<RecomputeCpuAttention> from_lse;
      if (recompute) from_lse.emplace();
      const auto out = causal_attention(q, k, v, 0.0, false, lengths);
      auto results = torch::autograd::grad({out}, {q, k, v}, {g});
      results.insert(results.begin(), out);
      return results;
    };
    const auto kept = run(false), recomputed = run(true);
    for (std::size_t i = 0; i < kept.size(); ++i) QVERIFY(torch::allclose(recomputed[i], kept[i], 1e-5, 1e-5));
    QCOMPARE(recomputed[1][1].abs().sum().item<double>(), 0.0);                           // dq of the empty sequence
    QCOMPARE(recomputed[1][2].narrow(1, 17, 283).abs().sum().item<double>(), 0.0);        // and of the padding rows
    QVERIFY(recomputed[2][0].abs().sum().item<double>() > 0);
  }

  void probabilitiesKeptUpToTheLimit() {
    // Both CPU kernels (dense and D-LLM's) keep a call's probabilities up to 256 MiB (ROUTELAB_CPU_ATTENTION_KEEP_MB)
    // and recompute them past it, or always while a RecomputeCpuAttention is alive.
    using cpu_attention::kept_probabilities_limit, cpu_attention::recompute_probabilities;
    if (std::getenv("ROUTELAB_CPU_ATTENTION_KEEP_MB") == nullptr)
      QCOMPARE(kept_probabilities_limit(), std::int64_t{256} << 20);
    const auto limit = static_cast<double>(kept_probabilities_limit());
    QVERIFY(!recompute_probabilities(limit));
    QVERIFY(recompute_probabilities(limit + 1));
    const RecomputeCpuAttention forced;
    QVERIFY(recompute_probabilities(0));
  }

  void attentionHoldsWhatItsBackwardReads() {
    // A call's probabilities (B H T^2/2 floats: 71 MB here) are held only for a backward that reads them: a call
    // without gradient, and one whose backward recomputes them, hold one block of 128 query rows per thread.
    install_cpu_cache();  // its count of live large blocks measures
    if (!cpu_cache_installed()) QSKIP("ROUTELAB_CPU_CACHE_MB=0: no count of live blocks");
    const int threads = at::get_num_threads();
    at::set_num_threads(2);
    const std::int64_t B = 2, H = 4, T = 2048, hd = 16;
    const double probabilities = 4.0 * B * H * cpu_attention::CausalBlocks(T, T).packed();
    const auto q = torch::randn({B, H, T, hd}, torch::requires_grad());
    const auto k = torch::randn({B, H, T, hd}, torch::requires_grad());
    const auto v = torch::randn({B, H, T, hd}, torch::requires_grad());
    struct Held {
      double peak, after;  ///< bytes of large blocks above those live before: at most during the call, and after it
    };
    const auto call = [&](bool backward, bool recompute) {
      std::optional<torch::NoGradGuard> no_grad;
      if (!backward) no_grad.emplace();
      std::optional<RecomputeCpuAttention> from_lse;
      if (recompute) from_lse.emplace();
      reset_cpu_peak();
      const auto before = cpu_cache_stats().live_bytes;
      const auto out = causal_attention(q, k, v);  // kept alive with what its backward holds
      const auto stats = cpu_cache_stats();
      return Held{double(stats.peak_live_bytes - before), double(stats.live_bytes - before)};
    };
    const auto kept = call(true, false), plain = call(false, false), recomputed = call(true, true);
    at::set_num_threads(threads);
    QVERIFY2(kept.after >= probabilities, qPrintable(QString::number(kept.after)));
    QVERIFY2(plain.peak < probabilities / 8 && plain.after < probabilities / 16,
             qPrintable(QString::number(plain.peak)));
    QVERIFY2(recomputed.peak < probabilities / 8 && recomputed.after < probabilities / 16,
             qPrintable(QString::number(recomputed.peak)));
  }

  void halfPrecisionAttentionRunsTheFp32Kernel_data() {
    QTest::addColumn<bool>("bf16");
    QTest::addColumn<int>("T");
    QTest::newRow("bf16") << true << 9;
    QTest::newRow("bf16, blocks") << true << 300;
    QTest::newRow("fp16") << false << 9;
  }
  void halfPrecisionAttentionRunsTheFp32Kernel() {
    // On the CPU bf16/fp16 attention is RouteLab's kernel up-cast: it computes the real rows of each compacted
    // sequence only (LibTorch's kernels would run the padded square), returns the input's type, and matches fp32
    // attention of the same (rounded) inputs to the output's rounding.
    QFETCH(bool, bf16);
    QFETCH(int, T);
    const auto type = bf16 ? torch::kBFloat16 : torch::kHalf;
    const std::vector<std::int64_t> lengths{T, T / 2};
    const auto q = torch::randn({2, 4, T, 8}).to(type).requires_grad_();
    const auto k = torch::randn({2, 2, T, 8}).to(type).requires_grad_();
    const auto v = torch::randn({2, 2, T, 8}).to(type).requires_grad_();
    double pairs = 0;
    const auto out = causal_attention(q, k, v, 0.0, false, lengths, &pairs);
    QCOMPARE(out.scalar_type(), type);
    QCOMPARE(pairs, double(T) * T + double(T / 2) * (T / 2));
    QCOMPARE(out[1].narrow(1, T / 2, T - T / 2).abs().sum().item<double>(), 0.0);  // padding rows
    const auto g = torch::randn_like(out);
    const auto grads = torch::autograd::grad({out}, {q, k, v}, {g});
    const auto fq = q.detach().select(0, 0).unsqueeze(0).to(torch::kFloat).requires_grad_();
    const auto fk = k.detach().select(0, 0).unsqueeze(0).to(torch::kFloat).requires_grad_();
    const auto fv = v.detach().select(0, 0).unsqueeze(0).to(torch::kFloat).requires_grad_();
    const auto ref = naive_attention(fq, fk, fv);
    const auto ref_grads = torch::autograd::grad({ref}, {fq, fk, fv}, {g[0].unsqueeze(0).to(torch::kFloat)});
    const double tol = bf16 ? 2e-2 : 4e-3;  // the result's rounding: 8 or 11 significant bits
    QVERIFY(torch::allclose(out[0].to(torch::kFloat), ref[0], tol, tol));
    for (int i = 0; i < 3; ++i) {
      QCOMPARE(grads[i].scalar_type(), type);
      QVERIFY(torch::allclose(grads[i][0].to(torch::kFloat), ref_grads[i][0], tol, 5 * tol));
    }
  }

  void rmsNormIsLlamas_data() {
    QTest::addColumn<bool>("bf16");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("width");
    // fp32 on the CPU: RouteLab's fused kernel (cpu_rms_norm.h); on CUDA LibTorch 2.4+'s rms_norm: the same arithmetic
    QTest::newRow("fp32") << false << 7 << 48;
    // more rows than two of the kernel's blocks for the weight's gradient, a width that is no multiple of its lanes
    QTest::newRow("fp32-rows-and-odd-width") << false << 61 << 37;
    QTest::newRow("bf16-input") << true << 7 << 48;  // Llama's order: normalised in fp32, cast back, then the weight
  }
  void rmsNormIsLlamas() {
    QFETCH(bool, bf16);
    QFETCH(int, rows);
    QFETCH(int, width);
    Norm norm(NormOptions(width).eps(1e-5));
    {
      torch::NoGradGuard no_grad;
      norm->weight.uniform_(0.5, 1.5);
    }
    const auto input = (torch::randn({3, rows, width}) * 4).to(bf16 ? torch::kBFloat16 : torch::kFloat);
    const auto upstream = torch::randn({3, rows, width});
    const auto x = input.clone().requires_grad_(), x_ref = input.clone().requires_grad_();
    const auto w_ref = norm->weight.detach().clone().requires_grad_();
    const auto out = norm(x);
    const auto xf = x_ref.to(torch::kFloat);
    const auto ref = (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-5)).to(input.scalar_type()) * w_ref;
    QCOMPARE(out.scalar_type(), ref.scalar_type());
    (out.to(torch::kFloat) * upstream).sum().backward();
    (ref.to(torch::kFloat) * upstream).sum().backward();
    const double tol = bf16 ? 1e-2 : 1e-5;
    QVERIFY(torch::allclose(out.to(torch::kFloat), ref.to(torch::kFloat), tol, tol));
    QVERIFY(torch::allclose(x.grad().to(torch::kFloat), x_ref.grad().to(torch::kFloat), tol, tol));
    QVERIFY(torch::allclose(norm->weight.grad(), w_ref.grad(), tol, tol));
    // The same bits on one thread as on several (the weight's gradient is summed over fixed blocks of rows).
    const auto threads = at::get_num_threads();
    const auto again = [&](int n) {
      at::set_num_threads(n);
      norm->zero_grad();
      const auto xn = input.clone().requires_grad_();
      const auto y = norm(xn);
      (y.to(torch::kFloat) * upstream).sum().backward();
      return std::vector<torch::Tensor>{y, xn.grad(), norm->weight.grad().clone()};
    };
    const auto one = again(1), several = again(4);
    at::set_num_threads(threads);
    for (std::size_t i = 0; i < one.size(); ++i)
      QVERIFY2(torch::equal(one[i], several[i]), qPrintable(QString::number(i)));
  }

  void deferredResidualsEqualBlockByBlock_data() { forwardShapes_data(); }
  void deferredResidualsEqualBlockByBlock() {
    // The model leaves each block's residual adds to the norms beside it (one fused pass on a GPU); its logits and
    // the layer states it reports must be those of running forward() block after block and the head after them.
    QFETCH(int, style);
    QFETCH(int, kv);
    auto o = small(ModelStyle(style), kv);
    o.n_layer(3);
    DenseTransformer model(o);
    model.eval();
    torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(0, 37, {2, 9}, torch::kLong);
    LayerStateProbe probe;
    const auto logits = model.forward(tokens).logits;
    const auto states = std::move(probe.states);
    QCOMPARE(states.size(), std::size_t(3));
    const auto params = model.named_parameters();
    const auto positions = torch::arange(9, torch::kLong);
    auto x = params["tok_emb.weight"].index_select(0, tokens.reshape({-1})).view({2, 9, 32});
    if (ModelStyle(style) == ModelStyle::GPT2) x = x + params["pos_emb.weight"].narrow(0, 0, 9);
    for (std::size_t i = 0; i < 3; ++i) {
      x = model.blocks[i]->forward(x, positions);
      QVERIFY(torch::allclose(states[i], x, 1e-6, 1e-6));
    }
    // The final norm is still at its initial ones (and zeros), as every block's norm is.
    const auto head = params.contains("lm_head.weight") ? params["lm_head.weight"] : params["tok_emb.weight"];
    QVERIFY(torch::allclose(logits, at::linear(model.blocks[0]->norm1(x), head), 1e-5, 1e-6));
  }

  void valueOnlyIsSelfAttention() {
    // A token that attends only to itself gets W_O W_V x: the same as attention over a one-token sequence.
    CausalSelfAttention attn(AttentionOptions(32, 4).n_kv_head(2).max_positions(8));
    const auto x = torch::randn({5, 1, 32});
    const auto via_attention = attn->forward(x, torch::zeros({1}, torch::kLong));
    QVERIFY(torch::allclose(attn->value_only(x), via_attention, 1e-5, 1e-6));
  }

  void ropeKeepsRelativePositions() {
    // Shifting every position by a constant leaves q.k unchanged (RoPE encodes relative distance).
    Rope rope(8, 64, 10000.0);
    const auto q = torch::randn({1, 1, 4, 8}), k = torch::randn({1, 1, 4, 8});
    const auto p0 = torch::arange(4, torch::kLong), p1 = p0 + 17;
    const auto [q0, k0] = rope.apply(q, k, p0);
    const auto [q1, k1] = rope.apply(q, k, p1);
    QVERIFY(torch::allclose(torch::matmul(q0, k0.transpose(-1, -2)), torch::matmul(q1, k1.transpose(-1, -2)), 1e-4, 1e-5));
  }

  void gpt3InitScalesResidualProjections() {
    TransformerOptions o = small(ModelStyle::GPT2);
    o.n_layer(8).n_embd(256).n_head(4);
    DenseTransformer model(o);
    const auto params = model.named_parameters();
    const double std_proj = params["blocks.0.attn.proj.weight"].std().item<double>();
    const double std_qkv = params["blocks.0.attn.qkv.weight"].std().item<double>();
    QVERIFY(std::abs(std_qkv - 0.02) < 0.002);
    QVERIFY(std::abs(std_proj - 0.02 / std::sqrt(16.0)) < 0.001);
    QCOMPARE(params["blocks.0.attn.qkv.bias"].abs().sum().item<double>(), 0.0);
    QCOMPARE(params["blocks.0.norm1.weight"].mean().item<double>(), 1.0);
  }

  void paddedHeadEqualsPlainHead() {
    // The GPU's padded LM head (vocab_logits) against the plain product: the same logits and the same gradients of
    // h and W, for a vocabulary that needs padding (GPT-2's 50257 pads by 47 to 50304; 67 by 61 to 128).
    torch::manual_seed(3);
    const auto h0 = torch::randn({2, 5, 16}), w0 = torch::randn({67, 16});
    const auto h1 = h0.clone().requires_grad_(), w1 = w0.clone().requires_grad_();
    const auto h2 = h0.clone().requires_grad_(), w2 = w0.clone().requires_grad_();
    const auto plain = at::linear(h1, w1), padded = padded_vocab_logits(h2, w2, 64);
    QCOMPARE(padded.sizes(), plain.sizes());
    QVERIFY(torch::allclose(plain, padded, 1e-6, 1e-6));
    const auto upstream = torch::randn(plain.sizes());
    (plain * upstream).sum().backward();
    (padded * upstream).sum().backward();
    QVERIFY(torch::allclose(h1.grad(), h2.grad(), 1e-6, 1e-6));
    QCOMPARE(w2.grad().sizes(), w1.grad().sizes());
    QVERIFY(torch::allclose(w1.grad(), w2.grad(), 1e-6, 1e-6));
    // The next-token loss reads the strided view as it reads contiguous logits.
    const auto target = torch::randint(0, 67, {2, 5}, torch::kLong);
    QVERIFY(torch::allclose(lm_loss(plain, target, {}), lm_loss(padded, target, {}), 1e-6, 1e-6));
  }

  void decayGroups() {
    DenseTransformer model(small(ModelStyle::GPT2));
    const auto params = model.named_parameters();
    QVERIFY(model.decays("blocks.0.attn.qkv.weight", params["blocks.0.attn.qkv.weight"]));
    QVERIFY(!model.decays("blocks.0.attn.qkv.bias", params["blocks.0.attn.qkv.bias"]));
    QVERIFY(!model.decays("blocks.0.norm1.weight", params["blocks.0.norm1.weight"]));
    QVERIFY(!model.decays("tok_emb.weight", params["tok_emb.weight"]));
    QVERIFY(!model.decays("pos_emb.weight", params["pos_emb.weight"]));
  }

  void peerParameterCount() {
    // The benchmark model must be the PyTorch peer's: 4,788,480 parameters (printed by pyref_gpt_step.py).
    TransformerOptions o;
    o.style(ModelStyle::GPT2).vocab_size(65).max_seq_len(128).n_layer(6).n_embd(256).n_head(8).d_ff(1024);
    QCOMPARE(DenseTransformer(o).parameter_count(), std::int64_t(4788480));
  }

  void schedule() {
    QCOMPARE(lr_at(0, 100, 10, 1.0, 0.1), 0.1);
    QCOMPARE(lr_at(9, 100, 10, 1.0, 0.1), 1.0);
    QVERIFY(std::abs(lr_at(10, 100, 10, 1.0, 0.1) - 1.0) < 1e-12);
    QVERIFY(std::abs(lr_at(55, 100, 10, 1.0, 0.1) - 0.55) < 1e-12);
    QVERIFY(std::abs(lr_at(100, 100, 10, 1.0, 0.1) - 0.1) < 1e-12);
  }

  void checkpointOnFullDiskIsClearError_data() {
    QTest::addColumn<bool>("background");
    QTest::newRow("written by the caller") << false;
    QTest::newRow("snapshot written on its own thread") << true;  // the error comes from finish()
  }

  void checkpointOnFullDiskIsClearError() {
    // The temporary file leads to /dev/full, where every write fails with ENOSPC: the save must end in a
    // CheckpointError naming the file (LibTorch's own writer aborted the process here), leaving no checkpoint.
    QFETCH(bool, background);
    if (!std::filesystem::exists("/dev/full")) QSKIP("no /dev/full here");
    QTemporaryDir dir;
    const auto path = dir.filePath("full.pt").toStdString();
    std::filesystem::create_symlink("/dev/full", path + ".tmp");
    DenseTransformer model(small(ModelStyle::Llama));
    torch::optim::AdamW opt(model.parameters());
    BackgroundCheckpointWriter writer;
    try {
      if (background) {
        writer.start(checkpoint_snapshot(path, model, opt, {1, 0, 0, "{}", "{}", 0, ""}));
        writer.finish();
      } else {
        save_checkpoint(path, model, opt, {1, 0, 0, "{}", "{}", 0, ""});
      }
      QFAIL("no error");
    } catch (const CheckpointError& e) {
      QVERIFY2(QString(e.what()).contains(QString::fromStdString(path + ".tmp")), e.what());
      QVERIFY2(QString(e.what()).contains(QString::fromStdString(std::strerror(ENOSPC))), e.what());
    }
    QVERIFY(!writer.busy());
    QVERIFY(!std::filesystem::exists(path));
    QVERIFY(!std::filesystem::exists(std::filesystem::symlink_status(path + ".tmp")));
    // The same path saves normally once the disk has room.
    QVERIFY(save_checkpoint(path, model, opt, {1, 0, 0, "{}", "{}", 0, ""}).bytes > 0);
    QCOMPARE(load_checkpoint(path, model, nullptr).step, std::int64_t(1));
  }

  void snapshotIsTheStateWhenTakenWhileTrainingGoesOn() {
    // A checkpoint snapshot holds the state of the step it was taken at, however far the model trained on before
    // its thread wrote it: loaded back it equals a synchronous checkpoint of that step (weights, AdamW's moments and step
    // count, the generator), and the next step from either is the same step, bit for bit.
    QTemporaryDir dir;
    const auto sync_path = dir.filePath("sync.pt").toStdString(), async_path = dir.filePath("async.pt").toStdString();
    const auto adamw = nlohmann::json::parse(R"({"lr":3e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.1})");
    torch::manual_seed(3);
    DenseTransformer model(small(ModelStyle::Llama));
    auto opt = make_optimizer(model, adamw);
    const auto x = torch::randint(0, 37, {4, 16}, torch::kLong), y = torch::randint(0, 37, {4, 16}, torch::kLong);
    for (int i = 0; i < 2; ++i) train_step(model, *opt, {x, y, {}}, 1.0, false, false);
    const CheckpointMeta meta{2, 128, 0.5, "{}", "{}", 7, "hash"};
    save_checkpoint(sync_path, model, *opt, meta);
    auto snapshot = checkpoint_snapshot(async_path, model, *opt, meta);
    for (int i = 0; i < 3; ++i) train_step(model, *opt, {x, y, {}}, 1.0, false, false);  // the originals move on
    torch::rand({4});                                                                     // and so does the generator
    BackgroundCheckpointWriter writer;
    writer.start(std::move(snapshot));
    QVERIFY_THROWS_EXCEPTION(CheckpointError, writer.start(checkpoint_snapshot(async_path, model, *opt, meta)));
    const auto written = writer.finish();
    QVERIFY(written.has_value());
    QCOMPARE(written->step, std::int64_t{2});
    QVERIFY(written->saved.bytes > 0);
    QVERIFY(!writer.busy() && !writer.finish().has_value());
    verify_checkpoint_file(async_path, written->saved.crc32);

    auto restored = [&](const std::string& path) {
      auto m = std::make_unique<DenseTransformer>(small(ModelStyle::Llama));
      auto o = make_optimizer(*m, adamw);
      const auto loaded = load_checkpoint(path, *m, o.get());
      if (loaded.step != 2 || loaded.run_id != 7 || loaded.config_hash != "hash") qWarning("meta differs");
      const auto loss = train_step(*m, *o, {x, y, {}}, 1.0, false, false).loss.item<double>();
      const auto draw = torch::rand({4}).sum().item<double>();  // the generator as restored
      return std::make_tuple(std::move(m), std::move(o), loss, draw);
    };
    const auto [a, opt_a, loss_a, draw_a] = restored(sync_path);
    const auto [b, opt_b, loss_b, draw_b] = restored(async_path);
    QCOMPARE(loss_b, loss_a);
    QCOMPARE(draw_b, draw_a);
    const auto pa = a->parameters(), pb = b->parameters(), now = model.parameters();
    QCOMPARE(pb.size(), pa.size());
    bool moved = false;
    for (std::size_t i = 0; i < pa.size(); ++i) {
      QVERIFY(torch::equal(pa[i], pb[i]));
      moved = moved || !torch::equal(pa[i], now[i]);
      const auto& sa = static_cast<torch::optim::AdamWParamState&>(*opt_a->state().at(state_key(opt_a->state(), pa[i])));
      const auto& sb = static_cast<torch::optim::AdamWParamState&>(*opt_b->state().at(state_key(opt_b->state(), pb[i])));
      QCOMPARE(sb.step(), sa.step());
      QVERIFY(torch::equal(sa.exp_avg(), sb.exp_avg()) && torch::equal(sa.exp_avg_sq(), sb.exp_avg_sq()));
    }
    QVERIFY(moved);  // the model trained on after the snapshot: its weights are not the checkpoint's
  }

  void badCheckpointIsClearError() {
    QTemporaryDir dir;
    const auto path = dir.filePath("junk.pt").toStdString();
    { std::ofstream(path) << "not a checkpoint"; }
    DenseTransformer model(small(ModelStyle::Llama));
    try {
      load_checkpoint(path, model, nullptr);
      QFAIL("no error");
    } catch (const CheckpointError& e) {
      QVERIFY2(QString(e.what()).contains(QString::fromStdString(path)), e.what());
    }
    // A checkpoint of another shape names the file too.
    const auto other = dir.filePath("other.pt").toStdString();
    TransformerOptions wide = small(ModelStyle::Llama);
    wide.n_embd(64);
    DenseTransformer big(wide);
    torch::optim::AdamW opt(big.parameters());
    save_checkpoint(other, big, opt, {1, 0, 0, "{}", "{}", 0, ""});
    QVERIFY_THROWS_EXCEPTION(CheckpointError, load_checkpoint(other, model, nullptr));
  }

  void tinyBatchOverfits() {
    DenseTransformer model(small(ModelStyle::Llama));
    auto opt = make_optimizer(model, nlohmann::json::parse(
                                         R"({"lr":3e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.0})"));
    const auto x = torch::randint(0, 37, {4, 16}, torch::kLong), y = torch::randint(0, 37, {4, 16}, torch::kLong);
    double first = 0, last = 0;
    for (int i = 0; i < 150; ++i) {
      last = train_step(model, *opt, {x, y, {}}, 1.0, false, false).loss.item<double>();
      if (i == 0) first = last;
    }
    QVERIFY2(last < 0.1 * first, qPrintable(QString("%1 -> %2").arg(first).arg(last)));
  }

  void bf16StepRuns() {
    DenseTransformer model(small(ModelStyle::Llama));
    auto opt = make_optimizer(model, nlohmann::json::parse(
                                         R"({"lr":3e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.0})"));
    const auto x = torch::randint(0, 37, {4, 16}, torch::kLong);
    const auto r = train_step(model, *opt, {x, x, {}}, 1.0, /*bf16=*/true, false);
    QVERIFY(std::isfinite(r.loss.item<double>()));
    QCOMPARE(model.parameters()[0].scalar_type(), torch::kFloat);  // master weights stay fp32
  }
};

}  // namespace test_dense_model

ROUTELAB_TEST_SUITE(test_dense_model, TestDenseModel)
#include "test_dense_model.moc"
