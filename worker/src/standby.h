#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"

namespace ddprun::worker {

// The worker half of ddprun's standby worker (--standby_workers,
// docs/restart_scope.md): a process started with the agent's command and
// DDPRUN_STANDBY_FD=<fd>, one end of a stream socket to its agent, waits
// outside the world with its libraries loaded until the agent hands it a
// rank. The protocol on that fd:
//   standby -> agent: "ready\n" once it waits;
//   agent -> standby: the rank's whole environment, KEY=VALUE entries each
//   ended by '\0', and one more '\0' after the last.
// EOF before the message is complete means the agent wants no takeover
// (the group stopped, the job ended).

using EnvList = std::vector<std::pair<std::string, std::string>>;

// Parses one message (its final "\0\0" included). Errors (kInvalidArgument,
// naming the entry): no final empty entry, bytes after it, an entry with no
// '=' or an empty or '='-led name, a name given twice, no entry at all.
StatusOr<EnvList> ParseStandbyEnv(std::string_view message);

// Writes "ready\n" to `fd`, then reads one message from it (blocking: the
// standby has nothing else to do; the agent bounds the wait by killing it).
// Errors: kUnavailable on EOF before the message ends ("the agent closed
// the standby channel"), kInvalidArgument for a malformed message, an
// errno status for a failed read or write, kResourceExhausted past 16 MiB.
StatusOr<EnvList> ReceiveStandbyEnv(int fd);

// Makes `env` the process environment, exactly (clearenv, then setenv for
// each). Not thread-safe (nothing else may read the environment meanwhile).
Status ReplaceEnvironment(const EnvList& env);

// Called first in RunMain: without DDPRUN_STANDBY_FD, returns at once. With
// it, takes the rank the agent hands over (ReceiveStandbyEnv, then
// ReplaceEnvironment, then closes the fd) and returns; on any error prints
// one line to stderr and exits the process (0 when the agent closed the
// channel: the job no longer needs a standby; 2 otherwise).
void BecomeRankIfStandby();

}  // namespace ddprun::worker
