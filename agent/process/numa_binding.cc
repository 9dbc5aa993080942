#include "agent/process/numa_binding.h"

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace ddprun::agent {
namespace {

bool ReadText(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *text = ss.str();
  return true;
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) {
    s.pop_back();
  }
  std::size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

// The names in `dir` ("" entries and dot files skipped), sorted.
std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

int ReadInt(const std::string& path, int fallback) {
  std::string text;
  if (!ReadText(path, &text)) return fallback;
  try {
    return std::stoi(Trim(text));
  } catch (...) {
    return fallback;
  }
}

// min(CPUs sharing the highest-level data or unified cache of `cpu`), as
// torch's _get_logical_cpus_sharing_same_max_level_cache_as; -1 if unknown.
int CacheKey(const std::string& cpu_dir) {
  int max_level = -1;
  int key = -1;
  for (const std::string& entry : ListDir(cpu_dir + "/cache")) {
    if (entry.compare(0, 5, "index") != 0 || entry.size() == 5 ||
        entry.find_first_not_of("0123456789", 5) != std::string::npos) {
      continue;
    }
    const std::string dir = cpu_dir + "/cache/" + entry;
    std::string type;
    if (!ReadText(dir + "/type", &type)) continue;
    type = Trim(type);
    if (type != "Unified" && type != "Data") continue;
    const int level = ReadInt(dir + "/level", -1);
    if (level <= max_level) continue;
    std::string shared;
    if (!ReadText(dir + "/shared_cpu_list", &shared)) continue;
    StatusOr<std::set<int>> cpus = ParseCpuList(shared);
    if (!cpus.ok() || cpus->empty()) continue;
    max_level = level;
    key = *cpus->begin();
  }
  return key;
}

Status Precondition(const std::string& what) {
  return Status(StatusCode::kFailedPrecondition, what);
}

// The GPUs CUDA enumerates for `visible` (CUDA_VISIBLE_DEVICES), as indices
// into topology.gpus: entries up to the first invalid one, as CUDA reads
// the list.
StatusOr<std::vector<int>> VisibleGpus(const NumaTopology& topology,
                                       const std::string* visible) {
  std::vector<int> out;
  const int n = static_cast<int>(topology.gpus.size());
  if (visible == nullptr) {
    for (int i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  std::stringstream ss(*visible);
  for (std::string entry; std::getline(ss, entry, ',');) {
    entry = Trim(entry);
    if (entry.empty()) break;
    if (entry.find_first_not_of("0123456789") == std::string::npos) {
      const int i = entry.size() > 6 ? n : std::stoi(entry);
      if (i >= n) break;
      out.push_back(i);
      continue;
    }
    if (entry.compare(0, 4, "MIG-") == 0) {
      return Precondition("CUDA_VISIBLE_DEVICES entry '" + entry +
                          "': MIG instances cannot be mapped to a NUMA node "
                          "without CUDA");
    }
    if (entry.compare(0, 4, "GPU-") != 0) break;
    int found = -1;
    for (int i = 0; i < n; ++i) {
      const std::string& uuid = topology.gpus[i].uuid;
      if (!uuid.empty() && uuid.compare(0, entry.size(), entry) == 0) {
        found = i;
      }
    }
    if (found < 0) {
      return Precondition("CUDA_VISIBLE_DEVICES entry '" + entry +
                          "' names no GPU of /proc/driver/nvidia/gpus");
    }
    out.push_back(found);
  }
  return out;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace

StatusOr<NumaMode> ParseNumaMode(const std::string& text) {
  if (text == "node") return NumaMode::kNode;
  if (text == "socket") return NumaMode::kSocket;
  if (text == "exclusive") return NumaMode::kExclusive;
  if (text == "core-complex") return NumaMode::kCoreComplex;
  return InvalidArgumentError("--numa_binding: invalid value '" + text +
                              "' (choose from node, socket, exclusive, "
                              "core-complex)");
}

const char* NumaModeName(NumaMode mode) {
  switch (mode) {
    case NumaMode::kNode:
      return "node";
    case NumaMode::kSocket:
      return "socket";
    case NumaMode::kExclusive:
      return "exclusive";
    case NumaMode::kCoreComplex:
      return "core-complex";
  }
  return "?";
}

StatusOr<std::set<int>> ParseCpuList(const std::string& text) {
  std::set<int> out;
  std::stringstream ss(Trim(text));
  for (std::string range; std::getline(ss, range, ',');) {
    range = Trim(range);
    if (range.empty()) continue;
    const auto dash = range.find('-');
    try {
      std::size_t used = 0;
      const int first = std::stoi(range.substr(0, dash), &used);
      int last = first;
      if (dash != std::string::npos) last = std::stoi(range.substr(dash + 1));
      if (first < 0 || last < first || last > 1 << 20) throw 0;
      for (int c = first; c <= last; ++c) out.insert(c);
    } catch (...) {
      return InvalidArgumentError("bad CPU list '" + Trim(text) + "'");
    }
  }
  return out;
}

std::string CpuListText(const std::set<int>& cpus) {
  std::string out;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int first = *it;
    int last = first;
    for (++it; it != cpus.end() && *it == last + 1; ++it) last = *it;
    out += (out.empty() ? "" : ",") + std::to_string(first);
    if (last != first) out += "-" + std::to_string(last);
  }
  return out;
}

StatusOr<NumaTopology> ReadNumaTopology(const std::string& root) {
  NumaTopology t;
  const std::string node_dir = root + "/sys/devices/system/node";
  std::set<int> nodes;
  std::string possible;
  if (ReadText(node_dir + "/possible", &possible)) {
    StatusOr<std::set<int>> parsed = ParseCpuList(possible);
    if (parsed.ok()) nodes = *parsed;
  }
  if (nodes.empty()) {
    for (const std::string& name : ListDir(node_dir)) {
      if (name.size() > 4 && name.compare(0, 4, "node") == 0 &&
          name.find_first_not_of("0123456789", 4) == std::string::npos) {
        nodes.insert(std::stoi(name.substr(4)));
      }
    }
  }
  if (nodes.empty()) {
    return Precondition("no NUMA node in " + node_dir);
  }
  for (int node : nodes) {
    std::string list;
    std::set<int>& cpus = t.node_cpus[node];
    if (ReadText(node_dir + "/node" + std::to_string(node) + "/cpulist",
                 &list)) {
      StatusOr<std::set<int>> parsed = ParseCpuList(list);
      if (!parsed.ok()) return parsed.status();
      cpus = *parsed;
    }
    for (int cpu : cpus) {
      const std::string dir =
          root + "/sys/devices/system/cpu/cpu" + std::to_string(cpu);
      NumaTopology::Cpu info;
      info.socket = ReadInt(dir + "/topology/physical_package_id", 0);
      std::string siblings;
      info.core = cpu;
      if (ReadText(dir + "/topology/thread_siblings_list", &siblings)) {
        StatusOr<std::set<int>> s = ParseCpuList(siblings);
        if (s.ok() && !s->empty()) info.core = *s->begin();
      }
      info.cache = CacheKey(dir);
      t.cpus[cpu] = info;
    }
  }
  auto numa_node_of = [&root](const std::string& address) {
    return std::max(
        ReadInt(root + "/sys/bus/pci/devices/" + address + "/numa_node", -1),
        0);
  };
  const std::string driver = root + "/proc/driver/nvidia/gpus";
  for (const std::string& address : ListDir(driver)) {
    NumaTopology::Gpu gpu;
    gpu.pci_address = address;
    gpu.numa_node = numa_node_of(address);
    std::string info;
    if (ReadText(driver + "/" + address + "/information", &info)) {
      const auto at = info.find("GPU UUID:");
      if (at != std::string::npos) {
        gpu.uuid = Trim(info.substr(at + 9, info.find('\n', at) - at - 9));
      }
    }
    t.gpus.push_back(gpu);
  }
  if (t.gpus.empty()) {
    const std::string pci = root + "/sys/bus/pci/devices";
    for (const std::string& address : ListDir(pci)) {
      std::string vendor, device_class;
      if (!ReadText(pci + "/" + address + "/vendor", &vendor) ||
          Trim(vendor) != "0x10de" ||
          !ReadText(pci + "/" + address + "/class", &device_class)) {
        continue;
      }
      device_class = Trim(device_class);
      // VGA (0x0300) and 3D (0x0302) controllers; not NVSwitch bridges or
      // the GPUs' audio functions.
      if (device_class.compare(0, 6, "0x0300") != 0 &&
          device_class.compare(0, 6, "0x0302") != 0) {
        continue;
      }
      t.gpus.push_back({address, numa_node_of(address), ""});
    }
  }
  return t;
}

StatusOr<NumaPlan> PlanNumaBinding(NumaMode mode, const NumaTopology& topology,
                                   const std::set<int>& allowed,
                                   const std::string* visible, int nproc) {
  NumaPlan plan;
  plan.mode = mode;
  auto allowed_on = [&](int node) {
    std::set<int> out;
    auto it = topology.node_cpus.find(node);
    if (it == topology.node_cpus.end()) return out;
    std::set_intersection(it->second.begin(), it->second.end(), allowed.begin(),
                          allowed.end(), std::inserter(out, out.begin()));
    return out;
  };
  auto cpu_info = [&](int cpu) {
    auto it = topology.cpus.find(cpu);
    return it == topology.cpus.end() ? NumaTopology::Cpu{0, cpu, -1}
                                     : it->second;
  };
  DDP_ASSIGN_OR_RETURN(std::vector<int> gpus, VisibleGpus(topology, visible));
  if (!gpus.empty()) {
    if (nproc > static_cast<int>(gpus.size())) {
      return Precondition("local rank " + std::to_string(gpus.size()) +
                          " has no GPU (" + std::to_string(gpus.size()) +
                          " visible), and torch binds local rank r to GPU r");
    }
    for (int g : gpus) plan.device_nodes.push_back(topology.gpus[g].numa_node);
  } else {
    // No GPU: local rank r as if GPU r sat on node block r*nodes/nproc of
    // the nodes this process may use.
    plan.by_gpu = false;
    std::vector<int> nodes;
    for (const auto& [node, cpus] : topology.node_cpus) {
      if (!allowed_on(node).empty()) nodes.push_back(node);
    }
    if (nodes.empty()) {
      return Precondition("no NUMA node has a CPU this process may use");
    }
    for (int r = 0; r < nproc; ++r) {
      plan.device_nodes.push_back(
          nodes[static_cast<std::size_t>(r) * nodes.size() / nproc]);
    }
  }
  for (int r = 0; r < nproc; ++r) {
    const int node = plan.device_nodes[r];
    const std::set<int> node_cpus = allowed_on(node);
    const std::string where = (plan.by_gpu ? "GPU " : "local rank ") +
                              std::to_string(r) + " (NUMA node " +
                              std::to_string(node) + ")";
    if (node_cpus.empty()) {
      return Precondition(where +
                          ": the node has no CPU this process may "
                          "use");
    }
    std::vector<int> peers;  // devices on the same node, sorted
    for (int i = 0; i < static_cast<int>(plan.device_nodes.size()); ++i) {
      if (plan.device_nodes[i] == node) peers.push_back(i);
    }
    const std::size_t rel =
        std::find(peers.begin(), peers.end(), r) - peers.begin();
    std::set<int> cpus;
    switch (mode) {
      case NumaMode::kNode:
        cpus = node_cpus;
        break;
      case NumaMode::kSocket: {
        const int socket = cpu_info(*node_cpus.begin()).socket;
        for (const auto& [other, all] : topology.node_cpus) {
          const std::set<int> mine = allowed_on(other);
          if (!mine.empty() && cpu_info(*mine.begin()).socket == socket) {
            cpus.insert(mine.begin(), mine.end());
          }
        }
        break;
      }
      case NumaMode::kExclusive: {
        std::map<int, std::set<int>> cores;  // by min thread sibling
        for (int cpu : node_cpus) cores[cpu_info(cpu).core].insert(cpu);
        const std::size_t per = cores.size() / peers.size();
        const std::size_t extra = cores.size() % peers.size();
        if (per < 1) {
          return Precondition(
              where +
              ": exclusive needs a physical core per GPU, but the "
              "node has " +
              std::to_string(cores.size()) + " physical cores for " +
              std::to_string(peers.size()) + " GPUs");
        }
        const std::size_t start = rel * per + std::min(rel, extra);
        const std::size_t end = start + per + (rel < extra ? 1 : 0);
        std::size_t i = 0;
        for (const auto& [key, threads] : cores) {
          if (i >= start && i < end)
            cpus.insert(threads.begin(), threads.end());
          ++i;
        }
        break;
      }
      case NumaMode::kCoreComplex: {
        std::map<int, std::set<int>> caches;
        for (int cpu : node_cpus) {
          const int key = cpu_info(cpu).cache;
          if (key < 0) {
            return Precondition(where +
                                ": core-complex needs cache "
                                "information, and /sys/devices/"
                                "system/cpu/cpu" +
                                std::to_string(cpu) + "/cache has none");
          }
          caches[key].insert(cpu);
        }
        std::vector<std::pair<int, std::set<int>>> order(caches.begin(),
                                                         caches.end());
        // Caches with more CPUs first, then lower CPUs (torch's order).
        std::stable_sort(order.begin(), order.end(),
                         [](const auto& a, const auto& b) {
                           return a.second.size() > b.second.size();
                         });
        cpus = order[rel % order.size()].second;
        break;
      }
    }
    if (cpus.empty()) {
      return Precondition(where + ": no CPU to bind to");
    }
    plan.rank_cpus.push_back(std::move(cpus));
  }
  return plan;
}

std::vector<std::string> NumaPlan::Describe() const {
  std::vector<std::string> map;
  for (std::size_t i = 0; i < device_nodes.size(); ++i) {
    map.push_back(std::to_string(i) + "->" + std::to_string(device_nodes[i]));
  }
  std::vector<std::string> ranks;
  for (std::size_t r = 0; r < rank_cpus.size(); ++r) {
    ranks.push_back(std::to_string(r) + ": " + CpuListText(rank_cpus[r]));
  }
  const std::string head =
      std::string("--numa_binding=") + NumaModeName(mode) + ": ";
  return {head +
              (by_gpu ? "GPU -> NUMA node "
                      : "no GPU, local rank -> "
                        "NUMA node ") +
              Join(map),
          head + "local rank -> CPUs " + Join(ranks)};
}

StatusOr<NumaPlan> PlanNumaBindingForHost(
    const std::string& mode_text, int nproc,
    const std::map<std::string, std::string>& env) {
  DDP_ASSIGN_OR_RETURN(NumaMode mode, ParseNumaMode(mode_text));
  auto root = env.find("DDPRUN_SYSFS_ROOT");
  DDP_ASSIGN_OR_RETURN(NumaTopology topology,
                       ReadNumaTopology(root == env.end() ? "" : root->second));
  std::set<int> allowed;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) allowed.insert(c);
    }
  }
  auto visible = env.find("CUDA_VISIBLE_DEVICES");
  return PlanNumaBinding(mode, topology, allowed,
                         visible == env.end() ? nullptr : &visible->second,
                         nproc);
}

}  // namespace ddprun::agent
