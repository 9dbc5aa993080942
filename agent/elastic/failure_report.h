#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ddprun/common/status.h"

namespace ddprun::agent {

// torchrun's placeholder for a missing error file.
inline constexpr const char* kNotAvailable = "<N/A>";

// One failed worker, as torchrun's ProcessFailure: built from the worker's
// exit and its TORCHELASTIC_ERROR_FILE when the worker wrote one.
struct ProcessFailure {
  int local_rank = 0;
  int global_rank = 0;
  int pid = 0;
  int exitcode = 0;        // negative: killed by signal -exitcode
  std::string error_file;  // path, or kNotAvailable when no file was written
  std::string error_json;  // the file's content ("" without a file)
  // The table's traceback: extraInfo.py_callstack (else message.message) of
  // a torchrun-schema file, the plain-string message form as is, or the
  // signal / docs line torchrun prints when there is no file.
  std::string traceback;
  int64_t timestamp = 0;  // seconds since the epoch (file's, else now)
};

// The largest error file read (a Python traceback is kilobytes).
inline constexpr size_t kMaxErrorFile = size_t{8} << 20;
// JSON nested deeper than this is not an error file (and would overflow
// the stack when written back out).
inline constexpr int kMaxErrorFileDepth = 256;

// Reads `error_file` if it exists and fills a ProcessFailure. A file that is
// not valid JSON or lacks the schema's fields is treated as missing (with a
// warning) instead of aborting the report, and so is one that is not a
// regular file (a FIFO does not block) or is over kMaxErrorFile bytes.
// `now_wall` (epoch seconds) is the timestamp of failures without a file.
ProcessFailure MakeProcessFailure(int local_rank, int global_rank, int pid,
                                  int exitcode, const std::string& error_file,
                                  double now_wall);

// Fills f->traceback and f->timestamp from an error file's text; false when
// it is not JSON (or nested deeper than kMaxErrorFileDepth) or follows
// neither of torchrun's forms (f is then unspecified). What
// MakeProcessFailure does with a file's content.
bool ParseErrorFile(const std::string& text, ProcessFailure* f);

// Index of the root cause: the earliest timestamp, the first one on ties.
// `failures` must not be empty.
size_t RootCauseIndex(const std::vector<ProcessFailure>& failures);

// torchrun's ChildFailedError message, byte for byte: starts with "\n", a
// '=' border of width min(60, widest line), "<name> FAILED", Failures: (or
// <NO_OTHER_FAILURES>), Root Cause (first observed failure):, and one
// [idx]: block per failure (time in local time, YYYY-MM-DD_HH:MM:SS).
std::string FormatFailureTable(const std::string& name,
                               const std::vector<ProcessFailure>& failures,
                               const std::string& hostname);

// Copies the root cause's error file to `dest` (the agent's own
// TORCHELASTIC_ERROR_FILE), adding "errorCode": exitcode inside "message"
// when the message is an object and the exit code is non-zero, as torchrun's
// ErrorHandler.dump_error_file. No-op when the root has no error file.
Status DumpRootCauseErrorFile(const ProcessFailure& root,
                              const std::string& dest);

// The host name as Python's socket.getfqdn() prints it (the reverse lookup
// of gethostname()'s address, preferring a dotted alias; gethostname() when
// the lookups fail). Blocking (resolver); call once at start-up.
std::string FullyQualifiedHostname();

}  // namespace ddprun::agent
