#include "ddprun_catch.h"

#include "rendezvous/core/rank_assignment.h"

namespace ddprun::rendezvous {
namespace {

TEST_CASE("AssignRanks: returning nodes keep their rank", "[rendezvous]") {
  // c was rank 0 before, a new node d arrives first, b was rank 2.
  std::vector<RankCandidate> nodes = {
      {-1, -1, 1, ""}, {-1, 2, 1, ""}, {-1, 0, 1, ""}};
  auto placed = AssignRanks(nodes);
  CHECK(placed[0].group_rank == 1);  // lowest free
  CHECK(placed[1].group_rank == 2);
  CHECK(placed[2].group_rank == 0);
}

TEST_CASE("AssignRanks: hints beat returning ranks, out-of-range ignored",
          "[rendezvous]") {
  std::vector<RankCandidate> nodes = {
      {-1, 0, 2, ""}, {0, -1, 3, ""}, {7, -1, 1, ""}};
  auto placed = AssignRanks(nodes);
  CHECK(placed[1].group_rank == 0);
  CHECK(placed[0].group_rank == 1);
  CHECK(placed[2].group_rank == 2);
  CHECK(placed[1].rank_offset == 0);
  CHECK(placed[0].rank_offset == 3);
  CHECK(placed[2].rank_offset == 5);
}

}  // namespace
}  // namespace ddprun::rendezvous
