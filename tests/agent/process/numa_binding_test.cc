// --numa_binding: torch's choice of CPUs per local rank (torch/numa/
// binding.py) on a simulated 2-socket, 8-GPU host, and sysfs read from a
// fake tree.

#include "ddprun_catch.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "agent/process/numa_binding.h"

namespace ddprun::agent {
namespace {

std::set<int> Range(int first, int last) {
  std::set<int> out;
  for (int c = first; c <= last; ++c) out.insert(c);
  return out;
}

std::set<int> Union(std::set<int> a, const std::set<int>& b) {
  a.insert(b.begin(), b.end());
  return a;
}

// Two sockets of 16 cores with 2 hyperthreads each (CPU c and c+64 share a
// core), two NUMA nodes per socket (8 cores each), an L3 cache per 4
// cores (a core complex), GPUs 0-3 on node 0 and 4-7 on node 2:
//   node 0: CPUs 0-7,64-71    node 1: 8-15,72-79     (socket 0)
//   node 2: 16-23,80-87       node 3: 24-31,88-95    (socket 1)
NumaTopology TwoSocketHost() {
  NumaTopology t;
  for (int node = 0; node < 4; ++node) {
    t.node_cpus[node] = Union(Range(node * 8, node * 8 + 7),
                              Range(64 + node * 8, 71 + node * 8));
  }
  for (int c = 0; c < 32; ++c) {
    for (int cpu : {c, c + 64}) {
      NumaTopology::Cpu info;
      info.socket = c < 16 ? 0 : 1;
      info.core = c;
      info.cache = c / 4 * 4;  // min CPU of its 4-core complex
      t.cpus[cpu] = info;
    }
  }
  for (int g = 0; g < 8; ++g) {
    char addr[32];
    std::snprintf(addr, sizeof(addr), "0000:%02x:00.0", 0x18 + g);
    t.gpus.push_back({addr, g < 4 ? 0 : 2, "GPU-" + std::to_string(g) + "aaa"});
  }
  return t;
}

std::set<int> All() { return Range(0, 127); }

NumaPlan Plan(NumaMode mode, int nproc, const std::string* visible = nullptr,
              const NumaTopology& t = TwoSocketHost()) {
  auto p = PlanNumaBinding(mode, t, All(), visible, nproc);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  REQUIRE(p->rank_cpus.size() == static_cast<std::size_t>(nproc));
  return *p;
}

TEST_CASE("PlanNumaBinding: node binds to the GPU's NUMA node",
          "[agent][numa]") {
  NumaPlan p = Plan(NumaMode::kNode, 8);
  const std::set<int> node0 = Union(Range(0, 7), Range(64, 71));
  const std::set<int> node2 = Union(Range(16, 23), Range(80, 87));
  for (int r = 0; r < 8; ++r) CHECK(p.rank_cpus[r] == (r < 4 ? node0 : node2));
  CHECK(p.device_nodes == std::vector<int>{0, 0, 0, 0, 2, 2, 2, 2});
  // Only CPUs this process may use (torch intersects with its affinity).
  auto narrowed = PlanNumaBinding(NumaMode::kNode, TwoSocketHost(), Range(0, 3),
                                  nullptr, 1);
  REQUIRE(narrowed.ok());
  CHECK(narrowed->rank_cpus[0] == Range(0, 3));
}

TEST_CASE("PlanNumaBinding: socket binds to every node of the GPU's socket",
          "[agent][numa]") {
  NumaPlan p = Plan(NumaMode::kSocket, 8);
  const std::set<int> socket0 = Union(Range(0, 15), Range(64, 79));
  const std::set<int> socket1 = Union(Range(16, 31), Range(80, 95));
  CHECK(p.rank_cpus[0] == socket0);
  CHECK(p.rank_cpus[3] == socket0);
  CHECK(p.rank_cpus[4] == socket1);
  CHECK(p.rank_cpus[7] == socket1);
}

TEST_CASE("PlanNumaBinding: exclusive shares a node's physical cores out",
          "[agent][numa]") {
  // 8 cores on node 0 for GPUs 0-3: two cores (four hyperthreads) each.
  NumaPlan p = Plan(NumaMode::kExclusive, 8);
  CHECK(p.rank_cpus[0] == std::set<int>{0, 1, 64, 65});
  CHECK(p.rank_cpus[1] == std::set<int>{2, 3, 66, 67});
  CHECK(p.rank_cpus[3] == std::set<int>{6, 7, 70, 71});
  CHECK(p.rank_cpus[4] == std::set<int>{16, 17, 80, 81});
  // 3 GPUs on node 0: 8 cores = 3 + 3 + 2, the lowest GPUs get the extra.
  const std::string three = "0,1,2";
  NumaPlan q = Plan(NumaMode::kExclusive, 3, &three);
  CHECK(q.rank_cpus[0] == std::set<int>{0, 1, 2, 64, 65, 66});
  CHECK(q.rank_cpus[1] == std::set<int>{3, 4, 5, 67, 68, 69});
  CHECK(q.rank_cpus[2] == std::set<int>{6, 7, 70, 71});
  // Fewer physical cores than GPUs on a node: torch raises, so does ddprun.
  NumaTopology tiny = TwoSocketHost();
  tiny.node_cpus[0] = {0, 64};  // one core for GPUs 0-3
  auto err = PlanNumaBinding(NumaMode::kExclusive, tiny, All(), nullptr, 8);
  REQUIRE_FALSE(err.ok());
  CHECK_THAT(err.status().message(),
             Catch::Contains("1 physical cores for 4 GPUs"));
}

TEST_CASE("PlanNumaBinding: core-complex gives each GPU its own L3",
          "[agent][numa]") {
  NumaPlan p = Plan(NumaMode::kCoreComplex, 8);
  // Node 0 has two complexes: cores 0-3 and 4-7 (with their siblings).
  const std::set<int> ccx0 = Union(Range(0, 3), Range(64, 67));
  const std::set<int> ccx1 = Union(Range(4, 7), Range(68, 71));
  CHECK(p.rank_cpus[0] == ccx0);
  CHECK(p.rank_cpus[1] == ccx1);
  CHECK(p.rank_cpus[2] == ccx0);  // more GPUs than complexes: wrap around
  CHECK(p.rank_cpus[3] == ccx1);
  CHECK(p.rank_cpus[4] == Union(Range(16, 19), Range(80, 83)));
  // No cache information: torch cannot tell complexes apart either.
  NumaTopology blind = TwoSocketHost();
  for (auto& [cpu, info] : blind.cpus) info.cache = -1;
  auto err = PlanNumaBinding(NumaMode::kCoreComplex, blind, All(), nullptr, 1);
  REQUIRE_FALSE(err.ok());
  CHECK_THAT(err.status().message(), Catch::Contains("cache"));
}

TEST_CASE("PlanNumaBinding: CUDA_VISIBLE_DEVICES picks the GPUs",
          "[agent][numa]") {
  // Local rank r uses the r-th visible GPU, as torch's gpu_index.
  const std::string mask = "5,1";
  NumaPlan p = Plan(NumaMode::kNode, 2, &mask);
  CHECK(p.device_nodes == std::vector<int>{2, 0});
  CHECK(p.rank_cpus[0] == Union(Range(16, 23), Range(80, 87)));
  // UUID prefixes, as CUDA accepts them.
  const std::string uuids = "GPU-6a,GPU-0";
  CHECK(Plan(NumaMode::kNode, 2, &uuids).device_nodes ==
        std::vector<int>{2, 0});
  // More local ranks than visible GPUs: torch's gpu_index has no GPU.
  auto err = PlanNumaBinding(NumaMode::kNode, TwoSocketHost(), All(), &mask, 3);
  REQUIRE_FALSE(err.ok());
  CHECK_THAT(err.status().message(),
             Catch::Contains("local rank 2 has no GPU"));
  const std::string mig = "MIG-1234";
  CHECK_FALSE(
      PlanNumaBinding(NumaMode::kNode, TwoSocketHost(), All(), &mig, 1).ok());
}

TEST_CASE("PlanNumaBinding: without GPUs local ranks spread over the nodes",
          "[agent][numa]") {
  NumaTopology cpu_only = TwoSocketHost();
  cpu_only.gpus.clear();
  NumaPlan p = Plan(NumaMode::kNode, 8, nullptr, cpu_only);
  CHECK_FALSE(p.by_gpu);
  // Blocks: ranks 0-1 on node 0, 2-3 on node 1, ...
  CHECK(p.device_nodes == std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3});
  CHECK(p.rank_cpus[2] == Union(Range(8, 15), Range(72, 79)));
  // exclusive: the ranks of a node share its cores out.
  NumaPlan x = Plan(NumaMode::kExclusive, 8, nullptr, cpu_only);
  CHECK(x.rank_cpus[0] == Union(Range(0, 3), Range(64, 67)));
  CHECK(x.rank_cpus[1] == Union(Range(4, 7), Range(68, 71)));
  // Every GPU hidden counts as none.
  const std::string hidden = "-1";
  CHECK_FALSE(Plan(NumaMode::kNode, 2, &hidden).by_gpu);
  // Describe() is the map printed at start.
  const std::vector<std::string> lines = p.Describe();
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], Catch::Contains("no GPU, local rank -> NUMA node 0->0"));
  CHECK_THAT(lines[1], Catch::Contains("2: 8-15,72-79"));
}

TEST_CASE("ParseCpuList and CpuListText", "[agent][numa]") {
  CHECK(*ParseCpuList("0-3,8,10-11\n") == std::set<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(ParseCpuList("\n")->empty());
  CHECK_FALSE(ParseCpuList("3-1").ok());
  CHECK_FALSE(ParseCpuList("a").ok());
  CHECK(CpuListText({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(CpuListText({}) == "");
}

// A fake sysfs tree.
struct FakeSysfs {
  FakeSysfs() {
    char tmpl[] = "/tmp/ddprun_sysfs_XXXXXX";
    root = mkdtemp(tmpl);
  }
  ~FakeSysfs() { (void)!system(("rm -rf " + root).c_str()); }
  void Write(const std::string& path, const std::string& text) {
    (void)!system(("mkdir -p \"$(dirname " + root + path + ")\"").c_str());
    std::ofstream(root + path) << text;
  }
  std::string root;
};

TEST_CASE("ReadNumaTopology: nodes, CPUs, caches and GPUs from sysfs",
          "[agent][numa]") {
  FakeSysfs fs;
  fs.Write("/sys/devices/system/node/possible", "0-1\n");
  fs.Write("/sys/devices/system/node/node0/cpulist", "0-1\n");
  fs.Write("/sys/devices/system/node/node1/cpulist", "2\n");
  const std::string cpu = "/sys/devices/system/cpu/cpu";
  for (int c = 0; c < 3; ++c) {
    const std::string d = cpu + std::to_string(c);
    fs.Write(d + "/topology/physical_package_id", c < 2 ? "0\n" : "1\n");
    fs.Write(d + "/topology/thread_siblings_list", c < 2 ? "0-1\n" : "2\n");
    // L1 instruction cache (ignored), L2 per CPU, L3 per socket.
    fs.Write(d + "/cache/index0/type", "Instruction\n");
    fs.Write(d + "/cache/index0/level", "1\n");
    fs.Write(d + "/cache/index0/shared_cpu_list", std::to_string(c) + "\n");
    fs.Write(d + "/cache/index2/type", "Unified\n");
    fs.Write(d + "/cache/index2/level", "2\n");
    fs.Write(d + "/cache/index2/shared_cpu_list", std::to_string(c) + "\n");
    fs.Write(d + "/cache/index3/type", "Unified\n");
    fs.Write(d + "/cache/index3/level", "3\n");
    fs.Write(d + "/cache/index3/shared_cpu_list", c < 2 ? "0-1\n" : "2\n");
  }
  // Two NVIDIA GPUs (3D controller, VGA), an NVSwitch bridge and a NIC.
  auto pci = [&](const std::string& addr, const std::string& vendor,
                 const std::string& cls, const std::string& node) {
    const std::string d = "/sys/bus/pci/devices/" + addr;
    fs.Write(d + "/vendor", vendor + "\n");
    fs.Write(d + "/class", cls + "\n");
    fs.Write(d + "/numa_node", node + "\n");
  };
  pci("0000:c1:00.0", "0x10de", "0x030200", "1");
  pci("0000:41:00.0", "0x10de", "0x030000", "-1");
  pci("0000:05:00.0", "0x10de", "0x068000", "0");
  pci("0000:06:00.0", "0x15b3", "0x020700", "0");
  auto t = ReadNumaTopology(fs.root);
  REQUIRE(t.ok());
  CHECK(t->node_cpus.at(0) == std::set<int>{0, 1});
  CHECK(t->node_cpus.at(1) == std::set<int>{2});
  CHECK(t->cpus.at(1).core == 0);
  CHECK(t->cpus.at(2).socket == 1);
  CHECK(t->cpus.at(1).cache == 0);  // the L3, not the L2
  REQUIRE(t->gpus.size() == 2);     // PCI order; -1 reads as node 0
  CHECK(t->gpus[0].pci_address == "0000:41:00.0");
  CHECK(t->gpus[0].numa_node == 0);
  CHECK(t->gpus[1].numa_node == 1);
  // The driver's list (what a container was given) wins, with UUIDs.
  fs.Write("/proc/driver/nvidia/gpus/0000:c1:00.0/information",
           "Model: X\nGPU UUID: GPU-1234-abcd\nBus Location: 0000:c1:00.0\n");
  auto driver = ReadNumaTopology(fs.root);
  REQUIRE(driver->gpus.size() == 1);
  CHECK(driver->gpus[0].uuid == "GPU-1234-abcd");
  CHECK(driver->gpus[0].numa_node == 1);
  FakeSysfs empty;
  CHECK_FALSE(ReadNumaTopology(empty.root).ok());
}

}  // namespace
}  // namespace ddprun::agent
