#pragma once

#include <memory>
#include <string>

#include "agent/cli/launch_options.h"
#include "agent/process/console.h"
#include "agent/process/filtered_log.h"
#include "agent/process/worker_output.h"
#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// The files and console streams of one attempt's workers, in torchrun's
// layout: `<run log dir>/attempt_<restart count>/<local rank>/` holds each
// rank's error.json, stdout.log and stderr.log (per -r/--redirects and
// -t/--tee), and the attempt's filtered_std{out,err}.log collect the lines
// of the ranks shown that match --duplicate_std*_filters. Console lines
// carry --log_line_prefix_template's prefix (default `[<role><rank>]:`);
// --local_ranks_filter hides the other ranks' lines from the console only.
// Without a run log directory (--log_dir /dev/null) there are no files and
// every stream goes to the console, as torchrun's DefaultLogsSpecs does.
//
// Confined to the agent's loop thread. `launch` and `console` must outlive
// this object; the outputs it opens write to its filtered logs, so they
// must go before it or before the next StartAttempt.
class WorkerLogs {
 public:
  // One rank's log folder ("" without files) and its two streams, open.
  struct Rank {
    std::string dir;
    std::unique_ptr<WorkerOutput> out;
    std::unique_ptr<WorkerOutput> err;
  };

  WorkerLogs(const LaunchOptions* launch, std::string run_log_dir,
             Console* console);
  WorkerLogs(const WorkerLogs&) = delete;
  WorkerLogs& operator=(const WorkerLogs&) = delete;

  // Whether there are log files at all.
  bool files() const { return !run_log_dir_.empty(); }

  // A new attempt: attempt_<restart_count> made anew (a scaling event can
  // keep the number) with its filtered logs. Errors: a folder or file
  // cannot be created (the message names it).
  Status StartAttempt(int restart_count);

  // Rank `local_rank`'s folder (created) and open streams; `rank` and
  // `node_rank` fill the line prefix. Errors: a folder or file cannot be
  // created, or the prefix template is not valid.
  StatusOr<Rank> OpenRank(int local_rank, int rank, int node_rank);

 private:
  Status OpenFilteredLogs();

  const LaunchOptions* const launch_;
  const std::string run_log_dir_;
  Console* const console_;
  const std::string hostname_;  // the prefix's ${hostname}
  std::string attempt_dir_;     // of the current attempt
  // The attempt's filtered_std{out,err}.log; null = none.
  std::unique_ptr<FilteredLog> filtered_out_;
  std::unique_ptr<FilteredLog> filtered_err_;
};

}  // namespace ddprun::agent
