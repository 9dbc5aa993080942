#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "ddprun/v1/rendezvous.pb.h"

namespace ddprun::rendezvous::http {

// The live view's JSON (GET /api/v1/jobs, /api/v1/jobs/<id>; the schema is
// in README.md, "The live view"): one object per job, rank-centred, from
// the Status the server holds. Every string in it came from the network;
// JSON escapes it, and the page only ever sets it as text.
using Json = nlohmann::ordered_json;

// One job. `latest_stacks`: the job's newest stack dump (null: none), whose
// ranks give the hang diagnosis paragraph.
Json JobToJson(const v1::JobStatus& job,
               const v1::StacksResponse* latest_stacks);

// "running" for JobStatus::STATE_RUNNING, "round_ended" for
// JobEvent::KIND_ROUND_ENDED, ...: the enum value's name in lower case
// without its prefix.
std::string JobStateName(v1::JobStatus::State state);
std::string NodeStateName(v1::NodeStatus::State state);
std::string RankStateName(v1::RankRate::State state);
std::string EventKindName(v1::JobEvent::Kind kind);

// Seconds until `rate` reaches `total_steps` from `steps`; < 0 when not
// known (no total, no rate yet, or already past it).
double EtaSeconds(int64_t steps, int64_t total_steps, double steps_per_s);

}  // namespace ddprun::rendezvous::http
