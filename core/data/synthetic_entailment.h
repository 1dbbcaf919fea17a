// The embedded sentence-pair task of issue 5 (data.source "entailment"): premises made of comparative facts
// ("the king is taller than the cook"), hypotheses entailed, neutral or contradicted, generated from a seed so
// that the words of a pair carry no information about its class: a bag-of-words model stays at chance.
//
// A premise states K facts "the S is R than the O" over 2K distinct entities (24 names) and comparatives R
// from 6 antonym pairs (taller/shorter, ...), joined by "," and "and". The hypothesis is one fact built from
// premise entities, "the X is W than the Y ." with W either a premise fact's relation or its antonym:
//   entailment:    a premise fact (S R O), said directly or as its converse (O R' S), R' the antonym of R;
//   contradiction: the reversed fact (O R S), or the antonym with the same order (S R' O);
//   neutral:       a subject and an object from two different facts (in random order) with the relation of
//                  one of them, direct or antonym; the premise says nothing about that pair.
// The converse and antonym forms are chosen with the same probability in every class, the entity pair is a
// uniform pair of premise entities and the relation a uniform premise relation in every class, so the joint
// distribution of (premise words, hypothesis words) is identical for the three classes. Deciding the class
// takes finding the hypothesis entities in the premise, their roles in the fact and the relation's direction.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/data/classification.h"
#include "core/data/dataset.h"

namespace routelab {

struct SyntheticEntailmentOptions {
  std::int64_t train_examples = 10000;
  std::int64_t eval_examples = 1000;  ///< each of val and test
  std::uint64_t seed = 1234;          ///< each split has its own stream derived from the seed
  std::int64_t min_facts = 2;         ///< facts per premise, uniform in [min_facts, max_facts]; >= 2 (neutral
  std::int64_t max_facts = 4;         ///< needs two facts), max_facts <= 12 (24 entities)
  double converse_fraction = 0.5;     ///< share of hypotheses phrased through the antonym (all classes alike)
};

/// {"entailment", "neutral", "contradiction"}: the MultiNLI order (class ids 0, 1, 2).
const std::vector<std::string>& synthetic_entailment_labels();

/// The examples of one split: deterministic per (options, split), classes balanced to within one example
/// (counts differ by at most one) and shuffled. Throws ConfigError for inconsistent options.
std::vector<SentencePair> generate_synthetic_entailment(const SyntheticEntailmentOptions& options, Split split);

/// Longest `[CLS] premise [SEP] hypothesis [SEP]` in word tokens (8 per fact, 8 for the hypothesis, 3 specials).
std::int64_t synthetic_entailment_max_tokens(const SyntheticEntailmentOptions& options);

}  // namespace routelab
