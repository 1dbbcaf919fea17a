// Sub-commands that live in their own files: each add_* function declares its sub-commands on `app` (and
// `bench` for benchmarks) and, when one of them is parsed, sets `action` to the function that runs it. main()
// runs `action` inside its error boundary, so a routelab::Error prints a clear message and exits 2.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace routelab::cli {

using CommandAction = std::function<int()>;

/// `flops` (the FLOPs model: ratio versus sequence length, per-layer breakdown), `bench forward` and `bench eviction`.
void add_cost_commands(CLI::App& app, CLI::App& bench, CommandAction& action);
/// `generate`, `score`, `kv` (KV bytes versus length) and `bench decode`.
void add_generate_commands(CLI::App& app, CLI::App& bench, CommandAction& action);

/// `table` (paper tables from stored runs) and `tables` (the named layouts).
void add_report_commands(CLI::App& app, CLI::App& bench, CommandAction& action);

/// `context` (perplexity versus evaluation length, RoPE scaling) and `routing-breakdown` (routed shares by kind of token).
void add_context_commands(CLI::App& app, CLI::App& bench, CommandAction& action);

/// `tasks` (zero-shot accuracy and perplexity on task files: ARC, BoolQ, HellaSwag, PIQA, MMLU, Winogrande, ...).
void add_task_commands(CLI::App& app, CLI::App& bench, CommandAction& action);

/// `figure` (a named figure from stored runs: PDF/SVG/PNG through routelab-render, plus CSV, pgfplots and the
/// JSON sidecar) and `figures` (the catalogue).
void add_figure_commands(CLI::App& app, CLI::App& bench, CommandAction& action);

/// `tokenizer train` (a SentencePiece model from a corpus on disk), `tokenizer show`, and `prepare` (token shards).
void add_data_commands(CLI::App& app, CLI::App& bench, CommandAction& action);

/// `bench dist` (data parallel's cost per step; the commands that train take --nproc themselves).
void add_dist_commands(CLI::App& bench, CommandAction& action);

}  // namespace routelab::cli
