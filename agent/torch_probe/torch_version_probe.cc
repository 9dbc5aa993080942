#include "agent/torch_probe/torch_version_probe.h"

#include <dirent.h>
#include <sys/stat.h>

#include <fstream>
#include <optional>

#include "agent/torch_probe/elf_deps.h"
#include "agent/torch_probe/python_sys_path.h"
#include "agent/process/run_capture.h"
#include "common/file_util.h"

namespace ddprun::agent {
namespace {

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string Get(const std::map<std::string, std::string>& env, const char* name,
                const char* fallback = "") {
  auto it = env.find(name);
  return it == env.end() ? fallback : it->second;
}

// The quoted value of `name = '...'` (or "...") on a line of `path`.
std::optional<std::string> AssignedString(const std::string& path,
                                          const std::string& name) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto pos = line.find_first_not_of(" \t");
    if (pos == std::string::npos || line.compare(pos, name.size(), name) != 0) {
      continue;
    }
    pos = line.find_first_not_of(" \t", pos + name.size());
    // `__version__: str = '2.6.0'` (annotated) and `__version__ = '2.6.0'`.
    if (pos != std::string::npos && line[pos] == ':') {
      pos = line.find('=', pos);
    }
    if (pos == std::string::npos || line[pos] != '=') continue;
    pos = line.find_first_not_of(" \t", pos + 1);
    if (pos == std::string::npos || (line[pos] != '\'' && line[pos] != '"')) {
      continue;
    }
    auto end = line.find(line[pos], pos + 1);
    if (end == std::string::npos) continue;
    return line.substr(pos + 1, end - pos - 1);
  }
  return std::nullopt;
}

// The value of a "Version: x" header line in a METADATA / PKG-INFO file.
std::optional<std::string> MetadataVersion(const std::string& path) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) break;  // end of the headers
    if (line.compare(0, 9, "Version: ") == 0) return line.substr(9);
  }
  return std::nullopt;
}

std::optional<TorchVersion> FromText(const std::string& source,
                                     const std::optional<std::string>& text) {
  if (!text.has_value()) return std::nullopt;
  StatusOr<TorchVersion> v = ParseTorchVersion(source, *text);
  if (!v.ok()) return std::nullopt;
  return *v;
}

// torch-<version>.dist-info/METADATA or torch-<version>.egg-info[/PKG-INFO]
// in `dir`.
std::optional<TorchVersion> DistributionVersion(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return std::nullopt;
  std::optional<TorchVersion> found;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, 6, "torch-") != 0) continue;
    for (const char* suffix : {".dist-info", ".egg-info"}) {
      const std::string s = suffix;
      if (name.size() <= 6 + s.size() ||
          name.compare(name.size() - s.size(), s.size(), s) != 0) {
        continue;
      }
      const std::string path = dir + "/" + name;
      const std::string meta =
          path + (s == ".dist-info" ? "/METADATA" : "/PKG-INFO");
      found = FromText(meta, MetadataVersion(meta));
      if (!found) {
        found = FromText(path, name.substr(6, name.size() - 6 - s.size()));
      }
    }
    if (found) break;
  }
  ::closedir(d);
  return found;
}

}  // namespace

TorchVersion TorchVersionInPaths(const std::vector<std::string>& sys_path) {
  for (const std::string& entry : sys_path) {
    const std::string dir = entry.empty() ? "." : entry;
    const std::string pkg = dir + "/torch";
    if (!IsRegularFile(pkg + "/__init__.py")) continue;
    // The first torch package on sys.path is the one `import torch` loads,
    // whatever its version says.
    const std::string version_py = pkg + "/version.py";
    if (auto v =
            FromText(version_py, AssignedString(version_py, "__version__"))) {
      return *v;
    }
    if (auto v = DistributionVersion(dir)) return *v;
    return TorchVersion{};
  }
  return TorchVersion{};
}

TorchVersion TorchVersionOfProgram(
    const std::string& path, const std::map<std::string, std::string>& env) {
  StatusOr<ElfDeps> deps = ReadElfDeps(path);
  if (!deps.ok()) return TorchVersion{};
  static const char* const kLibs[] = {"libc10.so", "libtorch_cpu.so",
                                      "libtorch.so"};
  std::optional<std::string> unversioned;
  for (const std::string& needed : deps->needed) {
    for (const char* lib : kLibs) {
      const std::string base = lib;
      if (needed == base) unversioned = needed;
      if (needed.size() > base.size() + 1 &&
          needed.compare(0, base.size() + 1, base + ".") == 0) {
        if (auto v = FromText(needed, needed.substr(base.size() + 1))) {
          return *v;
        }
      }
    }
  }
  if (!unversioned) return TorchVersion{};
  std::vector<std::string> dirs = deps->runpath;
  const std::string ld = Get(env, "LD_LIBRARY_PATH");
  std::string::size_type start = 0;
  while (!ld.empty() && start <= ld.size()) {
    auto colon = ld.find(':', start);
    std::string dir = ld.substr(start, colon - start);
    if (!dir.empty()) dirs.push_back(dir);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  for (const std::string& dir : dirs) {
    const std::string lib = RealPath(dir + "/" + *unversioned);
    if (lib.empty()) continue;
    const std::string top = Dirname(Dirname(lib));
    const std::string version_py = top + "/version.py";
    if (auto v =
            FromText(version_py, AssignedString(version_py, "__version__"))) {
      return *v;
    }
    std::ifstream build_version(top + "/build-version");
    std::string text;
    if (std::getline(build_version, text)) {
      if (auto v = FromText(top + "/build-version", text)) return *v;
    }
    return TorchVersion{};
  }
  return TorchVersion{};
}

TorchVersion DetectWorkerTorchVersion(
    const LaunchOptions& options, const std::map<std::string, std::string>& env,
    const TorchProbeOptions& probe, std::string* why, std::string* torchless) {
  if (torchless != nullptr) torchless->clear();
  const std::string path_var = Get(env, "PATH", "/usr/local/bin:/usr/bin:/bin");
  const bool python =
      options.run_path || (!options.no_python &&
                           (options.module || !IsElfFile(options.entrypoint)));
  if (!python) {
    const std::string program = FindOnPath(options.entrypoint, path_var);
    if (program.empty() || !IsElfFile(program)) {
      *why = "'" + options.entrypoint + "' is not a compiled program";
      return TorchVersion{};
    }
    TorchVersion v = TorchVersionOfProgram(program, env);
    if (!v.known()) *why = "'" + program + "' links no LibTorch we can date";
    return v;
  }
  const std::string interpreter_name = Get(env, "PYTHON_EXEC", "python3");
  const std::string interpreter = FindOnPath(interpreter_name, path_var);
  if (interpreter.empty()) {
    *why = "interpreter '" + interpreter_name + "' not found";
    return TorchVersion{};
  }
  auto pythonish = [](const std::string& p) {
    const std::string b = Basename(p);
    return b.compare(0, 6, "python") == 0 || b.compare(0, 4, "pypy") == 0;
  };
  if (!pythonish(interpreter) && !pythonish(RealPath(interpreter))) {
    *why = "'" + interpreter + "' is not a Python interpreter";
    return TorchVersion{};
  }
  StatusOr<PythonSysPath> sys_path =
      GetPythonSysPath(interpreter, env, probe.cache_dir, probe.timeout);
  if (!sys_path.ok()) {
    *why = sys_path.status().message();
    return TorchVersion{};
  }
  std::vector<std::string> entries;
  if (!sys_path->safe_path) {
    // What Python puts first: the script's directory (symlinks resolved),
    // or the current directory for -m.
    if (options.module && !options.run_path) {
      entries.push_back(CurrentDir());
    } else {
      const std::string script = RealPath(options.entrypoint);
      entries.push_back(script.empty() ? Dirname(options.entrypoint)
                                       : Dirname(script));
    }
  }
  entries.insert(entries.end(), sys_path->entries.begin(),
                 sys_path->entries.end());
  TorchVersion v = TorchVersionInPaths(entries);
  if (!v.known()) {
    *why = "no torch on the sys.path of '" + interpreter + "'";
    if (torchless != nullptr) *torchless = interpreter;
  }
  return v;
}

}  // namespace ddprun::agent
