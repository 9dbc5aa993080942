#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ddprun/common/status.h"

namespace ddprun::agent {

// torchrun's --duplicate_stdout_filters / --duplicate_stderr_filters: the
// lines of several workers' streams that contain any of `needles` (plain
// substrings, matched against the line as the worker wrote it) are copied,
// with the worker's console prefix, into one file:
// attempt_<k>/filtered_stdout.log or filtered_stderr.log. Which streams
// feed it is the caller's choice (torchrun: the tee'd ones of the ranks
// --local_ranks_filter shows). A full disk loses copied lines, never
// stops the agent. Confined to the agent's loop thread.
class FilteredLog {
 public:
  FilteredLog(std::string path, std::vector<std::string> needles);
  ~FilteredLog();
  FilteredLog(const FilteredLog&) = delete;
  FilteredLog& operator=(const FilteredLog&) = delete;

  // Creates the file, truncating it (torch opens it with mode "w" for each
  // attempt, so it exists even when no line matches). Errors: the file
  // cannot be created.
  Status Open();
  // One whole line of a worker (ending in '\n'), shown with `prefix`:
  // written as prefix + line when it contains a needle.
  void Offer(std::string_view prefix, std::string_view line);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> needles_;
  int fd_ = -1;
};

}  // namespace ddprun::agent
