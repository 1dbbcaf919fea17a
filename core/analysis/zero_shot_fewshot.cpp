// Few-shot prompts as lm-evaluation-harness 0.4 builds them (ConfigurableTask.fewshot_context and its samplers), so
// `tasks --fewshot K` scores what `lm_eval --num_fewshot K` scores (experiments/tasks/harness-check.py checks it).
#include <string>
#include <vector>

#include "core/analysis/zero_shot.h"
#include "core/util/errors.h"
#include "core/util/python_random.h"

namespace routelab {
namespace {

/// The harness's few-shot delimiter between solved examples (each example's answer is followed by it).
constexpr const char* kFewShotDelimiter = "\n\n";

/// `context` without the description it begins with.
std::string without_description(const TaskExample& example, const std::string& context) {
  return context.compare(0, example.description.size(), example.description) == 0
             ? context.substr(example.description.size())
             : context;
}

bool same_example(const TaskExample& a, const TaskExample& b) {
  return a.label == b.label && a.requests == b.requests;
}

/// Indices of `pool`'s examples shown before `example`, in the order the harness draws them.
std::vector<std::size_t> draw(const ZeroShotTask& task, const ZeroShotTask& pool, const TaskExample& example,
                              bool same_file, std::size_t shots, PythonRandom& rnd) {
  const auto too_few = [&](std::size_t have) {
    return ConfigError(pool.path + ": " + std::to_string(shots) + " few-shot examples asked for task " + task.name +
                       ", the file holds " + std::to_string(have) + (same_file ? " other than the example" : ""));
  };
  const auto others = [&] {  // the pool less copies of the example itself (same file only)
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < pool.examples.size(); ++i)
      if (!same_file || !same_example(pool.examples[i], example)) out.push_back(i);
    return out;
  };
  std::vector<std::size_t> drawn;
  if (task.format == "mmlu") {  // first_n: the pool's first examples, in order
    for (std::size_t i = 0; i < pool.examples.size() && drawn.size() < shots; ++i)
      if (!same_file || !same_example(pool.examples[i], example)) drawn.push_back(i);
    if (drawn.size() < shots) throw too_few(drawn.size());
    return drawn;
  }
  if (!same_file) {
    if (pool.examples.size() < shots) throw too_few(pool.examples.size());
    for (const auto i : rnd.sample(pool.examples.size(), shots)) drawn.push_back(i);
    return drawn;
  }
  if (pool.examples.size() < shots + 1) throw too_few(others().size());
  for (const auto i : rnd.sample(pool.examples.size(), shots + 1))
    if (!same_example(pool.examples[i], example) && drawn.size() < shots) drawn.push_back(i);
  if (drawn.size() < shots) {  // copies of the example drawn more than once: drawn again from the others
    const auto rest = others();
    if (rest.size() < shots) throw too_few(rest.size());
    drawn.clear();
    for (const auto i : rnd.sample(rest.size(), shots)) drawn.push_back(rest[i]);
  }
  return drawn;
}

}  // namespace

ZeroShotTask with_few_shot(const ZeroShotTask& task, const ZeroShotTask& pool, bool same_file, std::int64_t shots,
                           std::uint64_t seed) {
  if (shots <= 0) return task;
  if (task.kind == TaskKind::Perplexity)
    throw ConfigError("task " + task.name + ": few-shot prompts are for multiple-choice and cloze tasks, not " +
                      task.format + " documents");
  if (pool.format != task.format)
    throw ConfigError(pool.path + ": few-shot examples in format " + pool.format + " for task " + task.name +
                      " of format " + task.format);
  PythonRandom rnd(seed);  // one generator a task, drawing for its examples in order (the harness's sampler)
  ZeroShotTask out = task;
  out.name = task.name + "_" + std::to_string(shots) + "shot";
  out.shots = shots;
  for (auto& example : out.examples) {
    std::string prefix = example.description;
    for (const auto i : draw(task, pool, example, same_file, static_cast<std::size_t>(shots), rnd)) {
      const auto& shot = pool.examples[i];
      const auto& answer = shot.requests.at(static_cast<std::size_t>(shot.label));
      // A solved example is its prompt, the target delimiter and its answer. A choice's continuation begins with the
      // delimiter already; a cloze answer (the harness's loglikelihood tasks: LAMBADA's " word") is its target alone,
      // so the delimiter comes before it, doubling LAMBADA's space as the harness's prompts do.
      const char* delimiter = task.kind == TaskKind::Cloze ? " " : "";
      prefix += without_description(shot, answer.context) + delimiter + answer.continuation + kFewShotDelimiter;
    }
    for (auto& r : example.requests) r.context = prefix + without_description(example, r.context);
  }
  return out;
}

}  // namespace routelab
