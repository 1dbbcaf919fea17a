// Generator of the synthetic entailment task (see synthetic_entailment.h for the design and why a bag of words
// cannot solve it).
#include "core/data/synthetic_entailment.h"

#include <array>
#include <numeric>
#include <random>

#include "core/data/detail.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

constexpr std::array<const char*, 24> kEntities = {
    "king",   "queen", "doctor", "farmer", "baker",  "pilot",  "judge",  "nurse",
    "sailor", "singer", "tailor", "hunter", "miner", "monk",   "poet",   "priest",
    "clerk",  "cook",  "smith",  "guard",  "knight", "merchant", "painter", "soldier"};

/// Antonyms are neighbours: relation r and r ^ 1.
constexpr std::array<const char*, 12> kRelations = {"taller",   "shorter", "older",    "younger", "faster", "slower",
                                                    "richer",   "poorer",  "stronger", "weaker",  "heavier", "lighter"};

enum Label : std::int64_t { kEntailment = 0, kNeutral = 1, kContradiction = 2 };

struct Fact {
  std::size_t subject;
  std::size_t relation;
  std::size_t object;
};

std::string fact_text(const Fact& f) {
  return std::string("the ") + kEntities[f.subject] + " is " + kRelations[f.relation] + " than the " +
         kEntities[f.object];
}

/// SplitMix64 finaliser: independent streams for the three splits of one seed.
std::uint64_t split_seed(std::uint64_t seed, Split split) {
  std::uint64_t z = seed * 3 + static_cast<std::uint64_t>(split) + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

bool coin(std::mt19937_64& gen, double p) {
  // 53 random bits to a double in [0, 1): portable, unlike std::uniform_real_distribution.
  return static_cast<double>(gen() >> 11) * 0x1.0p-53 < p;
}

SentencePair make_example(std::mt19937_64& gen, const SyntheticEntailmentOptions& options, std::int64_t label) {
  const auto span = static_cast<std::uint64_t>(options.max_facts - options.min_facts + 1);
  const auto k = static_cast<std::size_t>(options.min_facts) + detail::uniform_below(gen, span);

  // 2k distinct entities by a partial Fisher-Yates shuffle; fact j is (entity 2j, relation j, entity 2j+1).
  std::array<std::size_t, kEntities.size()> entities{};
  std::iota(entities.begin(), entities.end(), std::size_t{0});
  for (std::size_t i = 0; i < 2 * k; ++i) {
    const auto j = i + detail::uniform_below(gen, entities.size() - i);
    std::swap(entities[i], entities[j]);
  }
  std::vector<Fact> facts(k);
  for (std::size_t j = 0; j < k; ++j) {
    facts[j] = {entities[2 * j], detail::uniform_below(gen, kRelations.size()), entities[2 * j + 1]};
  }

  std::string premise;
  for (std::size_t j = 0; j < k; ++j) {
    if (j > 0) premise += j + 1 == k ? " and " : " , ";
    premise += fact_text(facts[j]);
  }
  premise += " .";

  const bool converse = coin(gen, options.converse_fraction);
  Fact h{};
  if (label == kNeutral) {
    const auto i = detail::uniform_below(gen, k);
    auto j = detail::uniform_below(gen, k - 1);
    if (j >= i) ++j;  // a different fact
    const auto relation = coin(gen, 0.5) ? facts[i].relation : facts[j].relation;
    h = {facts[i].subject, relation ^ (converse ? 1U : 0U), facts[j].object};
    if (coin(gen, 0.5)) std::swap(h.subject, h.object);
  } else {
    const Fact& f = facts[detail::uniform_below(gen, k)];
    // Entailment swaps subject and object only in the converse form, contradiction only in the direct form.
    const bool reversed = (label == kContradiction) != converse;
    h = {reversed ? f.object : f.subject, f.relation ^ (converse ? 1U : 0U), reversed ? f.subject : f.object};
  }
  return {premise, fact_text(h) + " .", label};
}

}  // namespace

const std::vector<std::string>& synthetic_entailment_labels() {
  static const std::vector<std::string> labels = {"entailment", "neutral", "contradiction"};
  return labels;
}

std::vector<SentencePair> generate_synthetic_entailment(const SyntheticEntailmentOptions& options, Split split) {
  if (options.min_facts < 2 || options.max_facts < options.min_facts ||
      options.max_facts > static_cast<std::int64_t>(kEntities.size() / 2)) {
    throw ConfigError("synthetic entailment: facts per premise must satisfy 2 <= min_facts <= max_facts <= " +
                      std::to_string(kEntities.size() / 2) + " (got " + std::to_string(options.min_facts) + ".." +
                      std::to_string(options.max_facts) + ")");
  }
  if (!(options.converse_fraction >= 0.0 && options.converse_fraction <= 1.0)) {
    throw ConfigError("synthetic entailment: converse_fraction must be in [0, 1]");
  }
  const std::int64_t n = split == Split::Train ? options.train_examples : options.eval_examples;
  if (n < 1) {
    throw ConfigError(std::string("data.") + (split == Split::Train ? "task_train_examples" : "task_eval_examples") +
                      ": " + std::to_string(n) + " must be >= 1");
  }
  std::mt19937_64 gen(split_seed(options.seed, split));
  // Balanced labels in a shuffled order.
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 3);
  for (std::size_t i = labels.size(); i > 1; --i) std::swap(labels[i - 1], labels[detail::uniform_below(gen, i)]);

  std::vector<SentencePair> examples;
  examples.reserve(labels.size());
  for (const auto label : labels) examples.push_back(make_example(gen, options, label));
  return examples;
}

std::int64_t synthetic_entailment_max_tokens(const SyntheticEntailmentOptions& options) {
  // A fact is 7 words; each fact is followed by a separator ("," / "and") or the final ".".
  return 8 * options.max_facts + 8 + 3;
}

}  // namespace routelab
