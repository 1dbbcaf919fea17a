# Shared compile settings: warnings, and the precompiled Torch header reused by every Torch-using target.
function(routelab_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare)
  # GCC 12 warns that "L" + std::to_string(n) overflows or overlaps inside std::string's insert wherever a unity
  # batch happens to inline it (false positives, fixed in GCC 13; which file they hit moves as files join and leave
  # a batch).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-stringop-overflow -Wno-restrict)
  endif()
endfunction()

# Targets that include <torch/torch.h> reuse the PCH built for routelab_data (20 s per TU otherwise).
function(routelab_use_torch_pch target)
  if(ROUTELAB_PCH)
    target_precompile_headers(${target} REUSE_FROM routelab_data)
    # The PCH is built -fPIC (a library); executables default to -fPIE, which would make GCC reject the PCH
    # and silently parse all of Torch again. The later -fPIC wins and still links into a PIE executable.
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
endfunction()

option(ROUTELAB_PCH "Precompile the Torch headers" ON)

# A fresh build spends most of its time parsing Torch and Qt and instantiating the same templates once per translation
# unit, even with the PCH: unity builds compile a target's sources in batches of this many per compiler call (the
# libraries, routelab-cli and the test bundles; measured 2026-11-26: routelab_ui 331 -> 192 CPU-s, the 35 core suites
# ~1000 -> ~400). 0 turns it off (quicker rebuilds of one edited file while developing). Sources with their own
# compile definitions stay on their own (CMake's rule).
set(ROUTELAB_UNITY_BATCH 8 CACHE STRING "Sources per unity translation unit (0: off)")
function(routelab_unity target)
  if(ROUTELAB_UNITY_BATCH GREATER 0)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${ROUTELAB_UNITY_BATCH})
  endif()
endfunction()

# ROUTELAB_SANITIZE=address,undefined (any list GCC's -fsanitize takes): RouteLab's own C++ built with those
# sanitizers, LibTorch, Qt and SQLite as they are; packaging/sanitize.sh builds the core and CLI so and runs the core
# suites. CUDA sources are left out (nvcc takes no -fsanitize).
set(ROUTELAB_SANITIZE "" CACHE STRING "GCC sanitizers for RouteLab's own code, e.g. address,undefined (empty: none)")
if(ROUTELAB_SANITIZE)
  # vptr checks need every class's type information, which LibTorch's and Qt's builds do not all keep. GCC 12 under
  # -fsanitize warns falsely inside libstdc++ (std::regex's std::function "may be used uninitialized", char_traits'
  # memmove "out of the bounds"): those two warnings are off in a sanitized build only.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${ROUTELAB_SANITIZE};-fno-sanitize=vptr>"
                      "$<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer;-Wno-maybe-uninitialized;-Wno-array-bounds>")
  add_link_options("-fsanitize=${ROUTELAB_SANITIZE}")
endif()
