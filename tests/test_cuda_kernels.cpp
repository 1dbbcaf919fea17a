// RouteLab's CUDA kernels, run on the CPU through tests/cuda_emulation/ (every thread of a block a thread, barriers
// for __syncthreads and the warp shuffles): the fused next-token loss, the fused (gated) add + norm and the rotary
// embedding, forward and backward, against references computed in double, at widths that leave threads idle, give
// each thread several elements and end mid-block, with rows enough for several weight-gradient slices. On a GPU,
// packaging/gpu-check.sh compares the same kernels with LibTorch's paths (bench loss; fused-norm-equals-unfused,
// fused-rope-equals-unfused).
#include <QtTest>

#include <torch/torch.h>

#include <cmath>

#include "core/models/blocks/cuda/norm_kernels.h"
#include "core/models/blocks/fused_norm.h"
#include "core/models/blocks/fused_rope.h"
#include "core/train/cuda/cross_entropy_kernels.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_cuda_kernels {

using namespace routelab;

namespace {

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

/// The largest difference in units of bf16's last place at the reference's magnitude (0: bit for bit).
double bf16_ulps(const torch::Tensor& got, const torch::Tensor& reference) {
  const auto r = reference.to(torch::kDouble);
  const auto ulp = torch::exp2(torch::floor(torch::log2(r.abs().clamp_min(1e-30))) - 7);
  return ((got.to(torch::kDouble) - r).abs() / ulp).max().item<double>();
}

/// RoPE tables as core/models/blocks/rope.h builds them: angles (P, hd/2) twice, fp32.
std::pair<torch::Tensor, torch::Tensor> rope_tables(std::int64_t P, std::int64_t hd) {
  const auto inv_freq = torch::pow(10000.0, -torch::arange(0, hd, 2, torch::kDouble) / static_cast<double>(hd));
  const auto angles = torch::outer(torch::arange(P, torch::kDouble), inv_freq);
  const auto full = torch::cat({angles, angles}, -1);
  return {full.cos().to(torch::kFloat), full.sin().to(torch::kFloat)};
}

/// "Rotate half" in double: x cos + (-x2, x1) sin, tables gathered at positions (T) or (B, T).
torch::Tensor reference_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                             const torch::Tensor& positions) {
  const auto hd = x.size(3), half = hd / 2;
  auto c = cos.to(torch::kDouble).index_select(0, positions.reshape({-1}));
  auto s = sin.to(torch::kDouble).index_select(0, positions.reshape({-1}));
  const std::vector<std::int64_t> shape =
      positions.dim() == 1 ? std::vector<std::int64_t>{1, 1, positions.size(0), hd}
                           : std::vector<std::int64_t>{positions.size(0), 1, positions.size(1), hd};
  c = c.view(shape);
  s = s.view(shape);
  const auto xd = x.to(torch::kDouble);
  return xd * c + torch::cat({-xd.narrow(3, half, half), xd.narrow(3, 0, half)}, 3) * s;
}

/// LayerNorm (or RMSNorm) of s in double: (s - mean) / sqrt(var + eps) * w + b, the biased variance.
torch::Tensor reference_norm(const torch::Tensor& s, const torch::Tensor& w, const torch::Tensor& b, double eps,
                             bool rms) {
  const auto mean = rms ? torch::zeros_like(s.select(-1, 0)).unsqueeze(-1) : s.mean(-1, true);
  const auto centred = s - mean;
  const auto var = rms ? (s * s).mean(-1, true) : (centred * centred).mean(-1, true);
  auto out = centred / torch::sqrt(var + eps) * w;
  return b.defined() ? out + b : out;
}

}  // namespace

class TestCudaKernels : public QObject {
  Q_OBJECT

 private slots:
  void crossEntropyMatchesLogSoftmax() {
    // V 1000 (not a multiple of the 512 threads), rows stored 1024 apart, a masked logit, a target outside [0, V).
    torch::manual_seed(1);
    const std::int64_t rows = 3, V = 1000, stride = 1024;
    for (const auto type : {torch::kFloat, torch::kBFloat16}) {
      auto storage = (torch::randn({rows, stride}) * 4).to(type);
      storage[1][7] = -std::numeric_limits<float>::infinity();
      const auto logits = storage.narrow(1, 0, V);
      const auto target = torch::tensor({5, 999, 1000}, torch::kLong);
      auto loss = torch::empty({rows}), lse = torch::empty({rows});
      const auto kind = type == torch::kFloat ? cuda::LogitsType::Float32 : cuda::LogitsType::BFloat16;
      QCOMPARE(std::string(cuda::cross_entropy_forward(storage.data_ptr(), kind, rows, V, stride,
                                                       target.data_ptr<std::int64_t>(), loss.data_ptr<float>(),
                                                       lse.data_ptr<float>(), nullptr)),
               std::string());
      const auto x = logits.to(torch::kDouble);
      const auto ref_lse = torch::logsumexp(x, 1);
      QVERIFY(max_abs_diff(lse, ref_lse) < 1e-4);
      QVERIFY(max_abs_diff(loss.narrow(0, 0, 2), ref_lse.narrow(0, 0, 2) - x.gather(1, target.narrow(0, 0, 2).unsqueeze(1)).squeeze(1)) < 1e-4);
      QVERIFY(std::isnan(loss[2].item<float>()));

      const auto grad_loss = torch::tensor({1.0f, -0.5f, 0.0f});
      auto grad = torch::full({rows, V}, 7.0).to(type);
      QCOMPARE(std::string(cuda::cross_entropy_backward(storage.data_ptr(), kind, rows, V, stride,
                                                        target.data_ptr<std::int64_t>(), lse.data_ptr<float>(),
                                                        grad_loss.data_ptr<float>(), grad.data_ptr(), V, nullptr)),
               std::string());
      auto expected = torch::softmax(x, 1);
      for (std::int64_t r = 0; r < 2; ++r) expected[r][target[r].item<std::int64_t>()] -= 1.0;
      expected = expected * grad_loss.to(torch::kDouble).unsqueeze(1);
      const double tolerance = type == torch::kFloat ? 1e-6 : 4e-3;  // bf16: the gradient's own rounding
      QVERIFY2(max_abs_diff(grad.narrow(0, 0, 2), expected.narrow(0, 0, 2)) < tolerance,
               c10::toString(type));
      QCOMPARE(grad[1][7].item<float>(), 0.0f);  // a masked logit has probability 0
    }
  }

  void addNormForwardMatchesReference() {
    torch::manual_seed(2);
    for (const bool rms : {false, true})
      for (const std::int64_t C : {64, 300, 1000})
        for (const auto y_type : {torch::kFloat, torch::kBFloat16})
          for (const auto out_type : {torch::kFloat, torch::kBFloat16}) {
            const auto x = torch::randn({2, 3, C}) * 3 + 1;
            const auto y = torch::randn({2, 3, C}).to(y_type);
            const auto w = torch::rand({C}) + 0.5;
            const auto b = rms ? torch::Tensor() : torch::randn({C});
            const FusedNormSpec spec{w, b, 1e-5, rms, out_type};
            const auto [sum, out] = fused_add_norm(x, y, spec);
            const auto s_ref = x.to(torch::kDouble) + y.to(torch::kDouble);
            const auto expected = reference_norm(s_ref, w.to(torch::kDouble),
                                                 b.defined() ? b.to(torch::kDouble) : torch::Tensor(), 1e-5, rms);
            const auto label = QString("rms %1 C %2 y %3 out %4")
                                   .arg(rms)
                                   .arg(C)
                                   .arg(c10::toString(y_type))
                                   .arg(c10::toString(out_type))
                                   .toStdString();
            QVERIFY2(sum.scalar_type() == torch::kFloat && max_abs_diff(sum, s_ref) < 1e-5, label.c_str());
            QVERIFY2(out.scalar_type() == out_type, label.c_str());
            if (out_type == torch::kFloat)
              QVERIFY2(max_abs_diff(out, expected) < 2e-5, label.c_str());
            else  // rounded once from fp32 arithmetic: at most one bf16 place off the rounded reference
              QVERIFY2(bf16_ulps(out, expected) <= 1.0, label.c_str());
            // Without y: the norm of x alone.
            const auto alone = fused_norm(x, spec);
            const auto expected_alone = reference_norm(x.to(torch::kDouble), w.to(torch::kDouble),
                                                       b.defined() ? b.to(torch::kDouble) : torch::Tensor(), 1e-5, rms);
            QVERIFY2(out_type == torch::kFloat ? max_abs_diff(alone, expected_alone) < 2e-5
                                               : bf16_ulps(alone, expected_alone) <= 1.0,
                     label.c_str());
          }
  }

  void addNormBackwardMatchesAutograd() {
    // 260 rows: three weight-gradient slices (87, 87, 86); C 136: a partial column block. Both outputs feed the loss,
    // as in a block where s continues the residual stream and norm(s) enters the next matrix product. Gated,
    // s = x + g y with one gate per row (a router's score on a token's update), the gate's gradient is checked too.
    torch::manual_seed(3);
    for (const bool gated : {false, true})
      for (const bool rms : {false, true})
        for (const auto y_type : {torch::kFloat, torch::kBFloat16})
          for (const auto out_type : {torch::kFloat, torch::kBFloat16}) {
            const bool big = rms == gated && y_type == torch::kBFloat16 && out_type == torch::kBFloat16;
            const std::int64_t rows = big ? 260 : 5, C = big ? 136 : 96;
            const auto x0 = torch::randn({rows, C}) * 2, y0 = torch::randn({rows, C}).to(y_type);
            const auto g0 = gated ? torch::rand({rows}) : torch::Tensor();
            const auto w0 = torch::rand({C}) + 0.5, b0 = rms ? torch::Tensor() : torch::randn({C});
            const auto r_out = torch::randn({rows, C}), r_sum = torch::randn({rows, C});
            auto x = x0.clone().requires_grad_(), y = y0.clone().requires_grad_(), w = w0.clone().requires_grad_();
            auto g = gated ? g0.clone().requires_grad_() : torch::Tensor();
            auto b = rms ? torch::Tensor() : b0.clone().requires_grad_();
            const auto [sum, out] = fused_add_norm(x, y, FusedNormSpec{w, b, 1e-5, rms, out_type}, g);
            ((out.to(torch::kFloat) * r_out).sum() + (sum * r_sum).sum()).backward();

            auto xd = x0.to(torch::kDouble).requires_grad_(), yd = y0.to(torch::kDouble).requires_grad_();
            auto gd = gated ? g0.to(torch::kDouble).requires_grad_() : torch::Tensor();
            auto wd = w0.to(torch::kDouble).requires_grad_();
            auto bd = rms ? torch::Tensor() : b0.to(torch::kDouble).requires_grad_();
            const auto sd = gated ? xd + gd.unsqueeze(-1) * yd : xd + yd;
            auto outd = reference_norm(sd, wd, bd, 1e-5, rms);
            // The fused backward reads the output's gradient in the output's type, as autograd hands it over.
            const auto g_out = r_out.to(out_type).to(torch::kDouble);
            ((outd * g_out).sum() + (sd * r_sum.to(torch::kDouble)).sum()).backward();

            const auto label = QString("gated %1 rms %2 y %3 out %4 rows %5")
                                   .arg(gated)
                                   .arg(rms)
                                   .arg(c10::toString(y_type))
                                   .arg(c10::toString(out_type))
                                   .arg(rows)
                                   .toStdString();
            QVERIFY2(max_abs_diff(sum, sd) < 1e-5, label.c_str());
            QVERIFY2(out_type == torch::kFloat ? max_abs_diff(out, outd) < 2e-5 : bf16_ulps(out, outd) <= 1.0,
                     label.c_str());
            QVERIFY2(x.grad().scalar_type() == torch::kFloat && y.grad().scalar_type() == y_type, label.c_str());
            const auto scale = xd.grad().abs().max().item<double>();
            QVERIFY2(max_abs_diff(x.grad(), xd.grad()) < 1e-5 * scale, label.c_str());
            if (y_type == torch::kFloat)
              QVERIFY2(max_abs_diff(y.grad(), yd.grad()) < 1e-5 * scale, label.c_str());
            else
              QVERIFY2(bf16_ulps(y.grad(), yd.grad()) <= 1.0, label.c_str());
            if (gated)
              QVERIFY2(g.grad().scalar_type() == torch::kFloat &&
                           max_abs_diff(g.grad(), gd.grad()) < 1e-5 * gd.grad().abs().max().item<double>(),
                       label.c_str());
            const auto w_scale = wd.grad().abs().max().item<double>();
            QVERIFY2(max_abs_diff(w.grad(), wd.grad()) < 1e-5 * w_scale, label.c_str());
            if (!rms)
              QVERIFY2(max_abs_diff(b.grad(), bd.grad()) < 1e-5 * bd.grad().abs().max().item<double>(), label.c_str());
          }
  }

  void addNormSumOnlyPassesTheGradientThrough() {
    const auto x = torch::randn({4, 64}).requires_grad_(), y = torch::randn({4, 64}).requires_grad_();
    const auto w = torch::ones({64}).requires_grad_();
    const auto [sum, out] = fused_add_norm(x, y, FusedNormSpec{w, {}, 1e-5, true, torch::kFloat});
    (sum * 3).sum().backward();
    QCOMPARE(max_abs_diff(x.grad(), torch::full({4, 64}, 3.0)), 0.0);
    QCOMPARE(max_abs_diff(y.grad(), torch::full({4, 64}, 3.0)), 0.0);
    QVERIFY(!w.grad().defined() || w.grad().abs().max().item<double>() == 0.0);
    // Gated: the gradient reaches x, y (scaled by the gate) and the gate, not the weight.
    const auto xg = torch::randn({4, 64}).requires_grad_(), yg = torch::randn({4, 64}).requires_grad_();
    const auto g = torch::rand({4}).requires_grad_(), wg = torch::ones({64}).requires_grad_();
    (fused_add_norm(xg, yg, FusedNormSpec{wg, {}, 1e-5, true, torch::kFloat}, g).first * 3).sum().backward();
    QCOMPARE(max_abs_diff(xg.grad(), torch::full({4, 64}, 3.0)), 0.0);
    QVERIFY(max_abs_diff(yg.grad(), 3 * g.detach().unsqueeze(-1).expand({4, 64})) < 1e-6);
    QVERIFY(max_abs_diff(g.grad(), 3 * yg.detach().sum(-1)) < 1e-4);
  }

  void noRowsGiveZeroGradients() {  // a compacted batch where no token runs the block
    const auto x = torch::randn({2, 0, 32}).requires_grad_(), y = torch::randn({2, 0, 32}).requires_grad_();
    const auto w = torch::ones({32}).requires_grad_(), b = torch::zeros({32}).requires_grad_();
    const auto [sum, out] = fused_add_norm(x, y, FusedNormSpec{w, b, 1e-5, false, torch::kBFloat16});
    QCOMPARE(out.numel(), 0);
    ((out.to(torch::kFloat) * 2).sum() + sum.sum()).backward();
    QCOMPARE(w.grad().abs().sum().item<double>(), 0.0);
    QCOMPARE(b.grad().abs().sum().item<double>(), 0.0);
  }

  void ropeMatchesRotateHalf() {
    // q read where the projection leaves it: a (B, H, T, hd) view of the fused QKV rows; positions shared (T) or
    // per sequence (B, T), as compacted routed rows have. hd 12: pairs that do not fill a warp's worth of lanes.
    torch::manual_seed(4);
    const std::int64_t B = 2, T = 7, H = 3, hd = 12, P = 40;
    const auto [cos, sin] = rope_tables(P, hd);
    for (const auto type : {torch::kFloat, torch::kBFloat16})
      for (const bool per_sequence : {false, true}) {
        const auto label = QString("%1 per sequence %2").arg(c10::toString(type)).arg(per_sequence).toStdString();
        const auto positions = per_sequence ? std::get<0>(torch::randperm(P).narrow(0, 0, B * T).view({B, T}).sort(1))
                                            : torch::arange(3, 3 + T, torch::kLong);
        auto qkv = torch::randn({B, T, 3 * H * hd}).to(type).requires_grad_();
        const auto q = qkv.narrow(2, 0, H * hd).view({B, T, H, hd}).transpose(1, 2);  // (B, H, T, hd), strided
        const auto out = fused_rope(q, cos, sin, positions.contiguous());
        QVERIFY2(out.is_contiguous() && out.scalar_type() == type, label.c_str());
        const auto expected = reference_rope(q, cos, sin, positions);
        if (type == torch::kFloat)
          QVERIFY2(max_abs_diff(out, expected) < 1e-5, label.c_str());
        else
          QVERIFY2(bf16_ulps(out, expected) <= 1.0, label.c_str());
        // Backward: the rotation reversed, into the view's rows of the QKV gradient (the rest untouched: zero).
        const auto upstream = torch::randn({B, H, T, hd});
        (out.to(torch::kFloat) * upstream).sum().backward();
        auto qd = q.detach().to(torch::kDouble).requires_grad_();
        (reference_rope(qd, cos, sin, positions) * upstream.to(type).to(torch::kDouble)).sum().backward();
        const auto grad_q = qkv.grad().narrow(2, 0, H * hd).view({B, T, H, hd}).transpose(1, 2);
        if (type == torch::kFloat)
          QVERIFY2(max_abs_diff(grad_q, qd.grad()) < 1e-5, label.c_str());
        else
          QVERIFY2(bf16_ulps(grad_q, qd.grad()) <= 1.0, label.c_str());
        QCOMPARE(qkv.grad().narrow(2, H * hd, 2 * H * hd).abs().max().item<double>(), 0.0);
      }
    QVERIFY(test::error_of<ConfigError>([&] { fused_rope(torch::ones({1, 1, 2, 5}), cos, sin, torch::arange(2)); })
                .find("even width") != std::string::npos);
  }

  void badInputsAreRefusedByName() {
    const auto w = torch::ones({8});
    const FusedNormSpec spec{w, {}, 1e-5, false, torch::kFloat};
    QVERIFY(test::error_of<ConfigError>([&] { fused_norm(torch::ones({2, 8}, torch::kDouble), spec); })
                .find("fp32 rows") != std::string::npos);
    QVERIFY(test::error_of<ConfigError>([&] { fused_add_norm(torch::ones({2, 8}), torch::ones({2, 4}), spec); })
                .find("x's shape") != std::string::npos);
    QVERIFY(test::error_of<ConfigError>([&] { fused_norm(torch::ones({2, 6}), spec); }).find("width") !=
            std::string::npos);
    QVERIFY(test::error_of<ConfigError>([&] {
              fused_add_norm(torch::ones({2, 8}), torch::ones({2, 8}), spec, torch::ones({3}));
            }).find("gate") != std::string::npos);
    const FusedNormSpec rms_with_bias{w, torch::zeros({8}), 1e-5, true, torch::kFloat};
    QVERIFY(test::error_of<ConfigError>([&] { fused_norm(torch::ones({2, 8}), rms_with_bias); }).find("no bias") !=
            std::string::npos);
  }
};

}  // namespace test_cuda_kernels

ROUTELAB_TEST_SUITE(test_cuda_kernels, TestCudaKernels)
#include "test_cuda_kernels.moc"
