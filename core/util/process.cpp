// The restart happens before anything else runs, so nothing is done twice.
#include "core/util/process.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace routelab {

#ifdef ROUTELAB_PASSIVE_OPENMP
void relaunch_with_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("ROUTELAB_RELAUNCHED") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::setenv("ROUTELAB_RELAUNCHED", "1", 1);  // never twice, whatever happens to the variable
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OMP_WAIT_POLICY");  // exec failed: go on as started, with the default policy
}
#else
void relaunch_with_passive_openmp(char**) {}  // this LibTorch keeps OpenMP's default (ROUTELAB_PASSIVE_OPENMP)
#endif

std::string openmp_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  if (policy == nullptr || *policy == '\0') return "default (active spinning)";
  std::string s = policy;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace routelab
