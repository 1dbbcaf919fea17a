// WorkerStore: the run-store connection of a worker thread (the Compare view's, a figure panel's). Opened on first
// use, for reading and the analyses kept there (marking crashed runs is the StoreService's job), and dropped after a
// store error, to be opened again by the next request: the file may be replaced or unlocked by then.
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "core/store/run_store.h"

namespace routelab {

class WorkerStore {
 public:
  explicit WorkerStore(std::string path) : path_(std::move(path)) {}

  RunStore& open() {
    if (!store_) store_ = std::make_unique<RunStore>(path_, /*mark_crashed=*/false);
    return *store_;
  }
  /// After a StoreError: the next open() opens the file again.
  void reset() { store_.reset(); }

 private:
  std::string path_;
  std::unique_ptr<RunStore> store_;
};

}  // namespace routelab
