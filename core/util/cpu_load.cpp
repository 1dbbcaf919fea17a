#include "core/util/cpu_load.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

namespace routelab {

std::optional<CpuTimes> read_cpu_times() {
  CpuTimes t;
  {
    std::ifstream stat("/proc/stat");
    std::string label;
    if (!(stat >> label) || label != "cpu") return std::nullopt;
    // user nice system idle iowait irq softirq steal (guest time is already inside user and nice)
    long long v[8] = {};
    for (auto& x : v)
      if (!(stat >> x)) return std::nullopt;
    t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    t.total = t.busy + v[3] + v[4];
  }
  std::ifstream self("/proc/self/stat");
  std::string line;
  if (!std::getline(self, line)) return std::nullopt;
  const auto close = line.rfind(')');  // the command name may hold spaces: count fields after it
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  t.self = utime + stime;
  return t;
}

double other_busy_cores(const CpuTimes& before, const CpuTimes& after, int cores) {
  const double wall_per_core = double(after.total - before.total) / double(std::max(1, cores));
  if (wall_per_core <= 0) return 0;
  const double others = double((after.busy - before.busy) - (after.self - before.self));
  return std::max(0.0, others / wall_per_core);
}

int threads_beside_load(int available, double other_cores) {
  const int busy = static_cast<int>(std::lround(std::max(0.0, other_cores)));
  return std::clamp(available - busy, 1, std::max(1, available));
}

}  // namespace routelab
