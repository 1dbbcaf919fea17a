// PLACEHOLDER (being written): TSA sparse-inference wall-clock bench.
#pragma once
