#pragma once

#include <cstdint>
#include <string>

#include "agent/elastic/failure_report.h"
#include "ddprun/common/status.h"

namespace ddprun::agent {

// What a rank replaced alone under --restart_scope failed leaves in its rank
// directory (<log_dir>/attempt_<n>/<local_rank>/, docs/restart_scope.md, "On
// disk"), so that the files of a job say which process failed, that it was
// replaced, and how the heal went:
//   replaced_g<G>.json        the record below (G: the replacement's
//                             generation), written before the replacement
//                             starts and rewritten once the heal is decided;
//   error.replaced_g<G>.json  the failed process's error.json (torchrun's
//                             schema), moved out of the way: the replacement
//                             runs with the same TORCHELASTIC_ERROR_FILE, and
//                             its own failure, if any, must land in a clean
//                             error.json as torchrun's readers expect.
// The record is one JSON object:
//   {"rank": R, "local_rank": L, "generation": G, "reason": "<one line>",
//    "pid": P, "exitcode": E (negative: killed by signal -E),
//    "failed_at": unix seconds of the failure,
//    "error": {the failed process's error.json} (absent when it wrote none),
//    "heal": null | {"source": S, "seconds": X} | {"failed": "<why>"}}
//
// Every write is atomic (a temporary file in the same directory, fsync,
// rename: WriteFileAtomically), so a reader sees a whole record or none.
// Errors are returned as Status, never thrown; the agent logs them as
// warnings and goes on (a record is a report, never a reason to stop a job).
// Blocking file I/O of a few hundred bytes: called on the agent's loop, as
// the error files are read there. Not thread-safe; one object per
// replacement.
class ReplacementRecord {
 public:
  // The file names in a rank directory, for generation `generation`.
  static std::string FileName(int64_t generation);
  static std::string MovedErrorFileName(int64_t generation);

  // The record of `failed` (its local and global rank, pid, exit code,
  // timestamp and, when it wrote one, its parsed error file), replaced by
  // generation `generation` for `reason`, in `rank_dir`. Writes nothing.
  ReplacementRecord(std::string rank_dir, const ProcessFailure& failed,
                    int64_t generation, std::string reason);

  // Writes the record with "heal": null, then moves <rank_dir>/error.json,
  // when there is one, to error.replaced_g<G>.json. Call before the
  // replacement starts. Errors: the record cannot be written (nothing is
  // moved then), or the error file cannot be moved (the record is
  // written).
  Status Begin();
  // Rewrites the record with "heal": {"source": source, "seconds": seconds}.
  Status Healed(int source, double seconds);
  // Rewrites the record with "heal": {"failed": why} (the replacement gave
  // up, the group restarts or stops).
  Status HealFailed(const std::string& why);

  const std::string& path() const { return path_; }
  // Where Begin() moved the failed process's error file, "" when it did not.
  const std::string& moved_error_file() const { return moved_error_file_; }
  int local_rank() const { return local_rank_; }
  int64_t generation() const { return generation_; }
  // The heal is decided (Healed or HealFailed was called).
  bool decided() const { return heal_ != Heal::kPending; }

 private:
  enum class Heal { kPending, kHealed, kFailed };
  Status Write() const;

  const std::string rank_dir_;
  const std::string path_;
  const int rank_;
  const int local_rank_;
  const int64_t generation_;
  const std::string reason_;
  const int pid_;
  const int exitcode_;
  const int64_t failed_at_;
  const std::string error_json_;  // the failed process's file, "" if none
  std::string moved_error_file_;
  Heal heal_ = Heal::kPending;
  int source_ = -1;
  double seconds_ = 0;
  std::string failed_why_;
};

}  // namespace ddprun::agent
