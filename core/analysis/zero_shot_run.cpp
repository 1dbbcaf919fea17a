#include "core/analysis/zero_shot_run.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <sstream>

#include "core/analysis/run_analysis.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/paths.h"

namespace routelab {
namespace {

std::string with_stderr(double value, double err) {
  if (!std::isfinite(value)) return "-";
  return std::isfinite(err) ? fmt::format("{:.4f} ± {:.4f}", value, err) : fmt::format("{:.4f}", value);
}

std::string number(double value, const char* format = "{:.3f}") {
  return std::isfinite(value) ? fmt::format(fmt::runtime(format), value) : "-";
}

}  // namespace

std::vector<ZeroShotTask> read_tasks(const ZeroShotOptions& options) {
  if (options.tasks.empty()) throw ConfigError("--task: give at least one task file");
  const auto named = [&](const std::string& name) {
    return std::count_if(options.tasks.begin(), options.tasks.end(), [&](const TaskSpec& t) { return t.name == name; });
  };
  for (const auto& spec : options.tasks)
    if (named(spec.name) > 1) throw ConfigError("--task: two tasks named '" + spec.name + "' (name one NAME=FILE)");
  for (const auto& f : options.fewshot_from)
    if (named(f.name) == 0) throw ConfigError("--fewshot-from: no task named '" + f.name + "' (" + f.path + ")");
  std::vector<ZeroShotTask> tasks;
  for (const auto& spec : options.tasks) {
    tasks.push_back(read_task(spec, options.limit));
    if (options.fewshot <= 0) continue;
    const auto from = std::find_if(options.fewshot_from.begin(), options.fewshot_from.end(),
                                   [&](const TaskSpec& f) { return f.name == spec.name; });
    const bool same_file = from == options.fewshot_from.end();
    TaskSpec pool = same_file ? spec : *from;  // the task's own file read whole, or its few-shot file
    if (pool.format.empty()) pool.format = tasks.back().format;
    tasks.back() = with_few_shot(tasks.back(), read_task(pool), same_file, options.fewshot, options.fewshot_seed);
  }
  return tasks;
}

ZeroShotReport evaluate_zero_shot(const std::string& db_path, std::int64_t run_id, const ZeroShotOptions& options) {
  return evaluate_zero_shot(db_path, run_id, read_tasks(options), options);
}

ZeroShotReport evaluate_zero_shot(const std::string& db_path, std::int64_t run_id,
                                  const std::vector<ZeroShotTask>& tasks, const ZeroShotOptions& options) {
  auto run = load_run(db_path, run_id, options.sets, options.step, RunData::Tokenizer);
  ZeroShotReport report;
  report.run_id = run.run_id;
  report.db_path = run.db_path;
  report.name = run.name;
  report.arch = run.config.arch();
  report.step = run.step;
  report.sets = options.sets;
  report.max_length = options.max_length > 0 ? options.max_length : run.config.data().at("context").get<std::int64_t>();
  const auto& model = run.config.model();
  const auto positions = model.contains("max_seq_len") ? model.at("max_seq_len").get<std::int64_t>() : 0;
  const bool learned = model.contains("style") && model.at("style") == "gpt2";
  if (learned && positions > 0 && report.max_length > positions)
    throw ConfigError(fmt::format("--max-length: {} exceeds run {}'s {} learned positions (model.max_seq_len)",
                                  report.max_length, run_id, positions));
  report.batch_size =
      options.batch_size > 0 ? options.batch_size : run.config.train().at("batch_size").get<std::int64_t>();
  ScoringOptions scoring;
  scoring.max_length = report.max_length;
  scoring.batch_size = report.batch_size;
  scoring.device = run.device;
  scoring.bf16 = run.bf16;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (options.progress)
      scoring.progress = [&options, i](std::int64_t scored, std::int64_t total) { options.progress(i, scored, total); };
    report.tasks.push_back(evaluate_task(*run.model, run.tokenizer(), tasks[i], scoring));
  }
  return report;
}

std::vector<std::int64_t> steps_to_score(const std::string& db_path, std::int64_t run_id, bool every_checkpoint,
                                         std::int64_t step) {
  if (!every_checkpoint) return {step};
  const RunStore store(db_path.empty() ? default_db_path() : db_path, /*mark_crashed=*/false);
  std::vector<std::int64_t> steps;
  for (const auto& c : store.checkpoints(run_id)) steps.push_back(c.step);
  std::sort(steps.begin(), steps.end());
  if (steps.empty()) steps = {0};  // none kept: scoring the latest names the run
  return steps;
}

void store_zero_shot(const std::string& db_path, const ZeroShotReport& report) {
  RunStore store(db_path.empty() ? default_db_path() : db_path, /*mark_crashed=*/false);
  const double now = static_cast<double>(std::time(nullptr));
  std::vector<MetricRow> rows;
  for (const auto& task : report.tasks)
    for (const auto& [measure, value] : task_metrics(task))
      rows.push_back({"task/" + task.name + "/" + measure, report.step, now, value});
  store.replace_metrics(report.run_id, rows);
  for (const auto& task : report.tasks) {
    auto doc = task.to_json();
    doc["answers"] = task.answers_json();  // each example's, for pairs read back without scoring (stored_zero_shot)
    doc["step"] = report.step;
    doc["max_length"] = report.max_length;
    doc["sets"] = report.sets;
    store.put_analysis(report.run_id, "zero-shot", task.name, report.step, doc.dump());
  }
}

ZeroShotReport stored_zero_shot(const std::string& db_path, std::int64_t run_id,
                                const std::vector<std::string>& names) {
  const std::string path = db_path.empty() ? default_db_path() : db_path;
  RunStore store(path, /*mark_crashed=*/false);
  const auto run = store.run(run_id);
  if (!run) throw ConfigError("run " + std::to_string(run_id) + " is not in " + path);
  ZeroShotReport report;
  report.run_id = run_id;
  report.db_path = path;
  report.name = run->name;
  report.arch = run->arch;
  for (const auto& row : store.analyses(run_id, "zero-shot")) {
    if (!names.empty() && std::find(names.begin(), names.end(), row.key) == names.end()) continue;
    const std::string where = "run " + std::to_string(run_id) + ", stored task " + row.key;
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(row.document);
    } catch (const nlohmann::json::exception& e) {
      throw DataError(where + ": not JSON (" + e.what() + ")");
    }
    report.tasks.push_back(TaskResult::from_json(doc, where));
    report.task_steps.push_back(row.step);
    report.step = std::max(report.step, row.step);
    report.max_length = doc.value("max_length", report.max_length);
  }
  if (report.tasks.empty())
    throw ConfigError("run " + std::to_string(run_id) + " has no stored task results" +
                      (names.empty() ? "" : " of those names") + " (score it with `tasks --store` first)");
  return report;
}

nlohmann::json ZeroShotReport::to_json() const {
  nlohmann::json out = {{"run", run_id},
                        {"name", name},
                        {"arch", arch},
                        {"step", step},
                        {"max_length", max_length},
                        {"batch_size", batch_size},
                        {"sets", sets},
                        {"tasks", nlohmann::json::array()}};
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    out["tasks"].push_back(tasks[i].to_json());
    if (i < task_steps.size()) out["tasks"].back()["step"] = task_steps[i];
  }
  return out;
}

std::string ZeroShotReport::to_table() const {
  std::ostringstream out;
  const auto shots = tasks.empty() ? std::int64_t{0} : tasks.front().shots;
  out << "run " << run_id << " " << name << " (" << arch << "), "
      << (task_steps.empty() ? "checkpoint step " : "stored results, the latest at step ") << step << ", "
      << (shots > 0 ? std::to_string(shots) + "-shot" : std::string("zero-shot")) << ", " << max_length
      << " tokens at most, inference mode\n";
  out << "| task | format | examples | acc | acc_norm | ppl | word ppl | bits/byte | FLOPs ratio | routed | s |\n"
      << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& t : tasks)
    out << "| " << t.name << " | " << t.format << " | " << t.examples << " | " << with_stderr(t.acc, t.acc_stderr)
        << " | " << with_stderr(t.acc_norm, t.acc_norm_stderr) << " | " << number(t.perplexity, "{:.2f}") << " | "
        << number(t.word_perplexity, "{:.2f}") << " | " << number(t.bits_per_byte, "{:.4f}") << " | "
        << number(t.flops_ratio, "{:.4f}") << " | " << number(100.0 * t.routed_fraction, "{:.1f}") << "% | "
        << number(t.seconds, "{:.1f}") << " |\n";
  for (const auto& t : tasks)
    if (t.truncated > 0)
      out << t.name << ": " << t.truncated << " of " << t.requests << " requests cut from the left to " << max_length
          << " tokens\n";
  for (const auto& t : tasks)
    if (const auto note = t.scoring_note(); !note.empty()) out << t.name << ": " << note << "\n";
  return out.str();
}

}  // namespace routelab
