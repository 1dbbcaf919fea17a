// profile_calls: one OpClassProfiler (the host) or KernelProfiler (a GPU) per profiled call, medians by class and by
// part, the lists by name from the last call.
#include "core/bench/call_profile.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <vector>

#include "core/bench/bench_timing.h"
#include "core/bench/kernel_profile.h"
#include "core/cost/flop_counter.h"

namespace routelab {
namespace {

/// Each part's pieces of work, longest first.
std::map<std::string, std::vector<CallProfile::Piece>> sorted_pieces(
    const std::map<std::string, std::map<std::string, PartTime>>& pieces) {
  std::map<std::string, std::vector<CallProfile::Piece>> out;
  for (const auto& [part, by_name] : pieces) {
    auto& list = out[part];
    for (const auto& [name, t] : by_name) list.push_back({name, t.forward_ms, t.backward_ms, t.calls()});
    std::stable_sort(list.begin(), list.end(), [](const CallProfile::Piece& a, const CallProfile::Piece& b) {
      return a.forward_ms + a.backward_ms > b.forward_ms + b.backward_ms;
    });
  }
  return out;
}

}  // namespace

bool kernel_breakdowns(const torch::Device& device) {
  return device.is_cuda() && kernel_profiling_unavailable().empty();
}

CallProfile profile_calls(const std::function<void()>& run, const torch::Device& device, int runs, int top) {
  std::map<std::string, std::vector<double>> samples;
  std::map<std::string, std::array<std::vector<double>, 4>> part_samples;  // ms and calls, forward and backward
  const auto add_parts = [&](const std::map<std::string, PartTime>& parts) {
    for (const auto& [name, t] : parts) {
      auto& s = part_samples[name];
      const double values[] = {t.forward_ms, t.backward_ms, t.forward_calls, t.backward_calls};
      for (std::size_t i = 0; i < s.size(); ++i) s[i].push_back(values[i]);
    }
  };
  std::vector<double> launches;
  CallProfile out;
  for (int r = 0; r < runs; ++r) {
    synchronize(device);
    if (kernel_breakdowns(device)) {
      KernelProfiler profiler(true);
      run();
      synchronize(device);
      const auto p = profiler.stop();
      for (const auto& [k, v] : p.classes_ms()) samples[k].push_back(v);
      add_parts(p.parts);
      if (top > 0) out.part_pieces = sorted_pieces(p.part_pieces);  // the last call's
      double calls = 0;
      for (const auto& k : p.kernels) calls += static_cast<double>(k.calls);
      launches.push_back(calls);
      out.top_kernels.clear();  // the last call's
      for (std::size_t i = 0; i < p.kernels.size() && i < static_cast<std::size_t>(std::max(0, top)); ++i)
        out.top_kernels.push_back({p.kernels[i].name, p.kernels[i].ms, p.kernels[i].calls});
      continue;
    }
    OpClassProfiler profiler;
    run();
    synchronize(device);
    profiler.stop();
    for (const auto& [k, v] : profiler.classes_ms()) samples[k].push_back(v);
    add_parts(profiler.parts_ms());
    if (top > 0) out.part_pieces = sorted_pieces(profiler.part_pieces());  // the last call's
    launches.push_back(static_cast<double>(profiler.ops()));
    out.host_ops.clear();  // the last call's
    if (top > 0)
      for (const auto& [name, tally] : profiler.ops_by_name()) out.host_ops.push_back({name, tally.ms, tally.calls});
  }
  for (auto& [k, v] : samples) {
    v.resize(static_cast<std::size_t>(runs), 0.0);  // a class absent from a forward took 0 ms there
    out.classes_ms.emplace_back(k, median(v));
  }
  for (auto& [name, s] : part_samples) {  // a part absent from a call took 0 ms there
    for (auto& v : s) v.resize(static_cast<std::size_t>(runs), 0.0);
    out.parts_ms[name] = {median(s[0]), median(s[1]), median(s[2]), median(s[3])};
  }
  out.launches = median(launches);
  return out;
}

}  // namespace routelab
