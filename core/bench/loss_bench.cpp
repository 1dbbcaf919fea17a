#include "core/bench/loss_bench.h"

#include "core/bench/bench_timing.h"
#include "core/train/fused_cross_entropy.h"
#include "core/util/device.h"
#include "core/util/errors.h"

namespace routelab {

namespace {

/// Per-row losses and the logits' gradient of one path, for upstream gradients `upstream` (rows).
struct Pass {
  torch::Tensor loss, grad;
};

template <typename Loss>
Pass run_pass(const torch::Tensor& padded, std::int64_t vocab, const torch::Tensor& target,
              const torch::Tensor& upstream, Loss loss_of) {
  const auto leaf = padded.detach().requires_grad_();
  const auto logits = leaf.narrow(1, 0, vocab);  // the LM head's view: rows padded_width apart
  auto loss = loss_of(logits, target);
  (loss * upstream).sum().backward();
  return {loss.detach(), leaf.grad().narrow(1, 0, vocab)};
}

}  // namespace

std::vector<LossBenchRow> bench_loss(const LossBenchOptions& o) {
  const auto device = resolve_device(o.device);
  if (!device.is_cuda() || !fused_cross_entropy_available())
    throw ConfigError("bench loss: needs --device cuda and a CUDA LibTorch (the fused kernels run on a GPU)");
  const auto unfused = [](const torch::Tensor& logits, const torch::Tensor& target) {
    return torch::nn::functional::cross_entropy(
        logits.to(torch::kFloat), target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  };
  const auto fused = [](const torch::Tensor& logits, const torch::Tensor& target) {
    return fused_cross_entropy_rows(logits, target);
  };
  std::vector<LossBenchRow> rows;
  for (const auto type : {torch::kFloat, torch::kBFloat16}) {
    const std::string precision = type == torch::kFloat ? "fp32" : "bf16";
    if (o.precision != "both" && o.precision != precision) continue;
    torch::manual_seed(0);
    const auto width = (o.vocab + 63) / 64 * 64;
    const auto padded = (torch::randn({o.rows, width}, torch::TensorOptions().device(device)) * 3).to(type);
    const auto target = torch::randint(0, o.vocab, {o.rows}, torch::TensorOptions().dtype(torch::kLong).device(device));
    const auto upstream = torch::full({o.rows}, 1.0 / static_cast<double>(o.rows), torch::TensorOptions().device(device));
    LossBenchRow r;
    r.precision = precision;
    const auto a = run_pass(padded, o.vocab, target, upstream, unfused);
    const auto b = run_pass(padded, o.vocab, target, upstream, fused);
    r.loss_diff = (a.loss - b.loss).abs().max().item<double>();
    const auto ga = a.grad.to(torch::kFloat), gb = b.grad.to(torch::kFloat);
    r.grad_diff = (ga - gb).abs().max().item<double>();
    r.grad_max = ga.abs().max().item<double>();
    std::vector<double> t_unfused, t_fused;  // interleaved, after warm-up
    for (std::int64_t i = 0; i < o.warmup + o.reps; ++i) {
      const double tu = time_ms([&] { run_pass(padded, o.vocab, target, upstream, unfused); }, device);
      const double tf = time_ms([&] { run_pass(padded, o.vocab, target, upstream, fused); }, device);
      if (i < o.warmup) continue;
      t_unfused.push_back(tu);
      t_fused.push_back(tf);
    }
    r.unfused_ms = median(t_unfused);
    r.fused_ms = median(t_fused);
    rows.push_back(r);
  }
  return rows;
}

}  // namespace routelab
