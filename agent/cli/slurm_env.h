#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// SLURM's compressed host lists, as in SLURM_JOB_NODELIST and
// `scontrol show hostnames`: comma-separated entries, each a name with
// bracketed range groups, e.g. "node[01-03,07],gpu5" -> node01 node02 node03
// node07 gpu5. A range keeps the zero padding of its lower bound ("08-10" ->
// 08 09 10). Several groups in one entry expand as a product, the leftmost
// group outermost ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). Order is kept,
// duplicates are not removed.
// Errors: kInvalidArgument naming `source` for an empty entry, an unbalanced
// or empty bracket, a non-numeric or descending range, or more than
// `max_hosts` names in all.
StatusOr<std::vector<std::string>> ExpandSlurmNodelist(
    const std::string& source, const std::string& list,
    std::size_t max_hosts = 100000);

// The rendezvous port of a SLURM job: 20000 + job_id % 10000, the rule of
// docker/slurm/ddprun.sbatch (one port per job, below Linux's ephemeral
// range, so jobs sharing their first node do not share a rendezvous).
int SlurmRendezvousPort(unsigned long long job_id);

// "first-host:port" for a job: the first host of `nodelist`
// (SLURM_JOB_NODELIST) and SlurmRendezvousPort(`job_id`) (SLURM_JOB_ID, a
// non-negative integer). Errors name the variable and its value.
StatusOr<std::string> SlurmRendezvousEndpoint(const std::string& nodelist,
                                              const std::string& job_id);

}  // namespace ddprun::agent
