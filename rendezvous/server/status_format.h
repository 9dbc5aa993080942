#pragma once

#include <string>

#include "ddprun/v1/rendezvous.pb.h"

namespace ddprun::rendezvous {

// `ddprun-rendezvous --status` output: one block per job (state, round,
// restarts, reason) and a table of its nodes (id, state, group rank, rank
// offset, nproc, address, heartbeat age), sorted by group rank.
std::string FormatStatusTable(const v1::StatusResponse& status);

// The same as one JSON document: {"jobs":[{...,"nodes":[...]}]}.
std::string FormatStatusJson(const v1::StatusResponse& status);

}  // namespace ddprun::rendezvous
