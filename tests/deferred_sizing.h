// The check the suites of the models that size routed rows from earlier forwards (D-LLM, MoD, TSA) share: their
// untraced forward under DeferredTraceReadback, as a CUDA graph captures it, settles its rows only afterwards.
#pragma once
#include <QtTest>

#include <functional>

#include <torch/torch.h>

#include "core/models/language_model.h"

namespace routelab::test {

/// `model`'s untraced forward of `tokens` under DeferredTraceReadback reads nothing during the forward: it equals
/// `expected` (within 1e-5) with its overflow flag 0 and check_shapes reporting no overflow; after `shrink` leaves a
/// layer's rows too few, the flag is 1 and check_shapes reports the overflow. The caller checks what `shrink` set.
inline void check_deferred_sizing(LanguageModel& model, const torch::Tensor& tokens, const torch::Tensor& expected,
                                  const std::function<void()>& shrink) {
  const auto deferred = [&] {
    const DeferredTraceReadback on_device;
    return model.forward(tokens);
  };
  const auto fits = deferred();
  QVERIFY(torch::allclose(fits.logits, expected, 1e-5, 1e-5));
  QCOMPARE(fits.overflow.item<float>(), 0.0f);
  QVERIFY(!fits.check_shapes().overflowed);
  shrink();
  const auto over = deferred();
  QCOMPARE(over.overflow.item<float>(), 1.0f);
  QVERIFY(over.check_shapes().overflowed);
}

}  // namespace routelab::test
