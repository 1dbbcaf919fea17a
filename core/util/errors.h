// Typed exceptions thrown by core/. They are caught only at boundaries (the CLI main, the GUI run worker).
#pragma once
#include <stdexcept>
#include <string>

namespace routelab {

/// Base of every error RouteLab reports to a user; what() is a complete one-line message.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A config value is unknown, of the wrong type, out of range or inconsistent; the message names the key path.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A corpus, dataset file or synthetic task cannot be used; the message names the file.
class DataError : public Error {
 public:
  using Error::Error;
};

/// A checkpoint cannot be written or read back.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// The run store cannot be opened, is foreign or newer, or a query failed.
class StoreError : public Error {
 public:
  using Error::Error;
};

/// A data-parallel peer failed: a rank died, did not answer in time, or runs another config or build.
class DistError : public Error {
 public:
  using Error::Error;
};

/// The requested device (e.g. cuda) is not available.
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// A failure from outside RouteLab's errors as a boundary reports it (errors.cpp), one line: LibTorch's message without
/// its C++ backtrace and context lines; `out_of_memory` set where an allocator refused (a size, batch or length too
/// large for the device).
std::string foreign_error_text(const std::exception& e, bool* out_of_memory = nullptr);

}  // namespace routelab
