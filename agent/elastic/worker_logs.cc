#include "agent/elastic/worker_logs.h"

#include <unistd.h>

#include <tuple>

#include "agent/cli/log_line_prefix.h"
#include "agent/elastic/log_dir.h"

namespace ddprun::agent {
namespace {

bool Has(StdStreams mask, StdStreams bit) {
  return (static_cast<int>(mask) & static_cast<int>(bit)) != 0;
}

// Python's socket.gethostname(): the ${hostname} of a line prefix.
std::string ShortHostname() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

WorkerLogs::WorkerLogs(const LaunchOptions* launch, std::string run_log_dir,
                       Console* console)
    : launch_(launch),
      run_log_dir_(std::move(run_log_dir)),
      console_(console),
      hostname_(ShortHostname()) {}

Status WorkerLogs::StartAttempt(int restart_count) {
  attempt_dir_ = run_log_dir_ + "/attempt_" + std::to_string(restart_count);
  filtered_out_.reset();
  filtered_err_.reset();
  if (!files()) return Status::Ok();
  DDP_RETURN_IF_ERROR(RecreateDir(attempt_dir_));
  return OpenFilteredLogs();
}

Status WorkerLogs::OpenFilteredLogs() {
  const LaunchOptions& o = *launch_;
  for (auto [needles, log, name] :
       {std::tuple{&o.duplicate_stdout_filters, &filtered_out_,
                   "/filtered_stdout.log"},
        std::tuple{&o.duplicate_stderr_filters, &filtered_err_,
                   "/filtered_stderr.log"}}) {
    if (needles->empty()) continue;
    *log = std::make_unique<FilteredLog>(attempt_dir_ + name, *needles);
    DDP_RETURN_IF_ERROR((*log)->Open());
  }
  return Status::Ok();
}

StatusOr<WorkerLogs::Rank> WorkerLogs::OpenRank(int local_rank, int rank,
                                                int node_rank) {
  const LaunchOptions& o = *launch_;
  Rank out;
  if (files()) {
    out.dir = attempt_dir_ + "/" + std::to_string(local_rank);
    DDP_RETURN_IF_ERROR(MakeDirs(out.dir));
  }
  PrefixValues values;
  values.role = o.role;
  values.rank = rank;
  values.local_rank = local_rank;
  values.hostname = hostname_;
  values.node_rank = node_rank;
  values.local_world_size = o.nproc_per_node;
  DDP_ASSIGN_OR_RETURN(std::string prefix,
                       LogLinePrefix(o.log_line_prefix_template, values));
  const bool shown = !o.local_ranks_filter.has_value() ||
                     o.local_ranks_filter->count(local_rank) > 0;
  const StdStreams redirect =
      files() ? o.redirects.ForRank(local_rank) : StdStreams::kNone;
  const StdStreams tee =
      files() ? o.tee.ForRank(local_rank) : StdStreams::kNone;
  auto make = [&](StdStreams bit, const char* file, Console::Stream stream,
                  FilteredLog* filtered) {
    WorkerOutput::Options wo;
    if (Has(redirect, bit) || Has(tee, bit))
      wo.file_path = out.dir + "/" + file;
    wo.to_console = shown && (!Has(redirect, bit) || Has(tee, bit));
    wo.prefix = prefix;
    wo.stream = stream;
    wo.live = console_->IsTerminal(stream);
    // torchrun copies the tee'd streams of the ranks it shows.
    if (shown && Has(tee, bit)) wo.filtered = filtered;
    return std::make_unique<WorkerOutput>(wo, console_);
  };
  out.out = make(StdStreams::kOut, "stdout.log", Console::Stream::kOut,
                 filtered_out_.get());
  out.err = make(StdStreams::kErr, "stderr.log", Console::Stream::kErr,
                 filtered_err_.get());
  DDP_RETURN_IF_ERROR(out.out->Open());
  DDP_RETURN_IF_ERROR(out.err->Open());
  return out;
}

}  // namespace ddprun::agent
