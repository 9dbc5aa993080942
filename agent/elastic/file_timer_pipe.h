#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "agent/elastic/file_timer_server.h"
#include "common/event_loop.h"
#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// Where the agent serves torch's FileTimer pipe, as torch's
// LocalElasticAgent._setup_local_watchdog decides: "" unless `env` (the
// agent's environment) has TORCHELASTIC_ENABLE_FILE_TIMER=1; then
// TORCHELASTIC_TIMER_FILE, else $TMPDIR (else /tmp)/watchdog_timer_<uuid4>
// (torch 2.x: tempfile.gettempdir()).
std::string FileTimerPath(const std::map<std::string, std::string>& env);

// The agent's end of torch's FileTimer pipe (TORCHELASTIC_ENABLE_FILE_TIMER
// =1; torch's LocalElasticAgent._setup_local_watchdog): a named pipe that
// workers' FileTimerClient writes one JSON request per line into
// (file_timer_server.h), and a poll every 100 ms on the agent's loop
// (torch's FileTimerServer runs with max_interval=0.1) that reads what
// arrived, keeps the timers and reports each expired scope, measured
// against the loop clock's wall time, to `on_expired`.
//
// The pipe stays open for reading (non-blocking) for the object's life:
// a client's O_NONBLOCK open fails (ENXIO) when no reader has the pipe
// open, which torch's client reports as "FileTimerServer is not
// available". Reads never block the loop; a line that is not a request is
// dropped with one warning. Timers of processes that no longer exist are
// forgotten (torch 2.x). Confined to the loop thread.
class FileTimerPipe {
 public:
  using ExpiredFn = std::function<void(const ExpiredTimer&)>;
  using AliveFn = std::function<bool(int pid)>;

  // Creates the FIFO at `path` (mode 0600; a file already there is removed
  // first, as torch does) and starts polling. `on_expired` runs on the
  // loop. `alive` says whether a pid still runs (null: kill(pid, 0)).
  // Errors: the FIFO cannot be made or opened (errno in the message).
  static StatusOr<std::unique_ptr<FileTimerPipe>> Create(
      EventLoop* loop, std::string path, ExpiredFn on_expired,
      AliveFn alive = nullptr);
  // Stops polling, closes and removes the FIFO.
  ~FileTimerPipe();
  FileTimerPipe(const FileTimerPipe&) = delete;
  FileTimerPipe& operator=(const FileTimerPipe&) = delete;

  const std::string& path() const { return path_; }
  // Forgets every timer (a new worker group: the old pids are gone).
  void Reset() { server_.Clear(); }
  // Reads what is in the pipe and reports what expired, now (the poll
  // does this every 100 ms).
  void Poll();

 private:
  FileTimerPipe(EventLoop* loop, std::string path, int fd, ExpiredFn on_expired,
                AliveFn alive);
  void Arm();

  EventLoop* loop_;
  std::string path_;
  int fd_;
  ExpiredFn on_expired_;
  AliveFn alive_;
  FileTimerServer server_;
  std::string pending_;  // bytes after the last '\n'
  EventLoop::TimerId timer_ = 0;
  bool armed_ = false;
};

}  // namespace ddprun::agent
