#include "agent/torch_probe/accelerator_count.h"

#include <cstdlib>
#include <sstream>
#include <vector>

#include "agent/process/run_capture.h"
#include "common/file_util.h"

namespace ddprun::agent {
namespace {

// torchrun's determine_local_world_size for a device name, answering one
// line: "count N", "unavailable", "unsupported <privateuse1 name or ->" or
// "error <why>".
constexpr char kProbe[] = R"PY(
import sys
name = sys.argv[1]
try:
    import torch
except Exception as e:
    print("error cannot import torch: %s" % e)
    sys.exit(0)
if name == "xpu":
    mod = getattr(torch, "xpu", None)
    if mod is None:
        print("unsupported -")
        sys.exit(0)
else:
    get = getattr(torch._C, "_get_privateuse1_backend_name", None)
    backend = get() if get is not None else "-"
    if name != backend:
        print("unsupported " + backend)
        sys.exit(0)
    mod = getattr(torch, name, None)
    if mod is None or not hasattr(mod, "device_count"):
        print("error torch.%s has no device_count()" % name)
        sys.exit(0)
if not mod.is_available():
    print("unavailable")
    sys.exit(0)
print("count %d" % mod.device_count())
)PY";

std::string Get(const std::map<std::string, std::string>& env,
                const std::string& key, const std::string& def) {
  auto it = env.find(key);
  return it == env.end() || it->second.empty() ? def : it->second;
}

}  // namespace

StatusOr<int> CountAccelerators(const std::string& source,
                                const std::string& name,
                                const std::map<std::string, std::string>& env,
                                std::chrono::milliseconds timeout) {
  const std::string what = source + "=" + name;
  const std::string python_name = Get(env, "PYTHON_EXEC", "python3");
  const std::string python =
      FindOnPath(python_name, Get(env, "PATH", "/usr/local/bin:/usr/bin:/bin"));
  if (python.empty()) {
    return InvalidArgumentError(what + ": the workers' interpreter '" +
                                python_name +
                                "' is not found (it counts the devices)");
  }
  StatusOr<CaptureResult> r =
      RunAndCapture({python, "-c", kProbe, name}, env, timeout);
  if (!r.ok()) {
    return InvalidArgumentError(
        what + ": asking " + python +
        " for the device count: " + r.status().message());
  }
  std::istringstream out(r->out);
  std::string verdict, rest;
  out >> verdict;
  std::getline(out, rest);
  if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
  if (verdict == "count") {
    const int n = std::atoi(rest.c_str());
    if (n > 0) return n;
    return InvalidArgumentError(what + ": the workers' torch (" + python +
                                ") counts 0 " + name + " devices");
  }
  if (verdict == "unavailable") {
    return InvalidArgumentError(what + ": " + name +
                                " is not available to the workers' torch (" +
                                python + ")");
  }
  if (verdict == "unsupported") {
    std::string known = "an integer, cpu, gpu, xpu, auto";
    if (rest != "-" && !rest.empty()) known += " or " + rest;
    return InvalidArgumentError(
        what + ": Unsupported nproc_per_node value (the workers' torch, " +
        python + ", knows " + known + ")");
  }
  std::string why = verdict == "error" ? rest : r->err;
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) {
    why.pop_back();
  }
  const auto last = why.rfind('\n');
  if (last != std::string::npos) why = why.substr(last + 1);
  return InvalidArgumentError(
      what + ": " + python +
      " cannot count the devices: " + (why.empty() ? "no answer" : why));
}

}  // namespace ddprun::agent
