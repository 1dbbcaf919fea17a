// Opens libroutelab_spm.so once: ROUTELAB_SPM_MODULE when set, else the one beside the running program (or in
// ../lib/routelab), else the build tree's, else the installed one (spm_api.h says why SentencePiece is not linked
// directly).
#include <dlfcn.h>

#include <filesystem>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/data/spm_api.h"
#include "core/util/errors.h"
#include "core/data/spm_module_paths.h"  // generated: where the module is built and installed

namespace routelab {

std::string sentencepiece_unavailable() {
#ifdef __SANITIZE_ADDRESS__
  return "SentencePiece is not available in a build with AddressSanitizer: its module must be opened with "
         "RTLD_DEEPBIND, which the sanitizer's runtime refuses (google/sanitizers#611)";
#else
  return {};
#endif
}

const SpmApi& spm_api() {
  static const SpmApi* api = nullptr;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!sentencepiece_unavailable().empty()) return;  // said below, where nothing was loaded
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("ROUTELAB_SPM_MODULE"); env && *env) candidates.emplace_back(env);
    // Beside the running program (a copied binary takes its module along), then where the build and install put it.
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      const auto name = std::filesystem::path(kSpmModuleInstallPath).filename();
      candidates.push_back((exe.parent_path() / name).string());
      candidates.push_back((exe.parent_path() / ".." / "lib" / "routelab" / name).lexically_normal().string());
    }
    candidates.emplace_back(kSpmModuleBuildPath);
    candidates.emplace_back(kSpmModuleInstallPath);
    for (const auto& path : candidates) {
      if (!std::filesystem::exists(path, ec)) {
        failure += "\n  " + path + ": no such file";
        continue;
      }
      void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!handle) {
        failure += "\n  " + path + ": " + ::dlerror();
        continue;
      }
      using Entry = const SpmApi* (*)();
      auto entry = reinterpret_cast<Entry>(::dlsym(handle, "routelab_spm_api"));
      if (!entry || entry()->version != kSpmApiVersion) {
        failure += "\n  " + path + ": not RouteLab's SentencePiece module of this version";
        continue;
      }
      api = entry();  // the module stays loaded for the process's life
      return;
    }
  });
  if (api) return *api;
  if (const auto why = sentencepiece_unavailable(); !why.empty()) throw DataError(why);
  throw DataError("SentencePiece is not available: RouteLab's module libroutelab_spm.so was not found" + failure);
}

}  // namespace routelab
