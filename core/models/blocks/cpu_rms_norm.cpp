// The fused CPU RMSNorm: a torch::autograd::Function whose forward writes y and one scale per row, and whose backward
// writes dx row by row and dw by blocks of rows; rows in parallel (at::parallel_for: compiled with OpenMP,
// core/CMakeLists.txt). Sums run in eight lanes so that the compiler can vectorise them.
#include "core/models/blocks/cpu_rms_norm.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace routelab {
namespace {

/// Rows whose contributions to the weight's gradient are summed together before the blocks are summed in order.
constexpr std::int64_t kRowsPerBlock = 64;
constexpr int kLanes = 8;

/// sum_j a[j] b[j] over n elements, in kLanes partial sums.
float dot(const float* a, const float* b, std::int64_t n) {
  float lanes[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += a[j + k] * b[j + k];
  float sum = 0;
  for (const float lane : lanes) sum += lane;
  for (; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

/// sum_j a[j] b[j] c[j] over n elements, in kLanes partial sums.
float dot3(const float* a, const float* b, const float* c, std::int64_t n) {
  float lanes[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += a[j + k] * b[j + k] * c[j + k];
  float sum = 0;
  for (const float lane : lanes) sum += lane;
  for (; j < n; ++j) sum += a[j] * b[j] * c[j];
  return sum;
}

class CpuRmsNormFunction : public torch::autograd::Function<CpuRmsNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    RECORD_FUNCTION("routelab::rms_norm", std::vector<c10::IValue>{});
    const auto C = weight.numel();
    const auto xc = x.contiguous(), w = weight.contiguous();
    const auto rows = C > 0 ? xc.numel() / C : 0;
    auto y = torch::empty_like(xc);
    auto scale = torch::empty({rows}, xc.options());
    const float* xp = xc.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    float* sp = scale.data_ptr<float>();
    const auto inv_c = 1.0f / static_cast<float>(C);
    const auto e = static_cast<float>(eps);
    at::parallel_for(0, rows, 16, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const float* xi = xp + i * C;
        const float r = 1.0f / std::sqrt(dot(xi, xi, C) * inv_c + e);
        sp[i] = r;
        float* yi = yp + i * C;
        for (std::int64_t j = 0; j < C; ++j) yi[j] = xi[j] * r * wp[j];
      }
    });
    ctx->save_for_backward({xc, w, scale});
    return y.view(x.sizes());
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    RECORD_FUNCTION("routelab::rms_norm_backward", std::vector<c10::IValue>{});
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1], &scale = saved[2];
    const auto g = grads[0].contiguous();
    const auto C = w.numel(), rows = scale.numel();
    const auto blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    auto dx = torch::empty_like(x);
    auto partial = torch::zeros({blocks, C}, x.options());  // each block's part of dw
    const float* xp = x.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    const float* sp = scale.data_ptr<float>();
    const float* gp = g.data_ptr<float>();
    float* dxp = dx.data_ptr<float>();
    float* pp = partial.data_ptr<float>();
    const auto inv_c = 1.0f / static_cast<float>(C);
    at::parallel_for(0, blocks, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t block = begin; block < end; ++block) {
        float* pw = pp + block * C;
        const auto last = std::min(rows, (block + 1) * kRowsPerBlock);
        for (std::int64_t i = block * kRowsPerBlock; i < last; ++i) {
          const float *xi = xp + i * C, *gi = gp + i * C;
          const float r = sp[i];
          // dx = r (g w) - x r^3 mean(g w x); dw = sum over rows of g x r
          const float d = dot3(gi, wp, xi, C) * r * r * r * inv_c;
          float* dxi = dxp + i * C;
          for (std::int64_t j = 0; j < C; ++j) {
            dxi[j] = r * gi[j] * wp[j] - xi[j] * d;
            pw[j] += gi[j] * xi[j] * r;
          }
        }
      }
    });
    auto dw = torch::zeros({C}, x.options());
    float* dwp = dw.data_ptr<float>();
    for (std::int64_t block = 0; block < blocks; ++block)  // in order: the same sum on any thread count
      for (std::int64_t j = 0; j < C; ++j) dwp[j] += pp[block * C + j];
    return {dx, dw, torch::Tensor()};
  }
};

bool fused_norm_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("ROUTELAB_CPU_FUSED_NORM");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return enabled;
}

}  // namespace

bool cpu_rms_norm_runs(const torch::Tensor& x, const torch::Tensor& weight) {
  return fused_norm_enabled() && x.device().is_cpu() && weight.device().is_cpu() &&
         x.scalar_type() == torch::kFloat && weight.scalar_type() == torch::kFloat && weight.dim() == 1 &&
         x.dim() >= 1 && x.size(-1) == weight.numel() && x.numel() > 0;
}

torch::Tensor cpu_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return CpuRmsNormFunction::apply(x, weight, eps);
}

}  // namespace routelab
