// One process group of a data-parallel run, on PyTorch's c10d: the TCPStore rendezvous and the Gloo (CPU) or NCCL
// (CUDA) backend. The c10d and Gloo headers stay in collective.cpp; everything here reports failures as DistError.
#pragma once
#include <memory>
#include <string>

#include <torch/torch.h>

#include "core/dist/launch_env.h"

namespace routelab {

/// A collective that was started and not yet waited for.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  /// Blocks until it completed; a DistError when a rank died or did not answer within the group's timeout.
  virtual void wait() = 0;
};

class Collective {
 public:
  /// Joins the group of `env`: meets the other ranks at env.master_addr:master_port (rank 0 serves the store unless
  /// torchrun's agent does) and opens `backend` ("gloo", "nccl", or "auto": NCCL for a CUDA device, else Gloo) on
  /// `device`. The rendezvous and every collective give up after `timeout_s`. A DistError (naming the address, the
  /// backend and this rank) when the group cannot be formed; a ConfigError naming run.backend for a backend this
  /// build or device cannot use.
  static std::shared_ptr<Collective> join(const DistEnv& env, const torch::Device& device, const std::string& backend,
                                          double timeout_s);
  ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  int rank() const;
  int world_size() const;
  const std::string& backend() const;  ///< "gloo" or "nccl"
  const DistEnv& env() const;
  /// The device collectives run on: the CPU for Gloo, this rank's GPU for NCCL.
  torch::Device device() const;
  /// "gloo, 2 ranks, rank 0 (local 0 of 2), rendezvous 127.0.0.1:41234, routelab --nproc".
  std::string describe() const;

  /// Sums `tensor` over the ranks in place; the work runs on the backend's threads or stream until waited for.
  std::unique_ptr<PendingCollective> all_reduce_sum_async(torch::Tensor& tensor);
  void all_reduce_sum(torch::Tensor& tensor);
  /// Rank `root`'s values of `tensor` on every rank.
  void broadcast(torch::Tensor& tensor, int root = 0);
  /// Rank `root`'s `text` on every rank.
  std::string broadcast_string(const std::string& text, int root = 0);
  void barrier();

  /// Whether this build can open `backend` ("gloo", "nccl").
  static bool backend_available(const std::string& backend);

  struct Impl;  ///< c10d's objects (collective.cpp)

 private:
  explicit Collective(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace routelab
