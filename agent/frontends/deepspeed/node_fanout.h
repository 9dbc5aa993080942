#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ddprun::agent {

// One node's launcher, started by the multi-node front end
// (ddprun-deepspeed): a local ddprun agent, or `ssh host ddprun ...`.
struct NodeProcess {
  std::string name;               // for messages: "node 1 (10.0.0.2)"
  std::vector<std::string> argv;  // argv[0]: a path or a name on env PATH
  std::map<std::string, std::string> env;  // its complete environment
  // argv[0] is run with this as its argv[0] ("" = argv[0]): the same
  // binary started under its ddprun-deepspeed name.
  std::string exec_path;
  // Give it a pipe as stdin that is closed to ask it to stop (ssh: the
  // remote ddprun sees EOF and stops its workers); otherwise it gets
  // /dev/null and SIGTERM.
  bool stop_by_closing_stdin = false;
};

struct FanOutTimeouts {
  // After the first node fails, how long the others get to fail or finish
  // on their own (they learn it from the rendezvous) before they are asked
  // to stop.
  std::chrono::milliseconds after_failure{60000};
  // After asking a node to stop, how long until SIGKILL.
  std::chrono::milliseconds stop_grace{45000};
};

// Starts every node process and supervises them until all have exited:
// - SIGINT/SIGTERM/SIGHUP/SIGQUIT to this process asks every node to stop
//   (closes the stdin pipes, SIGTERM to the others);
// - after the first node exits non-zero, the rest get
//   `after_failure`, then are asked to stop;
// - a node asked to stop that is still there after `stop_grace` gets
//   SIGKILL (its process group).
// Children die with this process (PR_SET_PDEATHSIG) and start with no
// signal blocked. Must be called before any other thread exists (it blocks
// the signals above in the calling thread and waits for them).
// Returns 0 when every node exited 0, 128+N when stopped by signal N, else
// the first failing node's exit code (128+N for a node killed by N); 127
// when a node could not be started (after stopping the ones started).
int RunNodeProcesses(const std::vector<NodeProcess>& nodes,
                     const FanOutTimeouts& timeouts);

}  // namespace ddprun::agent
