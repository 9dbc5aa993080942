#include "rendezvous/core/rank_assignment.h"

#include <map>

namespace ddprun::rendezvous {

std::vector<RankPlacement> AssignRanks(
    const std::vector<RankCandidate>& nodes) {
  const int n = static_cast<int>(nodes.size());
  std::vector<int> rank(n, -1);
  std::vector<bool> taken(n, false);

  std::map<int, int> hint_count;
  for (const auto& c : nodes) {
    if (c.node_rank_hint >= 0 && c.node_rank_hint < n) {
      ++hint_count[c.node_rank_hint];
    }
  }
  for (int i = 0; i < n; ++i) {
    const int h = nodes[i].node_rank_hint;
    if (h >= 0 && h < n && hint_count[h] == 1) {
      rank[i] = h;
      taken[h] = true;
    }
  }
  for (int i = 0; i < n; ++i) {
    const int p = nodes[i].previous_rank;
    if (rank[i] < 0 && p >= 0 && p < n && !taken[p]) {
      rank[i] = p;
      taken[p] = true;
    }
  }
  int next_free = 0;
  for (int i = 0; i < n; ++i) {
    if (rank[i] >= 0) continue;
    while (taken[next_free]) ++next_free;
    rank[i] = next_free;
    taken[next_free] = true;
  }

  // Prefix sums in group-rank order, overall and per role.
  std::vector<int> by_rank(n);
  for (int i = 0; i < n; ++i) by_rank[rank[i]] = i;
  std::vector<RankPlacement> out(n);
  std::map<std::string, int> role_sum;
  int sum = 0;
  for (int r = 0; r < n; ++r) {
    const int i = by_rank[r];
    out[i].group_rank = r;
    out[i].rank_offset = sum;
    sum += nodes[i].local_world_size;
    int& role_total = role_sum[nodes[i].role];
    out[i].role_rank_offset = role_total;
    role_total += nodes[i].local_world_size;
  }
  for (int i = 0; i < n; ++i) {
    out[i].role_world_size = role_sum[nodes[i].role];
  }
  return out;
}

}  // namespace ddprun::rendezvous
