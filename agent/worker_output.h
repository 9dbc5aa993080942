#pragma once

#include <string>
#include <string_view>

#include "agent/console.h"
#include "agent/line_splitter.h"
#include "common/status.h"

namespace ddprun::agent {

// One standard stream of one worker, as torchrun's redirects and tee define
// it: to a log file (redirect), to the console (no redirect), or both (tee).
// Console lines carry the `[<role><local_rank>]:` prefix and are written whole
// (a partial line waits for its end; it is flushed at EOF), so lines of
// different workers never interleave mid-line. The file gets the raw bytes.
// Confined to the agent's loop thread.
class WorkerOutput {
 public:
  struct Options {
    std::string file_path;  // empty: no file
    bool to_console = true;
    std::string prefix;  // e.g. "[default0]:"
    Console::Stream stream = Console::Stream::kOut;
  };

  WorkerOutput(Options options, Console* console);
  ~WorkerOutput();
  WorkerOutput(const WorkerOutput&) = delete;
  WorkerOutput& operator=(const WorkerOutput&) = delete;

  // Creates the file (truncating). Errors: the file cannot be created.
  Status Open();
  void OnChunk(std::string_view chunk);
  // The worker exited: flushes a pending partial line and closes the file.
  void OnEof();

 private:
  Options options_;
  Console* console_;  // not owned
  int fd_ = -1;
  LineSplitter splitter_;
};

}  // namespace ddprun::agent
