#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "agent/cli/launch_options.h"
#include "agent/cli/torch_version.h"

namespace ddprun::agent {

// The torch version of an installed torch package, found the way `import
// torch` would find it in `sys_path` (first directory holding torch/ with an
// __init__.py wins), without importing it: torch/version.py's
// `__version__ = '...'`, else the version in a torch-*.dist-info/METADATA or
// torch-*.egg-info/PKG-INFO next to it. Unknown when no entry holds torch.
TorchVersion TorchVersionInPaths(const std::vector<std::string>& sys_path);

// The LibTorch a compiled program links, from its ELF dependencies: a
// versioned soname (Debian's libc10.so.1.13, libtorch_cpu.so.2.6), else the
// unversioned libc10.so / libtorch_cpu.so found on its RUNPATH (then
// LD_LIBRARY_PATH of `env`) beside a torch/version.py (the PyTorch wheel's
// torch/lib) or a build-version file (the LibTorch archive). Unknown when
// it links no LibTorch or the files say nothing.
TorchVersion TorchVersionOfProgram(
    const std::string& path, const std::map<std::string, std::string>& env);

struct TorchProbeOptions {
  std::string cache_dir;  // GetPythonSysPath's cache; "" = none
  std::chrono::milliseconds timeout{10000};
};

// The torch the workers of `options` will run, without importing torch:
// - a Python entrypoint (script, -m, --run_path): the interpreter
//   $PYTHON_EXEC (else python3, on env PATH) is asked for its sys.path once
//   (cached, see GetPythonSysPath), the script's directory (or the current
//   directory for -m) is put first, and TorchVersionInPaths() reads it. An
//   interpreter whose name does not start with "python" or "pypy" is not
//   run (it may not be Python at all): unknown.
// - a compiled entrypoint (--no_python, or an ELF file): its LibTorch, per
//   TorchVersionOfProgram(); a script run with --no_python: unknown.
// Unknown (known() false) comes with *why saying why, for a debug log, and,
// when the interpreter ran and no entry of its sys.path holds torch (a
// script that imports torch will fail), with its path in *torchless
// (optional; "" in every other case).
// Never fails; blocks at most options.timeout (one interpreter start when
// the cache misses). Not thread-safe only in that it reads the filesystem.
TorchVersion DetectWorkerTorchVersion(
    const LaunchOptions& options, const std::map<std::string, std::string>& env,
    const TorchProbeOptions& probe, std::string* why,
    std::string* torchless = nullptr);

}  // namespace ddprun::agent
