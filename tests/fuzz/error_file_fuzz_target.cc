// libFuzzer target over the agent's reading of a worker's error file
// (TORCHELASTIC_ERROR_FILE, agent/elastic/failure_report.h): the file as
// MakeProcessFailure reads it from disk, the failure table, and the root
// cause's copy the agent writes as its own error file.
//
// Input: the error file's bytes (torchrun's schema: {"message": {"message":
// ..., "extraInfo": {"py_callstack": ..., "timestamp": ...}}} or
// {"message": "...", "timestamp": ...}).
//
// Invariants (abort() on violation): a file that is read keeps its text;
// a file that is not gives the table's placeholders (<N/A>, the time it
// failed); the table has torchrun's frame (border, the "Root Cause"
// section) and the failure's traceback for any content; the copy written
// for a file that was read is JSON that parses back, with "errorCode"
// inside an object "message".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/elastic/failure_report.h"
#include "fuzz_check.h"
#include "fuzz_temp_dir.h"

using ddprun::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddprun::agent;
  static const ddprun::fuzz::FuzzTempDir dir;
  const std::string path = dir.Write("error.json", data, size);
  constexpr double kNow = 1700000000.0;
  const ProcessFailure f = MakeProcessFailure(1, 3, 4242, 1, path, kNow);
  const bool read = f.error_file == path;
  if (read) {
    Check(
        f.error_json == std::string(reinterpret_cast<const char*>(data), size),
        "the error file's text changed");
  } else {
    Check(f.error_file == kNotAvailable && f.error_json.empty() &&
              f.timestamp == static_cast<int64_t>(kNow),
          "an unread error file left fields behind");
  }
  ProcessFailure other =
      MakeProcessFailure(0, 2, 4241, -9, dir.path() + "/absent", kNow);
  const std::string table = FormatFailureTable("train.py", {other, f}, "host");
  Check(table.rfind("\n=", 0) == 0, "the table does not start with a border");
  Check(table.find("Root Cause (first observed failure):") != std::string::npos,
        "the table has no root cause");
  const std::string dest = dir.path() + "/agent_error.json";
  const ddprun::Status dumped = DumpRootCauseErrorFile(f, dest);
  if (read) {
    Check(dumped.ok(), "the copy of a read error file failed");
    const nlohmann::json copy =
        nlohmann::json::parse(ddprun::fuzz::ReadBytes(dest), nullptr, false);
    Check(!copy.is_discarded(), "the copy is not JSON");
    const auto message = copy.find("message");
    Check(message != copy.end(), "the copy lost its message");
    if (message->is_object()) {
      Check(message->value("errorCode", 0) == 1,
            "the copy's message has no errorCode");
    }
  }
  return 0;
}
