// routelab-cli and routelab as a user starts them: a small program without LibTorch that sets the variables the
// libraries read only when they load (core/util/process.h: OpenMP's wait policy, OpenBLAS's kernels), then starts
// the program itself (ROUTELAB_LAUNCH_PROGRAM beside it) in its place. The programs restarting themselves loaded
// Debian's LibTorch twice: 0.8 of the 1.6 s that `routelab-cli architectures` took on a 2-core AMD EPYC
// (packaging/probes/startup.sh).
#include <dlfcn.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

#include "core/util/process.h"

namespace {

/// The kernels the BLAS that the program loads would choose ("" where it is not OpenBLAS or cannot be loaded).
std::string openblas_chose() {
#ifdef ROUTELAB_LAUNCH_BLAS
  void* blas = ::dlopen(ROUTELAB_LAUNCH_BLAS, RTLD_LAZY | RTLD_LOCAL);
  if (blas == nullptr) return "";
  using Corename = char* (*)();
  const auto get = reinterpret_cast<Corename>(::dlsym(blas, "openblas_get_corename"));
  const char* name = get ? get() : nullptr;
  return name ? name : "";
#else
  return "";  // this build's LibTorch brings its own BLAS (PyPI's: MKL)
#endif
}

}  // namespace

int main(int /*argc*/, char** argv) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto program = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / ROUTELAB_LAUNCH_PROGRAM;
  routelab::StartupSettings settings;
  if (std::getenv("ROUTELAB_RELAUNCHED") == nullptr)
    settings = routelab::startup_settings(routelab::passive_openmp_build(), openblas_chose());
  routelab::exec_with_settings(program.string(), argv, settings);
  std::cerr << "routelab: cannot start " << program.string() << ": " << std::strerror(errno) << "\n";
  return 127;
}
