#pragma once

#include <stdexcept>
#include <string>

namespace ddprun::worker {

// Exit codes used by RunMain (run_main.h). A launcher restarts on any
// non-zero code; the codes only help a human (and the failure table) tell
// the classes apart.
//   1  kExitFailure     uncaught exception in the trainer (bug, bad data)
//   2  kExitUsage       bad configuration: env contract, flags, files
//   75 kExitCollective  a collective or the store failed or timed out (peer
//                       died, network); restartable (sysexits EX_TEMPFAIL)
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitCollective = 75;

// Base of the exceptions thrown by the worker runtime. The worker runtime
// is data-plane code inside a Torch process where Torch itself throws, so
// it reports errors by exception; RunMain is the one place that catches.
class WorkerError : public std::runtime_error {
 public:
  explicit WorkerError(const std::string& what) : std::runtime_error(what) {}
  // Exit code RunMain uses for this error.
  virtual int exit_code() const { return kExitFailure; }
  // Name written in the error file, e.g. "WorkerError".
  virtual const char* type_name() const { return "WorkerError"; }
};

// Invalid configuration (env contract, options, checkpoint dir).
class ConfigError : public WorkerError {
 public:
  using WorkerError::WorkerError;
  int exit_code() const override { return kExitUsage; }
  const char* type_name() const override { return "ConfigError"; }
};

// A collective, the process group or the store failed or timed out (a peer
// never arrived or died). Restartable: the launcher should restart the
// group. Collective wrappers in this library rethrow Torch/Gloo errors as
// CollectiveError with the operation named in the message.
class CollectiveError : public WorkerError {
 public:
  using WorkerError::WorkerError;
  int exit_code() const override { return kExitCollective; }
  const char* type_name() const override { return "CollectiveError"; }
};

}  // namespace ddprun::worker
