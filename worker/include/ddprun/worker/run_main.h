#pragma once

#include <exception>
#include <functional>
#include <string>

#include "ddprun/worker/errors.h"

namespace ddprun::worker {

// Runs `fn` and turns any escaping exception into torchrun's error report:
//  - writes TORCHELASTIC_ERROR_FILE (when set and non-empty) as
//    {"message": {"message": "<Type>: <what>",
//                 "extraInfo": {"py_callstack": "<context>",
//                               "timestamp": "<epoch seconds>"}}}
//    (torchrun's errors/error_handler.py schema; the launcher copies it as
//    the root cause). The file is written atomically (temp + rename).
//  - prints "[rank R] <Type>: <what>" to stderr,
//  - returns the exit code (see errors.h): WorkerError::exit_code(),
//    kExitCollective for Torch/Gloo errors that look like a failed
//    collective or store (c10d/Gloo timeout, connection reset/closed),
//    kExitFailure for anything else.
// Before fn, checks LibTorch's oneDNN convolutions on this CPU
// (EnsureCpuConvolutionsAgree in cpu_convolution_check.h).
// Returns fn's return value when it does not throw. Typical use:
//   int main(int argc, char** argv) {
//     return ddprun::worker::RunMain([&] { return Train(argc, argv); });
//   }
// Blocking: as long as fn. Not reentrant.
int RunMain(const std::function<int()>& fn);

// Exception classification and the error file, exposed for tests and for
// trainers that catch themselves.
struct ErrorReport {
  std::string type;     // "CollectiveError", "c10::Error", "std::bad_alloc"
  std::string message;  // what()
  std::string context;  // callstack/context text for py_callstack
  int exit_code = kExitFailure;
};

// Describes the exception `e` (from std::current_exception()).
ErrorReport DescribeException(std::exception_ptr e);

// JSON text of the torchrun error file for `report` at `epoch_seconds`.
std::string ErrorFileJson(const ErrorReport& report, long long epoch_seconds);

// Writes ErrorFileJson(report, now) to `path` atomically. Returns false
// (and prints why to stderr) when the file cannot be written.
bool WriteErrorFile(const std::string& path, const ErrorReport& report);

}  // namespace ddprun::worker
