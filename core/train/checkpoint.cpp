// Checkpoint serialisation with torch::serialize archives; every failure becomes a CheckpointError.
#include "core/train/checkpoint.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <unordered_map>

#include <zlib.h>

#include <fstream>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/cuda.h>

#include "core/train/optimizer.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

namespace fs = std::filesystem;

namespace routelab {
namespace {

constexpr std::int64_t kFormatVersion = 2;  // 2: the writing run's id and config hash

/// How many CUDA generators this process has (0 without a GPU or with a CPU-only LibTorch).
std::size_t cuda_generators() { return torch::cuda::is_available() ? torch::cuda::device_count() : 0; }

torch::Tensor scalar(std::int64_t v) { return torch::tensor(v, torch::kLong); }
torch::Tensor scalar_d(double v) { return torch::tensor(v, torch::kDouble); }

torch::Tensor read_tensor(torch::serialize::InputArchive& in, const std::string& key, const std::string& path) {
  torch::Tensor t;
  if (!in.try_read(key, t)) throw CheckpointError(path + ": missing key '" + key + "'");
  return t;
}

std::string read_string(torch::serialize::InputArchive& in, const std::string& key, const std::string& path) {
  c10::IValue v;
  if (!in.try_read(key, v) || !v.isString()) throw CheckpointError(path + ": missing key '" + key + "'");
  return v.toStringRef();
}

CheckpointMeta read_meta(torch::serialize::InputArchive& in, const std::string& path) {
  const auto version = read_tensor(in, "format_version", path).item<std::int64_t>();
  if (version > kFormatVersion)
    throw CheckpointError(path + ": checkpoint format " + std::to_string(version) + " is newer than this RouteLab");
  CheckpointMeta meta;
  meta.step = read_tensor(in, "step", path).item<std::int64_t>();
  meta.tokens_seen = read_tensor(in, "tokens_seen", path).item<std::int64_t>();
  meta.elapsed_s = read_tensor(in, "elapsed_s", path).item<double>();
  meta.config_json = read_string(in, "config", path);
  meta.tokenizer_json = read_string(in, "tokenizer", path);
  if (version >= 2) {
    meta.run_id = read_tensor(in, "run_id", path).item<std::int64_t>();
    meta.config_hash = read_string(in, "config_hash", path);
  }
  return meta;
}

/// A checkpoint of another run, config or step is refused before anything is loaded from it.
void check_expectation(const CheckpointMeta& meta, const CheckpointExpectation& expect, const std::string& path) {
  if (meta.run_id != 0 && expect.run_id != 0 && meta.run_id != expect.run_id)
    throw CheckpointError(path + ": a checkpoint of run " + std::to_string(meta.run_id) + ", not of run " +
                          std::to_string(expect.run_id));
  if (!meta.config_hash.empty() && !expect.config_hash.empty() && meta.config_hash != expect.config_hash)
    throw CheckpointError(path + ": written with config " + meta.config_hash + ", the run's config is " +
                          expect.config_hash);
  if (meta.step != expect.step)
    throw CheckpointError(path + ": holds step " + std::to_string(meta.step) + ", the store records step " +
                          std::to_string(expect.step) + " for it");
}

/// Module::load would silently replace a parameter of another shape, and leave out what the model has no place for:
/// check every tensor both ways, then copy in place.
void load_module_checked(torch::nn::Module& module, torch::serialize::InputArchive& archive, const std::string& prefix,
                         const std::string& path) {
  torch::NoGradGuard no_grad;
  auto copy_into = [&](const std::string& key, torch::Tensor& target) {
    torch::Tensor loaded;
    if (!archive.try_read(key, loaded))
      throw CheckpointError(path + ": missing tensor '" + prefix + key + "'");
    if (loaded.sizes() != target.sizes())
      throw CheckpointError(path + ": tensor '" + prefix + key + "' has shape " + c10::str(loaded.sizes()) +
                            ", the model expects " + c10::str(target.sizes()) + " (a checkpoint of another config?)");
    target.copy_(loaded);
  };
  for (auto& item : module.named_parameters(/*recurse=*/false)) copy_into(item.key(), item.value());
  for (auto& item : module.named_buffers(/*recurse=*/false)) copy_into(item.key(), item.value());
  for (const auto& child : module.named_children()) {
    torch::serialize::InputArchive child_archive;
    if (!archive.try_read(child.key(), child_archive))
      throw CheckpointError(path + ": missing module '" + prefix + child.key() + "'");
    load_module_checked(*child.value(), child_archive, prefix + child.key() + ".", path);
  }
  // A tensor or module of the checkpoint the model lacks (a model built smaller, say with fewer layers, would run
  // on part of the trained weights); the archive's other attributes (a module's training flag) are not weights.
  const auto params = module.named_parameters(/*recurse=*/false);
  const auto buffers = module.named_buffers(/*recurse=*/false);
  const auto children = module.named_children();
  for (const auto& key : archive.keys()) {
    if (params.contains(key) || buffers.contains(key) || children.contains(key)) continue;
    torch::Tensor tensor;
    torch::serialize::InputArchive child;
    if (archive.try_read(key, tensor) || archive.try_read(key, child))
      throw CheckpointError(path + ": '" + prefix + key + "' has no place in the model (a checkpoint of a larger " +
                            "or another config?)");
  }
}

/// Writes the archive to `path` through this process's own file handle. A failed write (a full disk, an I/O error) is
/// remembered and reported as a CheckpointError once LibTorch's writer is done: LibTorch's own file writer throws
/// from its destructor on a failed write, which aborts the process. The file is flushed to the disk before it counts.
/// Returns the CRC-32 of the bytes written.
std::uint32_t write_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) throw CheckpointError(path + ": cannot open for writing (" + std::strerror(errno) + ")");
  int error = 0;
  uLong crc = crc32(0L, Z_NULL, 0);
  try {
    archive.save_to([&](const void* data, std::size_t n) -> std::size_t {
      if (error == 0 && n > 0 && std::fwrite(data, 1, n, file) != n) error = errno != 0 ? errno : EIO;
      crc = crc32_z(crc, static_cast<const Bytef*>(data), n);
      return n;  // never a short count: LibTorch's writer would throw from its destructor
    });
  } catch (...) {
    std::fclose(file);
    std::remove(path.c_str());
    throw;
  }
  if (error == 0 && std::fflush(file) != 0) error = errno;
  if (error == 0 && fsync(fileno(file)) != 0) error = errno;
  if (std::fclose(file) != 0 && error == 0) error = errno;
  if (error != 0) {
    std::remove(path.c_str());
    throw CheckpointError(path + ": cannot write checkpoint (" + std::strerror(error) + ")");
  }
  return static_cast<std::uint32_t>(crc);
}

/// The generators' states a checkpoint keeps: the CPU's, and each GPU's (dropout and sampling on a GPU draw from its
/// own generator: without its state resume is not exact there).
std::vector<std::pair<std::string, torch::Tensor>> generator_states() {
  std::vector<std::pair<std::string, torch::Tensor>> states;
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    states.emplace_back("rng_cpu", gen.get_state());
  }
  for (std::size_t i = 0; i < cuda_generators(); ++i) {
    auto gen = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
    std::lock_guard<std::mutex> lock(gen.mutex());
    states.emplace_back("rng_cuda_" + std::to_string(i), gen.get_state());
  }
  return states;
}

/// The checkpoint's file: `meta`, `model` and `optimizer` as their own save() writes them, and `generators`.
SavedCheckpoint write_file(const std::string& path, const torch::nn::Module& model,
                           const torch::optim::Optimizer& optimizer, const CheckpointMeta& meta,
                           const std::vector<std::pair<std::string, torch::Tensor>>& generators) {
  try {
    torch::serialize::OutputArchive archive;
    archive.write("format_version", scalar(kFormatVersion));
    archive.write("step", scalar(meta.step));
    archive.write("tokens_seen", scalar(meta.tokens_seen));
    archive.write("elapsed_s", scalar_d(meta.elapsed_s));
    archive.write("config", c10::IValue(meta.config_json));
    archive.write("tokenizer", c10::IValue(meta.tokenizer_json));
    archive.write("run_id", scalar(meta.run_id));
    archive.write("config_hash", c10::IValue(meta.config_hash));
    torch::serialize::OutputArchive model_archive, optim_archive;
    model.save(model_archive);
    optimizer.save(optim_archive);
    archive.write("model", model_archive);
    archive.write("optimizer", optim_archive);
    for (const auto& [key, state] : generators) archive.write(key, state);
    const std::string tmp = path + ".tmp";
    SavedCheckpoint saved;
    saved.crc32 = write_archive(archive, tmp);
    fs::rename(tmp, path);
    saved.bytes = static_cast<std::int64_t>(fs::file_size(path));
    return saved;
  } catch (const c10::Error& e) {
    throw CheckpointError(path + ": cannot write checkpoint (" + e.what_without_backtrace() + ")");
  } catch (const fs::filesystem_error& e) {
    throw CheckpointError(path + ": cannot write checkpoint (" + e.what() + ")");
  }
}

/// A host copy of `t`, outside autograd. From a GPU into pinned memory without waiting (checkpoint_snapshot waits
/// once for every copy): the copies run at the bus's speed, into host memory that CUDA's caching host allocator keeps
/// for the next checkpoint.
torch::Tensor host_copy(const torch::Tensor& t) {
  if (!t.is_cuda()) return t.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  auto copy = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
  copy.copy_(t.detach(), /*non_blocking=*/true);
  return copy;
}

/// A module of `module`'s parameters and buffers copied to the host, under the same names, its children likewise (as
/// Module::save walks them); `copies` maps each original tensor to its copy.
std::shared_ptr<torch::nn::Module> copy_module(const torch::nn::Module& module,
                                                std::unordered_map<const void*, torch::Tensor>& copies,
                                                std::int64_t& bytes) {
  auto copy = std::make_shared<torch::nn::Module>(module.name());
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    const auto& original = item.value();
    auto& c = copies[original.unsafeGetTensorImpl()];
    c = host_copy(original);
    bytes += static_cast<std::int64_t>(c.numel() * c.element_size());
    copy->register_parameter(item.key(), c, original.requires_grad());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/false)) {
    const auto c = host_copy(item.value());
    bytes += static_cast<std::int64_t>(c.numel() * c.element_size());
    copy->register_buffer(item.key(), c);
  }
  for (const auto& child : module.named_children())
    if (child.value()->is_serializable()) copy->register_module(child.key(), copy_module(*child.value(), copies, bytes));
  return copy;
}

/// An AdamW over the copied parameters with `optimizer`'s groups, options and state, copied to the host.
std::shared_ptr<torch::optim::AdamW> copy_optimizer(const torch::optim::AdamW& optimizer,
                                                     std::unordered_map<const void*, torch::Tensor>& copies,
                                                     std::int64_t& bytes) {
  auto counted = [&](const torch::Tensor& t) {
    auto c = host_copy(t);
    bytes += static_cast<std::int64_t>(c.numel() * c.element_size());
    return c;
  };
  auto copied = [&](const torch::Tensor& param) {
    auto& c = copies[param.unsafeGetTensorImpl()];
    if (!c.defined()) c = counted(param);  // a parameter the model does not hold
    return c;
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const auto& group : optimizer.param_groups()) {
    std::vector<torch::Tensor> params;
    for (const auto& p : group.params()) params.push_back(copied(p));
    groups.emplace_back(params, group.options().clone());
  }
  const auto& defaults = static_cast<const torch::optim::AdamWOptions&>(optimizer.defaults());
  auto copy = std::make_shared<torch::optim::AdamW>(groups, defaults);
  const auto& states = optimizer.state();
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const auto it = states.find(state_key(states, p));
      if (it == states.end()) continue;
      const auto& state = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      auto s = std::make_unique<torch::optim::AdamWParamState>();
      s->step(state.step());
      if (state.exp_avg().defined()) s->exp_avg(counted(state.exp_avg()));
      if (state.exp_avg_sq().defined()) s->exp_avg_sq(counted(state.exp_avg_sq()));
      if (state.max_exp_avg_sq().defined()) s->max_exp_avg_sq(counted(state.max_exp_avg_sq()));
      copy->state()[state_key(states, copied(p))] = std::move(s);
    }
  }
  return copy;
}

/// About the bytes a checkpoint of `model` takes: its tensors, and twice more for Adam's moments once the optimizer
/// has state (the archive's own overhead is small).
std::uintmax_t estimated_bytes(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  std::uintmax_t weights = 0;
  for (const auto& t : model.parameters()) weights += static_cast<std::uintmax_t>(t.numel() * t.element_size());
  for (const auto& t : model.buffers()) weights += static_cast<std::uintmax_t>(t.numel() * t.element_size());
  return optimizer.state().empty() ? weights : 3 * weights;
}

/// A disk without room for the checkpoint is an error before anything is written.
void check_free_space(const fs::path& folder, std::uintmax_t needed, const std::string& path) {
  std::error_code ec;
  const auto space = fs::space(folder, ec);
  if (ec || space.available >= needed) return;
  throw CheckpointError(path + ": cannot write checkpoint (it needs about " + std::to_string((needed >> 10) + 1) +
                        " KiB, " + std::to_string(space.available >> 10) + " KiB are free on its disk)");
}

/// The checkpoint's folder exists and has room for it.
void prepare_folder(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  try {
    fs::create_directories(fs::path(path).parent_path());
  } catch (const fs::filesystem_error& e) {
    throw CheckpointError(path + ": cannot write checkpoint (" + e.what() + ")");
  }
  check_free_space(fs::path(path).parent_path(), estimated_bytes(model, optimizer), path);
}

void open_archive(torch::serialize::InputArchive& in, const std::string& path, torch::Device device = torch::kCPU) {
  if (!fs::exists(path)) throw CheckpointError(path + ": checkpoint file not found");
  try {
    in.load_from(path, device);
  } catch (const c10::Error& e) {
    throw CheckpointError(path + ": not a readable RouteLab checkpoint (" + e.what_without_backtrace() + ")");
  }
}

}  // namespace

SavedCheckpoint save_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                const CheckpointMeta& meta) {
  prepare_folder(path, model, optimizer);
  return write_file(path, model, optimizer, meta, generator_states());
}

CheckpointSnapshot checkpoint_snapshot(const std::string& path, torch::nn::Module& model,
                                       torch::optim::AdamW& optimizer, const CheckpointMeta& meta) {
  prepare_folder(path, model, optimizer);
  try {
    torch::NoGradGuard no_grad;
    CheckpointSnapshot snapshot;
    snapshot.path = path;
    snapshot.meta = meta;
    std::unordered_map<const void*, torch::Tensor> copies;  // original parameter -> its copy
    snapshot.model = copy_module(model, copies, snapshot.bytes);
    snapshot.optimizer = copy_optimizer(optimizer, copies, snapshot.bytes);
    snapshot.generators = generator_states();
    std::set<c10::DeviceIndex> gpus;  // the device-to-host copies are done once these have finished their work
    for (const auto& p : model.parameters())
      if (p.is_cuda()) gpus.insert(p.device().index());
    for (const auto gpu : gpus) torch::cuda::synchronize(gpu);
    return snapshot;
  } catch (const c10::Error& e) {
    throw CheckpointError(path + ": cannot copy the checkpoint (" + e.what_without_backtrace() + ")");
  }
}

SavedCheckpoint write_checkpoint(const CheckpointSnapshot& snapshot) {
  return write_file(snapshot.path, *snapshot.model, *snapshot.optimizer, snapshot.meta, snapshot.generators);
}

void BackgroundCheckpointWriter::start(CheckpointSnapshot snapshot) {
  if (busy()) throw CheckpointError(snapshot.path + ": another checkpoint is still being written");
  pending_ = std::async(std::launch::async, [snapshot = std::move(snapshot)] {
    const auto t0 = std::chrono::steady_clock::now();
    WrittenCheckpoint written;
    written.saved = write_checkpoint(snapshot);
    written.path = snapshot.path;
    written.step = snapshot.meta.step;
    written.write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return written;
  });
}

std::optional<WrittenCheckpoint> BackgroundCheckpointWriter::poll() {
  if (!pending_.valid() || pending_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return std::nullopt;
  return finish();
}

std::optional<WrittenCheckpoint> BackgroundCheckpointWriter::finish() {
  if (!pending_.valid()) return std::nullopt;
  return pending_.get();  // rethrows the write's CheckpointError; the future is empty afterwards either way
}

void verify_checkpoint_file(const std::string& path, std::uint32_t expected_crc32) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path + ": checkpoint file not found");
  std::vector<char> buffer(std::size_t{1} << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<z_size_t>(in.gcount()));
  }
  if (in.bad()) throw CheckpointError(path + ": cannot read the checkpoint (" + std::strerror(errno) + ")");
  if (static_cast<std::uint32_t>(crc) != expected_crc32) {
    char got[16], want[16];
    std::snprintf(got, sizeof got, "%08x", static_cast<unsigned>(crc));
    std::snprintf(want, sizeof want, "%08x", static_cast<unsigned>(expected_crc32));
    throw CheckpointError(path + ": damaged or changed since it was written (CRC-32 " + got + ", recorded " + want +
                          ")");
  }
}

CheckpointMeta load_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                               torch::Device device, const CheckpointExpectation* expect) {
  torch::serialize::InputArchive in;
  open_archive(in, path, device);
  const auto meta = read_meta(in, path);
  if (expect) check_expectation(meta, *expect, path);
  try {
    torch::serialize::InputArchive model_archive;
    if (!in.try_read("model", model_archive)) throw CheckpointError(path + ": missing key 'model'");
    load_module_checked(model, model_archive, "", path);
    if (optimizer) {
      torch::serialize::InputArchive optim_archive;
      if (!in.try_read("optimizer", optim_archive)) throw CheckpointError(path + ": missing key 'optimizer'");
      optimizer->load(optim_archive);
      {
        auto state = read_tensor(in, "rng_cpu", path).to(torch::kCPU);
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(state);
      }
      // A checkpoint written on a GPU restores that GPU's generator where the same device exists; one written on
      // the CPU, or read where no GPU is, leaves the GPU generators as they are.
      for (std::size_t i = 0; i < cuda_generators(); ++i) {
        torch::Tensor state;
        if (!in.try_read("rng_cuda_" + std::to_string(i), state)) continue;
        auto gen = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(state.to(torch::kCPU));
      }
    }
  } catch (const c10::Error& e) {
    throw CheckpointError(path + ": does not match the model (" + e.what_without_backtrace() + ")");
  }
  return meta;
}

ResumePoint load_newest_intact(const std::vector<CheckpointRow>& rows, std::int64_t run_id,
                               const std::string& config_hash, torch::nn::Module& model,
                               torch::optim::Optimizer* optimizer, torch::Device device) {
  const auto run = "run " + std::to_string(run_id);
  if (rows.empty()) throw CheckpointError(run + " has no checkpoint to resume from");
  ResumePoint point;
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    try {
      if (it->crc32) verify_checkpoint_file(it->path, *it->crc32);
      const CheckpointExpectation expect{it->step, run_id, config_hash};
      point.meta = load_checkpoint(it->path, model, optimizer, device, &expect);
      point.path = it->path;
      return point;
    } catch (const CheckpointError& e) {
      logger("train")->warn("{}: cannot resume from the checkpoint of step {}: {}", run, it->step, e.what());
      point.passed_over.push_back("step " + std::to_string(it->step) + ": " + e.what());
    }
  }
  std::string why;
  for (const auto& p : point.passed_over) why += "; " + p;
  throw CheckpointError(run + " has no intact checkpoint to resume from" + why);
}

}  // namespace routelab
