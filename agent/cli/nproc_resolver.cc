#include "agent/cli/nproc_resolver.h"

#include <dirent.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>

#include "agent/cli/cli_values.h"

namespace ddprun::agent {
namespace {

// Counts entries of `dir` whose name satisfies `pred`; 0 if unreadable.
template <typename Pred>
int CountEntries(const std::string& dir, Pred pred, bool* readable) {
  DIR* d = opendir(dir.c_str());
  *readable = d != nullptr;
  if (d == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != ".." && pred(name)) ++n;
  }
  closedir(d);
  return n;
}

bool IsNvidiaDeviceNode(const std::string& name) {
  // /dev/nvidia0, /dev/nvidia1, ...; not nvidiactl or nvidia-uvm.
  if (name.size() <= 6 || name.compare(0, 6, "nvidia") != 0) return false;
  for (std::string::size_type i = 6; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

bool IsValidCudaDeviceEntry(const std::string& entry) {
  if (entry.empty()) return false;
  if (entry.compare(0, 4, "GPU-") == 0 || entry.compare(0, 4, "MIG-") == 0) {
    return true;
  }
  for (char c : entry) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// A Python identifier: the only names torch's device modules can have.
bool IsIdentifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) {
    return false;
  }
  for (char c : s) {
    if (c != '_' && !std::isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

HostDevices ProbeHostDevices(const std::string& root) {
  HostDevices host;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  host.online_cpus = cpus > 0 ? static_cast<int>(cpus) : 1;
  bool readable = false;
  host.nvidia_gpus = CountEntries(
      root + "/proc/driver/nvidia/gpus",
      [](const std::string&) { return true; }, &readable);
  if (!readable) {
    host.nvidia_gpus =
        CountEntries(root + "/dev", IsNvidiaDeviceNode, &readable);
  }
  return host;
}

int VisibleGpus(const HostDevices& host,
                const std::map<std::string, std::string>& env) {
  auto it = env.find("CUDA_VISIBLE_DEVICES");
  if (it == env.end()) return host.nvidia_gpus;
  int visible = 0;
  bool mig = false;
  std::string::size_type start = 0;
  const std::string& list = it->second;
  while (start <= list.size()) {
    auto comma = list.find(',', start);
    std::string entry = list.substr(start, comma - start);
    while (!entry.empty() &&
           std::isspace(static_cast<unsigned char>(entry.back()))) {
      entry.pop_back();
    }
    while (!entry.empty() &&
           std::isspace(static_cast<unsigned char>(entry[0]))) {
      entry.erase(0, 1);
    }
    if (!IsValidCudaDeviceEntry(entry)) break;
    mig = mig || entry.compare(0, 4, "MIG-") == 0;
    ++visible;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  // MIG instances outnumber physical GPUs; trust the list for them.
  if (mig) return host.nvidia_gpus > 0 ? visible : 0;
  return visible < host.nvidia_gpus ? visible : host.nvidia_gpus;
}

StatusOr<int> ResolveNprocPerNode(
    const std::string& source, const std::string& spec, const HostDevices& host,
    const std::map<std::string, std::string>& env,
    const AcceleratorCounter& count_accelerators) {
  if (spec == "cpu") return host.online_cpus;
  if (spec == "gpu" || spec == "auto") {
    const int gpus = VisibleGpus(host, env);
    if (gpus > 0) return gpus;
    if (spec == "auto") return host.online_cpus;
    std::string why = host.nvidia_gpus == 0
                          ? "no NVIDIA GPU found in /proc/driver/nvidia/gpus "
                            "or /dev/nvidia*"
                          : "CUDA_VISIBLE_DEVICES='" +
                                env.at("CUDA_VISIBLE_DEVICES") +
                                "' hides every GPU";
    return InvalidArgumentError(source + "=gpu: " + why);
  }
  long n = 0;
  auto parsed = ParseIntValue(source, spec);
  if (!parsed.ok() && IsIdentifier(spec) && count_accelerators) {
    // xpu or a privateuse1 backend: only the workers' torch knows.
    return count_accelerators(source, spec);
  }
  if (!parsed.ok()) {
    return InvalidArgumentError(source + ": invalid value '" + spec +
                                "' (expected an integer >= 1, cpu, gpu, "
                                "auto, xpu or a privateuse1 backend's "
                                "name)");
  }
  n = *parsed;
  if (n < 1 || n > 65536) {
    return InvalidArgumentError(source + ": invalid value '" + spec +
                                "' (must be at least 1)");
  }
  return static_cast<int>(n);
}

}  // namespace ddprun::agent
