#pragma once

#include <string>
#include <vector>

namespace ddprun::rendezvous {

// One node of a completing round, in join order.
struct RankCandidate {
  int node_rank_hint = -1;  // --node_rank, or -1
  int previous_rank = -1;   // group rank in the node's last round, or -1
  int local_world_size = 1;
  std::string role;
};

// Where one node lands in the round.
struct RankPlacement {
  int group_rank = 0;
  int rank_offset = 0;       // prefix sum of local_world_size by group rank
  int role_rank_offset = 0;  // the same prefix sum over nodes of its role
  int role_world_size = 0;   // sum of local_world_size over its role
};

// Assigns group ranks 0..n-1 to `nodes` (n = nodes.size()), in this order of
// preference: a hint in [0, n) that no other node gives is honoured; then a
// returning node keeps its previous rank if still free and < n; every other
// node takes the lowest free rank, in join order. Offsets are prefix sums in
// group-rank order, so nodes may differ in local_world_size.
// Returns one placement per input node, same order. Pure; never fails.
std::vector<RankPlacement> AssignRanks(const std::vector<RankCandidate>& nodes);

}  // namespace ddprun::rendezvous
