// Multi-process tests of DistributedSampler (sampler.h) against torch's Python
// one. Real ranks (rank_helper) on loopback with Gloo through a real TCPStore.

#include <fstream>
#include <string>
#include <vector>

#include "ddprun_catch.h"

#include "tests/worker/process_checks.h"
#include "tests/worker/rank_process.h"

namespace ddprun::worker::testing {
namespace {

TEST_CASE(
    "DistributedSampler: indices equal torch.utils.data.DistributedSampler",
    "[worker][process][sampler]") {
  struct Case {
    int n, world, seed, epoch;
    bool shuffle, drop_last;
  };
  std::vector<Case> cases = {
      {10, 3, 0, 0, true, false},    {10, 3, 7, 2, true, true},
      {1000, 4, 42, 5, true, false}, {5, 4, 1, 1, false, false},
      {2, 4, 3, 0, true, false},     {3, 4, 3, 0, true, true},
      {30000, 2, 9, 1, true, false}};
  // One Python run prints every case (importing torch costs seconds).
  std::string script =
      "from torch.utils.data import DistributedSampler\n"
      "def run(n, world, seed, epoch, shuffle, drop_last):\n"
      "  for r in range(world):\n"
      "    s = DistributedSampler(range(n), num_replicas=world, rank=r,\n"
      "                           shuffle=shuffle, seed=seed, "
      "drop_last=drop_last)\n"
      "    s.set_epoch(epoch)\n"
      "    print(''.join(str(i) + ' ' for i in s))\n"
      "  print('--')\n";
  for (const Case& c : cases) {
    script += "run(" + std::to_string(c.n) + ", " + std::to_string(c.world) +
              ", " + std::to_string(c.seed) + ", " + std::to_string(c.epoch) +
              ", " + (c.shuffle ? "True" : "False") + ", " +
              (c.drop_last ? "True" : "False") + ")\n";
  }
  std::string py = TempDir() + "/s.py";
  std::ofstream(py) << script;
  REQUIRE(std::system(
              ("/usr/bin/python3 " + py + " > " + py + ".out").c_str()) == 0);
  std::string expected = ReadText(py + ".out");
  size_t pos = 0;
  for (const Case& c : cases) {
    CAPTURE(c.n, c.world, c.seed, c.epoch, c.shuffle, c.drop_last);
    wt::RankProcess p({Helper(), "sampler", std::to_string(c.n),
                       std::to_string(c.seed), std::to_string(c.epoch),
                       c.shuffle ? "1" : "0", c.drop_last ? "1" : "0"},
                      {{"SAMPLER_WORLD", std::to_string(c.world)}});
    REQUIRE(p.Wait(std::chrono::seconds(30)));
    REQUIRE(p.exit_code() == 0);
    size_t end = expected.find("--\n", pos);
    REQUIRE(end != std::string::npos);
    REQUIRE(p.Output() == expected.substr(pos, end - pos));
    pos = end + 3;
  }
}

}  // namespace
}  // namespace ddprun::worker::testing
