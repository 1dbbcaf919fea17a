// KV caches: padded per-sequence buffers grown by doubling, tagged entries, the cached attention step, byte
// accounting from the tensors held, and the analytic entry count from a full forward's routing trace.
#include "core/inference/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/models/language_model.h"
#include "core/util/errors.h"

namespace routelab {

KVCache::KVCache(std::string name, int layer, std::int64_t batch, std::int64_t kv_heads, std::int64_t head_dim,
                 std::int64_t per_token, std::int64_t fixed)
    : name_(std::move(name)),
      layer_(layer),
      batch_(batch),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      per_token_(per_token),
      fixed_(fixed),
      lengths_(static_cast<std::size_t>(batch), 0),
      last_position_(static_cast<std::size_t>(batch), -1) {}

std::int64_t KVCache::max_length() const {
  return lengths_.empty() ? 0 : *std::max_element(lengths_.begin(), lengths_.end());
}

std::int64_t KVCache::entries() const {
  std::int64_t n = 0;
  for (const auto l : lengths_) n += l;
  return n;
}

std::int64_t KVCache::entry_bytes() const {
  const auto element = keys_.defined() ? static_cast<std::int64_t>(keys_.element_size()) : std::int64_t{4};
  return 2 * kv_heads_ * head_dim_ * element;
}

std::int64_t KVCache::live_bytes() const { return entries() * entry_bytes(); }

std::int64_t KVCache::allocated_bytes() const {
  if (!keys_.defined()) return 0;
  return static_cast<std::int64_t>(keys_.numel() * keys_.element_size() + values_.numel() * values_.element_size());
}

std::int64_t KVCache::index_bytes() const {
  std::int64_t n = 0;
  for (const auto* t : {&position_, &step_, &visible_})
    if (t->defined()) n += static_cast<std::int64_t>(t->numel() * t->element_size());
  return n;
}

void KVCache::reserve(std::int64_t entries) {
  reserved_ = std::max(reserved_, entries);
  if (keys_.defined() && entries > capacity_) ensure(entries, keys_);
}

void KVCache::ensure(std::int64_t needed, const torch::Tensor& like) {
  if (keys_.defined() && needed <= capacity_) return;
  // Doubling keeps the number of reallocations logarithmic in the length; reserve() avoids them altogether.
  const auto capacity = std::max({needed, reserved_, 2 * capacity_, std::int64_t{16}});
  const auto grow = [&](const torch::Tensor& old, torch::Tensor fresh) {
    if (old.defined() && capacity_ > 0) fresh.narrow(old.dim() - (old.dim() == 4 ? 2 : 1), 0, capacity_).copy_(old);
    return fresh;
  };
  // Zero-filled: the padding of a shorter sequence is read (and masked) by the batched score product, so it must
  // not hold NaN or Inf.
  keys_ = grow(keys_, torch::zeros({batch_, kv_heads_, capacity, head_dim_}, like.options()));
  values_ = grow(values_, torch::zeros({batch_, kv_heads_, capacity, head_dim_}, like.options()));
  const auto long_options = like.options().dtype(torch::kLong);
  position_ = grow(position_, torch::zeros({batch_, capacity}, long_options));
  if (tagged_steps_) step_ = grow(step_, torch::zeros({batch_, capacity}, long_options));
  if (has_hidden_) visible_ = grow(visible_, torch::ones({batch_, capacity}, long_options.dtype(torch::kBool)));
  capacity_ = capacity;
}

std::vector<std::int64_t> KVCache::append(const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& position,
                                          const torch::Tensor& keep, std::int64_t step, const torch::Tensor& hidden) {
  torch::NoGradGuard no_grad;
  const auto B = k.size(0), n = k.size(2);
  if (B != batch_ || k.size(1) != kv_heads_ || k.size(3) != head_dim_)
    throw std::invalid_argument("KVCache " + name_ + ": entries of shape " + c10::str(k.sizes()) +
                                " do not match the cache (B " + std::to_string(batch_) + ", Hkv " +
                                std::to_string(kv_heads_) + ", hd " + std::to_string(head_dim_) + ")");
  const auto pos = position.dim() == 1 ? position.unsqueeze(0).expand({B, n}) : position;  // (B, n)
  std::vector<std::int64_t> counts(static_cast<std::size_t>(B), n);
  torch::Tensor keep_cpu;
  if (keep.defined()) {
    keep_cpu = keep.to(torch::kCPU).contiguous();
    const auto c = keep_cpu.sum(1).to(torch::kLong).contiguous();  // one host sync
    counts.assign(c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + B);
  }
  std::int64_t needed = 0;
  for (std::int64_t b = 0; b < B; ++b) needed = std::max(needed, length(b) + counts[static_cast<std::size_t>(b)]);
  if (step != 0 && !tagged_steps_) {
    tagged_steps_ = true;
    if (keys_.defined()) step_ = torch::zeros({batch_, capacity_}, position_.options());
  }
  if (hidden.defined() && !has_hidden_) {
    has_hidden_ = true;
    if (keys_.defined()) visible_ = torch::ones({batch_, capacity_}, position_.options().dtype(torch::kBool));
  }
  ensure(needed, k);
  for (std::int64_t b = 0; b < B; ++b) {
    const auto count = counts[static_cast<std::size_t>(b)];
    if (count == 0) continue;
    auto kb = k[b], vb = v[b];  // (Hkv, n, hd)
    auto pb = pos[b];           // (n)
    torch::Tensor hb = hidden.defined() ? hidden[b] : torch::Tensor();
    if (count != n) {
      const auto index = keep_cpu[b].nonzero().squeeze(1).to(k.device());  // the kept rows, in order
      kb = kb.index_select(1, index);
      vb = vb.index_select(1, index);
      pb = pb.index_select(0, index);
      if (hb.defined()) hb = hb.index_select(0, index);
    }
    if (sorted_) {  // positions are appended in order within a call; compare the call's first with the last held
      const auto first = pb[0].item<std::int64_t>(), last = pb[count - 1].item<std::int64_t>();
      auto& held = last_position_[static_cast<std::size_t>(b)];
      if (first < held) sorted_ = false;
      held = std::max(held, last);
    }
    const auto at = length(b);
    keys_[b].narrow(1, at, count).copy_(kb);
    values_[b].narrow(1, at, count).copy_(vb);
    position_[b].narrow(0, at, count).copy_(pb);
    if (tagged_steps_) step_[b].narrow(0, at, count).fill_(step);
    if (has_hidden_) visible_[b].narrow(0, at, count).copy_(hb.defined() ? hb.logical_not() : torch::ones_like(pb).to(torch::kBool));
    lengths_[static_cast<std::size_t>(b)] += count;
  }
  return counts;
}

torch::Tensor KVCache::attend(const torch::Tensor& q, const torch::Tensor& q_position, const torch::Tensor& q_step) const {
  torch::NoGradGuard no_grad;
  const auto B = q.size(0), H = q.size(1), n = q.size(2), hd = q.size(3);
  const auto N = max_length();
  auto out = torch::zeros({B, H, n, hd}, q.options());
  if (N == 0) return out;
  const auto rep = H / kv_heads_;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto keys_all = keys_.narrow(2, 0, N), values_all = values_.narrow(2, 0, N);  // (B, Hkv, N, hd)
  const auto qpos = q_position.dim() == 1 ? q_position.unsqueeze(0).expand({B, n}) : q_position;  // (B, n)
  const auto len = torch::tensor(lengths_, torch::TensorOptions().dtype(torch::kLong)).to(q.device());
  const auto in_range = torch::arange(N, len.options()).unsqueeze(0) < len.unsqueeze(1);  // (B, N)
  auto entry_ok_all = in_range;
  if (has_hidden_) entry_ok_all = entry_ok_all.logical_and(visible_.narrow(1, 0, N));
  const auto entry_pos_all = position_.narrow(1, 0, N);
  // Query chunks keep the (B, H, chunk, N) scores small during a long prefill.
  const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t{1} << 24) / std::max<std::int64_t>(1, B * H * N));
  for (std::int64_t start = 0; start < n; start += chunk) {
    const auto m = std::min(chunk, n - start);
    auto keys = keys_all, values = values_all, entry_pos = entry_pos_all, entry_ok = entry_ok_all;
    auto width = N;
    if (sorted_ && n > 1) {  // causal prefix: entries past the chunk's last query position are never visible
      const auto last = qpos.narrow(1, start, m).max();
      width = std::max<std::int64_t>(1, entry_pos_all.le(last).logical_and(in_range).sum(1).max().item<std::int64_t>());
      keys = keys.narrow(2, 0, width), values = values.narrow(2, 0, width);
      entry_pos = entry_pos.narrow(1, 0, width), entry_ok = entry_ok.narrow(1, 0, width);
    }
    auto visible = entry_ok.unsqueeze(1).logical_and(entry_pos.unsqueeze(1) <= qpos.narrow(1, start, m).unsqueeze(2));
    if (q_step.defined() && tagged_steps_)
      visible = visible.logical_and(step_.narrow(1, 0, width).unsqueeze(1) <= q_step.narrow(1, start, m).unsqueeze(2));
    // (B, m, N); a row that sees nothing attends to everything (no NaN) and is zeroed afterwards.
    const auto any = visible.any(-1);  // (B, m)
    const auto hide = visible.logical_or(any.logical_not().unsqueeze(-1)).logical_not();
    const auto bias = torch::zeros({B, 1, 1, m, width}, q.options().dtype(torch::kFloat))
                          .masked_fill(hide.view({B, 1, 1, m, width}), -std::numeric_limits<float>::infinity());
    const auto qg = q.narrow(2, start, m).reshape({B, kv_heads_, rep * m, hd});  // query head h = kv h / rep
    auto scores = torch::matmul(qg, keys.transpose(-1, -2)).to(torch::kFloat).mul_(scale);  // (B, Hkv, rep m, N)
    scores = scores.view({B, kv_heads_, rep, m, width}) + bias;
    const auto probs = torch::softmax(scores, -1).view({B, kv_heads_, rep * m, width}).to(values.scalar_type());
    auto heads = torch::matmul(probs, values).view({B, H, m, hd});  // (B, H, m, hd)
    heads = heads * any.view({B, 1, m, 1}).to(heads.scalar_type());
    out.narrow(2, start, m).copy_(heads);
  }
  return out;
}

DecodeState::DecodeState(std::string arch, std::int64_t batch, std::int64_t context_limit)
    : arch_(std::move(arch)), batch_(batch), context_limit_(context_limit) {
  if (batch < 1) throw ConfigError("decode: batch " + std::to_string(batch) + " must be at least 1");
}

void DecodeState::check_room(std::int64_t n) const {
  if (n < 1) throw ConfigError("decode: a decode call needs at least one new token per sequence");
  if (length_ + n > context_limit_)
    throw ConfigError("decode: " + std::to_string(length_ + n) + " tokens exceed the " + arch_ +
                      " model's context of " + std::to_string(context_limit_) + " (model.max_seq_len)");
}

std::size_t DecodeState::add_cache(KVCache cache) {
  caches_.push_back(std::move(cache));
  return caches_.size() - 1;
}

std::int64_t DecodeState::live_bytes() const {
  std::int64_t n = 0;
  for (const auto& c : caches_) n += c.live_bytes();
  return n;
}

std::int64_t DecodeState::allocated_bytes() const {
  std::int64_t n = 0;
  for (const auto& c : caches_) n += c.allocated_bytes() + c.index_bytes();
  return n;
}

std::int64_t DecodeState::entries() const {
  std::int64_t n = 0;
  for (const auto& c : caches_) n += c.entries();
  return n;
}

std::int64_t DecodeState::estimate_bytes(std::int64_t length) const {
  std::int64_t n = 0;
  for (const auto& c : caches_) n += batch_ * (c.per_token() * length + c.fixed()) * c.entry_bytes();
  return n;
}

void DecodeState::reserve(std::int64_t length) {
  for (auto& c : caches_) c.reserve(c.per_token() * length + c.fixed());
}

std::vector<std::int64_t> analytic_kv_entries(const std::vector<LayerTrace>& trace, std::int64_t batch,
                                              std::int64_t seq) {
  std::vector<std::int64_t> entries;
  for (const auto& t : trace) {
    auto it = t.tokens_processed.find("kv");
    if (it == t.tokens_processed.end()) it = t.tokens_processed.find("attn");
    entries.push_back(it == t.tokens_processed.end() ? batch * seq : it->second);
  }
  return entries;
}

}  // namespace routelab
