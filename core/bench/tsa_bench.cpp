// PLACEHOLDER (being written): TSA sparse-inference wall-clock bench.
#include "core/bench/tsa_bench.h"
