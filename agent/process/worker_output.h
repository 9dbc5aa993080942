#pragma once

#include <string>
#include <string_view>

#include "agent/process/console.h"
#include "agent/process/filtered_log.h"
#include "agent/process/line_splitter.h"
#include "ddprun/common/status.h"

namespace ddprun::agent {

// One standard stream of one worker, as torchrun's redirects and tee define
// it: to a log file (redirect), to the console (no redirect), or both (tee).
// Console lines carry the `[<role><local_rank>]:` prefix and are written whole
// (a partial line waits for its end; it is flushed at EOF), so lines of
// different workers never interleave mid-line. The file gets the raw bytes.
// Live mode (Options::live, for a console that is a terminal): a line with a
// '\r' in it reaches the console as it arrives, the prefix put at its start
// and after every '\r' that more text follows (a progress bar redrawn with
// '\r' moves behind its prefix), less an incomplete UTF-8 character; a plain
// partial line still waits for its end; another worker's output first ends
// an unfinished line (Console::WriteLive). Confined to the agent's loop
// thread.
class WorkerOutput {
 public:
  struct Options {
    std::string file_path;  // empty: no file
    bool to_console = true;
    std::string prefix;  // e.g. "[default0]:"
    Console::Stream stream = Console::Stream::kOut;
    bool live = false;
    // --duplicate_std*_filters: every whole line is also offered to this
    // log (with `prefix`); null = none. Must outlive this object.
    FilteredLog* filtered = nullptr;
  };

  WorkerOutput(Options options, Console* console);
  ~WorkerOutput();
  WorkerOutput(const WorkerOutput&) = delete;
  WorkerOutput& operator=(const WorkerOutput&) = delete;

  // Creates the file (truncating). Errors: the file cannot be created.
  Status Open();
  // Opens the file again after OnEof, appending (a worker replaced alone
  // under --restart_scope failed writes on in its rank's file).
  Status Reopen();
  void OnChunk(std::string_view chunk);
  // The worker exited: flushes a pending partial line and closes the file.
  void OnEof();
  // Live on a terminal console and kept in no file: the worker may write
  // to a terminal of its own (escape sequences reach only the console).
  bool live_terminal() const {
    return options_.live && options_.to_console && options_.file_path.empty();
  }

 private:
  Options options_;
  Console* console_;  // not owned
  // Live mode: prefixes `bytes` and writes them.
  void WriteLive(std::string_view bytes);
  // Offers each whole line of `lines` ('\n'-terminated) to the filtered log.
  void OfferLines(const std::string& lines);

  int fd_ = -1;
  LineSplitter splitter_;
  LineSplitter filter_splitter_;  // lines for options_.filtered
  bool at_line_start_ = true;  // live: the next text needs the prefix
  std::string pending_;        // live: bytes not yet shown
};

}  // namespace ddprun::agent
