// What the checks of D-LLM's training attention share (test_dllm on the CPU, test_gpu on a lent GPU): one form's
// output and gradients, to hold against the materialised form's.
#pragma once
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace routelab::test {

/// The output of `attention` on copies of `inputs` (q, k and v in `type`, the flags in fp32) and the gradients of
/// <output, upstream> with respect to each, all in double; zeros where an input receives no gradient.
inline std::vector<torch::Tensor> output_and_gradients(
    const std::vector<torch::Tensor>& inputs, torch::ScalarType type, const torch::Tensor& upstream,
    const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& attention) {
  std::vector<torch::Tensor> leaves;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    leaves.push_back(inputs[i].to(i < 3 ? type : torch::kFloat).clone().requires_grad_());  // never the input
  const auto out = attention(leaves);
  (out.to(torch::kDouble) * upstream).sum().backward();
  std::vector<torch::Tensor> results = {out.detach().to(torch::kDouble)};
  for (const auto& leaf : leaves)
    results.push_back(leaf.grad().defined() ? leaf.grad().to(torch::kDouble).clone() : torch::zeros_like(upstream));
  return results;
}

}  // namespace routelab::test
