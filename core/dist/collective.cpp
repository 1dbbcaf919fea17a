// c10d's TCPStore, PrefixStore and ProcessGroupGloo / ProcessGroupNCCL behind Collective. LibTorch 1.13's groups
// derive from c10d::ProcessGroup, 2.x's backends from c10d::Backend; both have the same collectives.
#include "core/dist/collective.h"

#include <chrono>
#include <cstring>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
#ifdef ROUTELAB_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "core/util/errors.h"
#include "core/util/logging.h"

namespace routelab {
namespace {

#if TORCH_VERSION_MAJOR >= 2
using GroupBase = c10d::Backend;
#else
using GroupBase = c10d::ProcessGroup;
#endif

/// The first line of a c10d message (they end in C++ stack traces).
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

struct Collective::Impl {
  DistEnv env;
  std::string backend;
  torch::Device device{torch::kCPU};
  std::chrono::milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<GroupBase> group;

  /// A DistError that says which collective of which rank failed, and the likely reason.
  [[noreturn]] void fail(const std::string& what, const std::exception& e) const {
    throw DistError("rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) + " (" + backend +
                    "): " + what + " failed: another rank stopped or did not answer within " +
                    std::to_string(timeout.count() / 1000) + " s (run.dist_timeout_s): " + first_line(e.what()));
  }

  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) const {
    try {
      work->wait(timeout);
    } catch (const std::exception& e) {
      fail(what, e);
    }
  }

  /// The work `start` begins (a c10d call), with its failures, starting or waiting, as DistErrors naming `what`.
  template <typename Start>
  c10::intrusive_ptr<c10d::Work> begin(const std::string& what, Start&& start) const {
    try {
      return start();
    } catch (const std::exception& e) {
      fail(what, e);
    }
  }
};

namespace {

class PendingWork : public PendingCollective {
 public:
  PendingWork(const Collective::Impl* owner, c10::intrusive_ptr<c10d::Work> work)
      : owner_(owner), work_(std::move(work)) {}
  void wait() override {
    if (work_) owner_->wait(work_, "all-reduce");
    work_.reset();
  }

 private:
  const Collective::Impl* owner_;
  c10::intrusive_ptr<c10d::Work> work_;
};

}  // namespace

Collective::Collective(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Collective::~Collective() {
#ifdef ROUTELAB_WITH_NCCL
  // A ProcessGroupNCCL left to its destructor warns that destroy_process_group() was never called and tears its
  // communicators down with the process: shut it down while the CUDA context and the store are alive, as PyTorch's
  // destroy_process_group does.
  if (impl_ && impl_->backend == "nccl" && impl_->group) {
    try {
      static_cast<c10d::ProcessGroupNCCL*>(impl_->group.get())->shutdown();
    } catch (const std::exception& e) {
      logger("dist")->warn("shutting NCCL down: {}", first_line(e.what()));
    }
  }
#endif
}

bool Collective::backend_available(const std::string& backend) {
  if (backend == "gloo") return true;
#ifdef ROUTELAB_WITH_NCCL
  if (backend == "nccl") return torch::cuda::is_available();
#endif
  return false;
}

std::shared_ptr<Collective> Collective::join(const DistEnv& env, const torch::Device& device,
                                             const std::string& backend, double timeout_s) {
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  impl->timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  impl->backend = backend == "auto" ? (device.is_cuda() && backend_available("nccl") ? "nccl" : "gloo") : backend;
  if (impl->backend != "gloo" && impl->backend != "nccl")
    throw ConfigError("run.backend: '" + backend + "' is not one of auto, gloo, nccl");
  if (!backend_available(impl->backend))
    throw ConfigError("run.backend: " + impl->backend + " is not available in this build" +
                      (impl->backend == "nccl" ? " (NCCL needs a CUDA LibTorch and a GPU: packaging/build.sh --torch "
                                                 "pip); gloo runs everywhere"
                                               : ""));
  impl->device = impl->backend == "nccl" ? device : torch::Device(torch::kCPU);
  auto meet = env;
#if TORCH_VERSION_MAJOR < 2
  // torchrun 2.x's agent serves its store in a newer protocol than LibTorch 1.13's client speaks (it drops the
  // connection): rank 0 serves one of its own on the next port, as with a launcher that has no store.
  if (meet.agent_store) {
    meet.agent_store = false;
    meet.master_port += 1;
  }
#endif
  const auto where = meet.master_addr + ":" + std::to_string(meet.master_port);
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(meet.master_port);
    options.isServer = meet.rank == 0 && !meet.agent_store;
    options.numWorkers = meet.world_size;
    options.waitWorkers = !meet.agent_store;
    options.timeout = impl->timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(meet.master_addr, options);
    impl->store = c10::make_intrusive<c10d::PrefixStore>("routelab", tcp);
  } catch (const std::exception& e) {
    throw DistError("rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                    ": no rendezvous at " + where + " within " + std::to_string(static_cast<int>(timeout_s)) +
                    " s (MASTER_ADDR, MASTER_PORT; are all ranks started?): " + first_line(e.what()));
  }
  try {
    if (impl->backend == "gloo") {
      auto options = c10d::ProcessGroupGloo::Options::create(impl->timeout);
      // GLOO_SOCKET_IFNAME names the network interface, as for PyTorch; one machine talks over the loopback.
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      else if (is_loopback(env.master_addr))
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      else
        options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      impl->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl->store, env.rank, env.world_size, options);
    } else {
#ifdef ROUTELAB_WITH_NCCL
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = impl->timeout;
      impl->group = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl->store, env.rank, env.world_size, options);
#endif
    }
  } catch (const std::exception& e) {
    throw DistError("rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) + ": cannot open " +
                    impl->backend + " with the ranks met at " + where + ": " + first_line(e.what()));
  }
  std::shared_ptr<Collective> out(new Collective(std::move(impl)));
  out->barrier();  // every rank is in: from here a missing rank is a failure, not a late start
  logger("dist")->info("joined: {}", out->describe());
  return out;
}

int Collective::rank() const { return impl_->env.rank; }
int Collective::world_size() const { return impl_->env.world_size; }
const std::string& Collective::backend() const { return impl_->backend; }
const DistEnv& Collective::env() const { return impl_->env; }
torch::Device Collective::device() const { return impl_->device; }

std::string Collective::describe() const {
  return impl_->backend + ", " + std::to_string(world_size()) + (world_size() == 1 ? " rank, " : " ranks, ") +
         impl_->env.describe();
}

std::unique_ptr<PendingCollective> Collective::all_reduce_sum_async(torch::Tensor& tensor) {
  std::vector<at::Tensor> tensors{tensor};
  return std::make_unique<PendingWork>(impl_.get(),
                                       impl_->begin("all-reduce", [&] { return impl_->group->allreduce(tensors); }));
}

void Collective::all_reduce_sum(torch::Tensor& tensor) { all_reduce_sum_async(tensor)->wait(); }

void Collective::broadcast(torch::Tensor& tensor, int root) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  impl_->wait(impl_->begin("broadcast", [&] { return impl_->group->broadcast(tensors, options); }), "broadcast");
}

std::string Collective::broadcast_string(const std::string& text, int root) {
  const auto on = torch::TensorOptions().device(impl_->device);
  auto size = torch::full({1}, static_cast<std::int64_t>(text.size()), on.dtype(torch::kLong));
  broadcast(size, root);
  const auto n = size.to(torch::kCPU).item<std::int64_t>();
  auto bytes = torch::zeros({n}, torch::kUInt8);
  // An empty text's tensor has no storage: memcpy with its null pointer is undefined even for 0 bytes (UBSan).
  if (rank() == root && n > 0) std::memcpy(bytes.data_ptr<std::uint8_t>(), text.data(), text.size());
  bytes = bytes.to(impl_->device);
  broadcast(bytes, root);
  bytes = bytes.to(torch::kCPU);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<std::uint8_t>()), static_cast<std::size_t>(n));
}

void Collective::barrier() {
  // An all-reduce of one number: a barrier that every backend times out the same way.
  auto one = torch::ones({1}, torch::TensorOptions().device(impl_->device));
  all_reduce_sum(one);
}

}  // namespace routelab
