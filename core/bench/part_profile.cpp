// PartAttribution: innermost spans by a backward scan from the last span that starts at or before a time (spans of
// one thread nest, so the first one found that still covers the time is the innermost).
#include "core/bench/part_profile.h"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <utility>

namespace routelab {
namespace {

template <typename S>
void sort_spans(std::map<std::uint64_t, std::vector<S>>& by_thread) {
  for (auto& [thread, spans] : by_thread)  // outer before inner where two start together
    std::stable_sort(spans.begin(), spans.end(),
              [](const S& a, const S& b) { return a.start != b.start ? a.start < b.start : a.end > b.end; });
}

/// The innermost of `thread`'s spans covering `at`, or nullptr.
template <typename S>
const S* innermost(const std::map<std::uint64_t, std::vector<S>>& by_thread, std::uint64_t thread, std::uint64_t at) {
  const auto it = by_thread.find(thread);
  if (it == by_thread.end()) return nullptr;
  const auto& spans = it->second;
  auto i = std::upper_bound(spans.begin(), spans.end(), at, [](std::uint64_t t, const S& s) { return t < s.start; });
  while (i != spans.begin()) {
    --i;
    if (i->end >= at) return &*i;
  }
  return nullptr;
}

}  // namespace

void PartAttribution::part(std::uint64_t thread, std::uint64_t start, std::uint64_t end, std::string name) {
  parts_[thread].push_back({start, end, std::move(name), -1, 0});
}

void PartAttribution::backward(std::uint64_t thread, std::uint64_t start, std::uint64_t end, std::int64_t seq,
                               std::uint64_t forward_thread) {
  backward_[thread].push_back({start, end, {}, seq, forward_thread});
}

void PartAttribution::evaluation(std::uint64_t thread, std::uint64_t start, std::uint64_t end) {
  evaluations_[thread].push_back({start, end, {}, -1, 0});
}

void PartAttribution::op(std::uint64_t thread, std::uint64_t start, std::int64_t seq) {
  if (seq >= 0) ops_.push_back({thread, start, seq});
}

void PartAttribution::work(std::uint64_t thread, std::uint64_t at, double ms, std::string what) {
  work_.push_back({thread, at, ms, std::move(what)});
}

void PartAttribution::unlinked(double ms, std::string what) { unlinked_.push_back({0, 0, ms, std::move(what)}); }

template <typename Visit>
void PartAttribution::attribute(Visit&& visit) const {
  auto parts = parts_;
  auto backward = backward_;
  auto evaluations = evaluations_;
  sort_spans(parts);
  sort_spans(backward);
  sort_spans(evaluations);
  // The backward node work at (thread, at) belongs to: the innermost node open there, else the first node of the
  // engine's evaluation open there.
  const auto node_at = [&](std::uint64_t thread, std::uint64_t at) -> const Span* {
    if (const auto* node = innermost(backward, thread, at)) return node;
    const auto* evaluation = innermost(evaluations, thread, at);
    const auto it = backward.find(thread);
    if (!evaluation || it == backward.end()) return nullptr;
    const auto first = std::lower_bound(it->second.begin(), it->second.end(), evaluation->start,
                                        [](const Span& s, std::uint64_t t) { return s.start < t; });
    return first != it->second.end() && first->start <= evaluation->end ? &*first : nullptr;
  };
  const auto part_at = [&](std::uint64_t thread, std::uint64_t at) -> std::string {
    const auto* s = innermost(parts, thread, at);
    return s ? s->name : kNoPart;
  };
  // The part of each forward op by (thread, sequence number); the first op of a number names it (a composite op
  // and the op inside it that creates the node share the number and the part).
  std::map<std::pair<std::uint64_t, std::int64_t>, std::string> forward_part;
  for (const auto& o : ops_)
    if (!node_at(o.thread, o.start))
      forward_part.emplace(std::make_pair(o.thread, o.seq), part_at(o.thread, o.start));
  // A node's part: that of the last forward op numbered at most the node's number on its thread. A node made with
  // no op peeking its number (a custom autograd function, whose inner ops run without grad) was made after that op.
  const auto node_part = [&](const Span& node) -> std::string {
    auto it = forward_part.upper_bound({node.forward_thread, node.seq});
    if (it == forward_part.begin()) return kUnmatchedBackward;
    --it;
    return it->first.first == node.forward_thread ? it->second : kUnmatchedBackward;
  };
  for (const auto& w : work_) {
    if (const auto* node = node_at(w.thread, w.at))
      visit(node_part(*node), true, w);
    else
      visit(part_at(w.thread, w.at), false, w);
  }
  for (const auto& w : unlinked_) visit(std::string(kUnlinkedWork), false, w);
}

namespace {

void add_work(PartTime& t, bool backward, double ms) {
  (backward ? t.backward_ms : t.forward_ms) += ms;
  ++(backward ? t.backward_calls : t.forward_calls);
}

}  // namespace

std::map<std::string, PartTime> PartAttribution::parts() const {
  std::map<std::string, PartTime> out;
  attribute([&](const std::string& part, bool backward, const Work& w) { add_work(out[part], backward, w.ms); });
  return out;
}

std::map<std::string, std::map<std::string, PartTime>> PartAttribution::pieces() const {
  std::map<std::string, std::map<std::string, PartTime>> out;
  attribute([&](const std::string& part, bool backward, const Work& w) {
    add_work(out[part][w.what], backward, w.ms);
  });
  return out;
}

std::string parts_table(const std::map<std::string, PartTime>& parts, double per,
                        const std::map<std::string, PartTime>* other, const std::string& other_name) {
  std::vector<std::pair<std::string, PartTime>> rows(parts.begin(), parts.end());
  if (other)  // parts only the other has, so that its column sums to its total too
    for (const auto& [name, t] : *other)
      if (!parts.count(name)) rows.emplace_back(name, PartTime{});
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.total() > b.second.total(); });
  std::ostringstream s;
  s << std::fixed << std::setprecision(2);
  s << "    " << std::left << std::setw(40) << "part" << std::right << std::setw(10) << "forward" << std::setw(10)
    << "backward" << std::setw(10) << "total" << std::setw(9) << "calls";
  if (other) s << std::setw(12) << other_name << std::setw(9) << "calls";
  s << "\n";
  for (const auto& [name, t] : rows) {
    s << "    " << std::left << std::setw(40) << name << std::right << std::setw(10) << t.forward_ms / per
      << std::setw(10) << t.backward_ms / per << std::setw(10) << t.total() / per << std::setprecision(0)
      << std::setw(9) << t.calls() / per << std::setprecision(2);
    if (other) {
      const auto it = other->find(name);
      const auto theirs = it != other->end() ? it->second : PartTime{};
      s << std::setw(12) << theirs.total() / per << std::setprecision(0) << std::setw(9) << theirs.calls() / per
        << std::setprecision(2);
    }
    s << "\n";
  }
  return s.str();
}

std::string part_pieces_table(const CallProfile& p, int top, const CallProfile* other, const std::string& other_name,
                              int indent) {
  std::vector<std::pair<std::string, double>> order;  // the parts, largest total first
  for (const auto& [part, t] : p.parts_ms) order.emplace_back(part, t.total());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  const std::string pad(static_cast<std::size_t>(std::max(0, indent)), ' ');
  const auto theirs_of = [&](const std::string& part, const std::string& name) -> const CallProfile::Piece* {
    if (!other) return nullptr;
    const auto pieces = other->part_pieces.find(part);
    if (pieces == other->part_pieces.end()) return nullptr;
    for (const auto& d : pieces->second)
      if (d.name == name) return &d;
    return nullptr;
  };
  std::ostringstream s;
  s << std::fixed << std::setprecision(2);
  for (const auto& [part, total] : order) {
    const auto it = p.part_pieces.find(part);
    if (it == p.part_pieces.end()) continue;
    s << pad << part << " (" << total << " ms):\n";
    for (std::size_t i = 0; i < it->second.size() && i < static_cast<std::size_t>(std::max(0, top)); ++i) {
      const auto& piece = it->second[i];
      auto name = piece.name;
      if (name.size() > 80) name.replace(77, std::string::npos, "...");
      s << pad << "  " << std::setw(8) << piece.forward_ms << " / " << std::setw(8) << piece.backward_ms
        << std::setprecision(0) << std::setw(7) << piece.calls << std::setprecision(2);
      if (other) {  // 0 where the other ran nothing of that name in that part
        const auto* theirs = theirs_of(part, piece.name);
        s << "  " << other_name << " " << std::setw(8) << (theirs ? theirs->forward_ms + theirs->backward_ms : 0.0)
          << std::setprecision(0) << std::setw(7) << (theirs ? theirs->calls : 0.0) << std::setprecision(2);
      }
      s << "  " << name << "\n";
    }
  }
  return s.str();
}

}  // namespace routelab
