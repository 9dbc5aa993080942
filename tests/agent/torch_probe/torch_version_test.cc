// How the agent learns the workers' torch version without importing torch:
// version strings, fake site-packages trees, hand-made ELF files, and the
// real /usr/bin/python3 asked for its sys.path (with the cache).

#include "ddprun_catch.h"

#include <elf.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "agent/torch_probe/elf_deps.h"
#include "agent/torch_probe/python_sys_path.h"
#include "agent/cli/torch_version.h"
#include "agent/torch_probe/torch_version_probe.h"
#include "agent/elastic/worker_env.h"

namespace {

using ddprun::agent::EnvMap;
using ddprun::agent::TorchVersion;

class TempTree {
 public:
  TempTree() {
    char tmpl[] = "/tmp/ddprun_torchver_XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  ~TempTree() { (void)!system(("rm -rf " + root_).c_str()); }
  const std::string& root() const { return root_; }
  // Writes `text` to root/relative, creating directories.
  std::string Write(const std::string& relative, const std::string& text) {
    const std::string path = root_ + "/" + relative;
    (void)!system(("mkdir -p $(dirname '" + path + "')").c_str());
    std::ofstream(path) << text;
    return path;
  }

 private:
  std::string root_;
};

// A fake torch package (torch/__init__.py and torch/version.py) in `dir`.
void FakeTorch(TempTree* t, const std::string& dir, const std::string& v) {
  t->Write(dir + "/torch/__init__.py", "raise ImportError('fake torch')\n");
  t->Write(dir + "/torch/version.py",
           "from typing import Optional\n__version__ = '" + v +
               "'\ndebug = False\n");
}

// A minimal 64-bit ELF file with a dynamic section naming `needed` sonames
// and a DT_RUNPATH (if not empty); enough for the dynamic-section reader.
void WriteFakeElf(const std::string& path,
                  const std::vector<std::string>& needed,
                  const std::string& runpath) {
  constexpr std::uint64_t kBase = 0x400000, kStrOff = 256, kDynOff = 1024;
  std::string strtab(1, '\0');
  std::vector<Elf64_Dyn> dyn;
  auto add_str = [&strtab](const std::string& s) {
    std::uint64_t off = strtab.size();
    strtab += s + '\0';
    return off;
  };
  for (const auto& n : needed) dyn.push_back({DT_NEEDED, {add_str(n)}});
  if (!runpath.empty()) dyn.push_back({DT_RUNPATH, {add_str(runpath)}});
  dyn.push_back({DT_STRTAB, {kBase + kStrOff}});
  dyn.push_back({DT_STRSZ, {strtab.size()}});
  dyn.push_back({DT_NULL, {0}});
  REQUIRE(strtab.size() < kDynOff - kStrOff);
  std::string file(kDynOff + dyn.size() * sizeof(Elf64_Dyn), '\0');
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_EXEC;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_phoff = sizeof(Elf64_Ehdr);
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = 2;
  Elf64_Phdr load{}, dynamic{};
  load.p_type = PT_LOAD;
  load.p_vaddr = kBase;
  load.p_filesz = load.p_memsz = file.size();
  dynamic.p_type = PT_DYNAMIC;
  dynamic.p_offset = kDynOff;
  dynamic.p_vaddr = kBase + kDynOff;
  dynamic.p_filesz = dynamic.p_memsz = dyn.size() * sizeof(Elf64_Dyn);
  std::memcpy(&file[0], &eh, sizeof(eh));
  std::memcpy(&file[sizeof(eh)], &load, sizeof(load));
  std::memcpy(&file[sizeof(eh) + sizeof(load)], &dynamic, sizeof(dynamic));
  std::memcpy(&file[kStrOff], strtab.data(), strtab.size());
  std::memcpy(&file[kDynOff], dyn.data(), dyn.size() * sizeof(Elf64_Dyn));
  std::ofstream(path, std::ios::binary) << file;
  chmod(path.c_str(), 0755);
}

EnvMap EnvWith(std::map<std::string, std::string> extra) {
  EnvMap env = ddprun::agent::CurrentEnvironment();
  for (const char* v : {"PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH"}) {
    env.erase(v);
  }
  for (auto& [k, v] : extra) env[k] = v;
  return env;
}

}  // namespace

TEST_CASE("ParseTorchVersion: what torch prints, and nothing else",
          "[agent][torch_version]") {
  using ddprun::agent::ParseTorchVersion;
  struct Good {
    const char* text;
    int major, minor;
  };
  for (const Good& g :
       {Good{"2", 2, 0}, Good{"2.6", 2, 6}, Good{"1.13.0a0", 1, 13},
        Good{"2.11.0+cu130", 2, 11}, Good{"2.6.0+debian", 2, 6},
        Good{"2.6.0.dev20240101", 2, 6}, Good{"1.13.0a0+gitunknown", 1, 13}}) {
    auto v = ParseTorchVersion("--torch_version", g.text);
    REQUIRE(v.ok());
    CHECK(v->major == g.major);
    CHECK(v->minor == g.minor);
    CHECK(v->text == g.text);
    CHECK(v->known());
  }
  for (const char* bad :
       {"", "x", "2.", ".6", "2.6 ", "v2.6", "2..6", "2,6", "2.6/"}) {
    auto v = ParseTorchVersion("--torch_version", bad);
    REQUIRE_FALSE(v.ok());
    CHECK(v.status().message() == std::string("--torch_version: invalid torch "
                                              "version '") +
                                      bad +
                                      "' (expected MAJOR.MINOR, e.g. 2.6 or "
                                      "1.13)");
  }
}

TEST_CASE("torch_version: each torch's launcher contract",
          "[agent][torch_version]") {
  using ddprun::agent::ParseTorchVersion;
  auto v = [](const char* t) { return *ParseTorchVersion("t", t); };
  CHECK(std::string(NcclAsyncErrorHandlingVar(v("1.13"))) ==
        "NCCL_ASYNC_ERROR_HANDLING");
  CHECK(std::string(NcclAsyncErrorHandlingVar(v("2.1"))) ==
        "NCCL_ASYNC_ERROR_HANDLING");
  CHECK(std::string(NcclAsyncErrorHandlingVar(v("2.2"))) ==
        "TORCH_NCCL_ASYNC_ERROR_HANDLING");
  CHECK(std::string(NcclAsyncErrorHandlingVar(TorchVersion{})) ==
        "TORCH_NCCL_ASYNC_ERROR_HANDLING");
  CHECK_FALSE(ExportsSignalsToHandle(v("2.8")));
  CHECK(ExportsSignalsToHandle(v("2.9")));
  CHECK(ExportsSignalsToHandle(v("3.0")));
  CHECK(ExportsSignalsToHandle(TorchVersion{}));
  CHECK(std::string(LegacyLocalRankFlag(v("1.13"))) == "--local_rank");
  CHECK(std::string(LegacyLocalRankFlag(v("2.0"))) == "--local-rank");
  CHECK(std::string(LegacyLocalRankFlag(TorchVersion{})) == "--local-rank");
}

TEST_CASE("TorchVersionInPaths: the torch that `import torch` would load",
          "[agent][torch_version]") {
  using ddprun::agent::TorchVersionInPaths;
  TempTree t;
  const std::string a = t.root() + "/a", b = t.root() + "/b",
                    c = t.root() + "/c", d = t.root() + "/d";
  FakeTorch(&t, "b", "2.6.0+debian");
  FakeTorch(&t, "c", "1.13.0a0");
  // a has a torch/ without __init__.py: not a package, skipped.
  t.Write("a/torch/version.py", "__version__ = '9.9'\n");
  auto found = TorchVersionInPaths({a, b, c});
  CHECK(found.text == "2.6.0+debian");
  CHECK(found.source == b + "/torch/version.py");
  CHECK(TorchVersionInPaths({c, b}).text == "1.13.0a0");
  CHECK_FALSE(TorchVersionInPaths({a, d, "/nonexistent"}).known());
  CHECK_FALSE(TorchVersionInPaths({}).known());

  // No version.py: the distribution metadata beside the package.
  t.Write("d/torch/__init__.py", "");
  t.Write("d/torch-2.11.0+cu130.dist-info/METADATA",
          "Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+cu130\n\nx\n");
  CHECK(TorchVersionInPaths({d, b}).text == "2.11.0+cu130");
  TempTree egg;
  egg.Write("torch/__init__.py", "");
  egg.Write(
      "torch-1.13.0a0+gitunknown.egg-info/PKG-INFO",
      "Metadata-Version: 2.1\nName: torch\nVersion: 1.13.0a0+gitunknown\n");
  CHECK(TorchVersionInPaths({egg.root()}).text == "1.13.0a0+gitunknown");
  // An annotated assignment, as torch 2.x writes it.
  TempTree annotated;
  annotated.Write("torch/__init__.py", "");
  annotated.Write("torch/version.py", "__version__: str = \"2.7.1\"\n");
  CHECK(TorchVersionInPaths({annotated.root()}).text == "2.7.1");
}

TEST_CASE("ReadElfDeps: needed sonames and RUNPATH of real and hand-made ELF",
          "[agent][torch_version]") {
  auto real = ddprun::agent::ReadElfDeps("/bin/true");
  REQUIRE(real.ok());
  CHECK(std::find(real->needed.begin(), real->needed.end(), "libc.so.6") !=
        real->needed.end());
  TempTree t;
  const std::string prog = t.root() + "/bin/trainer";
  t.Write("bin/.keep", "");
  WriteFakeElf(prog, {"libyaml-cpp.so.0.7", "libc10.so"},
               "$ORIGIN/../lib:/opt/x");
  auto deps = ddprun::agent::ReadElfDeps(prog);
  REQUIRE(deps.ok());
  CHECK(deps->needed ==
        std::vector<std::string>{"libyaml-cpp.so.0.7", "libc10.so"});
  CHECK(deps->runpath ==
        std::vector<std::string>{t.root() + "/bin/../lib", "/opt/x"});
  const std::string text = t.Write("notelf", "#!/bin/sh\n");
  CHECK(ddprun::agent::ReadElfDeps(text).status().code() ==
        ddprun::StatusCode::kInvalidArgument);
  CHECK_FALSE(ddprun::agent::IsElfFile(text));
  CHECK(ddprun::agent::IsElfFile(prog));
}

TEST_CASE("TorchVersionOfProgram: the LibTorch a compiled worker links",
          "[agent][torch_version]") {
  using ddprun::agent::TorchVersionOfProgram;
  TempTree t;
  t.Write("bin/.keep", "");
  // Debian: the soname carries the version.
  WriteFakeElf(t.root() + "/bin/debian", {"libtorch_cpu.so.2.6", "libc.so.6"},
               "");
  CHECK(TorchVersionOfProgram(t.root() + "/bin/debian", {}).text == "2.6");
  // The PyTorch wheel: torch/lib/libc10.so beside torch/version.py.
  FakeTorch(&t, "site", "2.11.0+cu130");
  t.Write("site/torch/lib/libc10.so", "");
  WriteFakeElf(t.root() + "/bin/wheel", {"libc10.so"},
               t.root() + "/site/torch/lib");
  CHECK(TorchVersionOfProgram(t.root() + "/bin/wheel", {}).text ==
        "2.11.0+cu130");
  // The LibTorch archive: libtorch/lib + libtorch/build-version, found
  // through LD_LIBRARY_PATH.
  t.Write("libtorch/lib/libtorch_cpu.so", "");
  t.Write("libtorch/build-version", "2.5.1+cpu\n");
  WriteFakeElf(t.root() + "/bin/archive", {"libtorch_cpu.so"}, "");
  CHECK_FALSE(TorchVersionOfProgram(t.root() + "/bin/archive", {}).known());
  CHECK(TorchVersionOfProgram(
            t.root() + "/bin/archive",
            {{"LD_LIBRARY_PATH", "/nonexistent:" + t.root() + "/libtorch/lib"}})
            .text == "2.5.1+cpu");
  // No LibTorch at all.
  CHECK_FALSE(TorchVersionOfProgram("/bin/true", {}).known());
}

TEST_CASE("GetPythonSysPath: asks the interpreter once, then the cache",
          "[agent][torch_version][python]") {
  TempTree cache, extra;
  EnvMap env = EnvWith({{"PYTHONPATH", extra.root()}});
  auto first = ddprun::agent::GetPythonSysPath(
      "/usr/bin/python3", env, cache.root(), std::chrono::seconds(30));
  REQUIRE(first.ok());
  CHECK_FALSE(first->from_cache);
  REQUIRE_FALSE(first->entries.empty());
  CHECK(first->entries[0] == extra.root());  // PYTHONPATH comes first
  auto second = ddprun::agent::GetPythonSysPath(
      "/usr/bin/python3", env, cache.root(), std::chrono::seconds(30));
  REQUIRE(second.ok());
  CHECK(second->from_cache);
  CHECK(second->entries == first->entries);
  // A package installed into a sys.path directory invalidates the entry.
  extra.Write("newpkg/__init__.py", "");
  auto third = ddprun::agent::GetPythonSysPath(
      "/usr/bin/python3", env, cache.root(), std::chrono::seconds(30));
  REQUIRE(third.ok());
  CHECK_FALSE(third->from_cache);
  // Another PYTHONPATH is another key.
  TempTree other;
  auto fourth = ddprun::agent::GetPythonSysPath(
      "/usr/bin/python3", EnvWith({{"PYTHONPATH", other.root()}}), cache.root(),
      std::chrono::seconds(30));
  REQUIRE(fourth.ok());
  CHECK_FALSE(fourth->from_cache);
  CHECK(fourth->entries[0] == other.root());
  // Not an interpreter: a clear error, nothing cached.
  auto sh = ddprun::agent::GetPythonSysPath("/bin/false", env, cache.root(),
                                            std::chrono::seconds(30));
  CHECK(sh.status().code() == ddprun::StatusCode::kFailedPrecondition);
}

TEST_CASE("DetectWorkerTorchVersion: script, module and compiled workers",
          "[agent][torch_version][python]") {
  using ddprun::agent::DetectWorkerTorchVersion;
  using ddprun::agent::LaunchOptions;
  TempTree cache, site, job;
  FakeTorch(&site, ".", "2.6.0");
  ddprun::agent::TorchProbeOptions probe;
  probe.cache_dir = cache.root();
  LaunchOptions o;
  o.entrypoint = job.Write("train.py", "print('hi')\n");
  std::string why;
  // PYTHONPATH puts the fake 2.6 before Debian's 1.13.
  EnvMap env = EnvWith(
      {{"PYTHON_EXEC", "/usr/bin/python3"}, {"PYTHONPATH", site.root()}});
  TorchVersion v = DetectWorkerTorchVersion(o, env, probe, &why);
  CHECK(v.text == "2.6.0");
  CHECK(v.source == site.root() + "/torch/version.py");
  // The script's directory comes first on sys.path.
  FakeTorch(&job, ".", "2.11.0");
  CHECK(DetectWorkerTorchVersion(o, env, probe, &why).text == "2.11.0");
  // Debian's own torch, without PYTHONPATH.
  EnvMap debian = EnvWith({{"PYTHON_EXEC", "/usr/bin/python3"}});
  TempTree plain;
  o.entrypoint = plain.Write("train.py", "");
  CHECK(DetectWorkerTorchVersion(o, debian, probe, &why).major == 1);
  // Not a Python interpreter: never run, unknown.
  EnvMap sh = EnvWith({{"PYTHON_EXEC", "/bin/sh"}});
  CHECK_FALSE(DetectWorkerTorchVersion(o, sh, probe, &why).known());
  CHECK(why == "'/bin/sh' is not a Python interpreter");
  // A Python without torch (-S: no site-packages) is named, for the agent's
  // warning; one with torch, or one never run, is not.
  const std::string bare =
      job.Write("bare/python3", "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n");
  chmod(bare.c_str(), 0755);
  std::string torchless = "stale";
  EnvMap bare_env = EnvWith({{"PYTHON_EXEC", bare}});
  CHECK_FALSE(
      DetectWorkerTorchVersion(o, bare_env, probe, &why, &torchless).known());
  CHECK(torchless == bare);
  CHECK(DetectWorkerTorchVersion(o, debian, probe, &why, &torchless).major ==
        1);
  CHECK(torchless.empty());
  torchless = "stale";
  CHECK_FALSE(DetectWorkerTorchVersion(o, sh, probe, &why, &torchless).known());
  CHECK(torchless.empty());
  // A compiled worker: its LibTorch; a script with --no_python: unknown.
  o.no_python = true;
  o.entrypoint = "true";
  CHECK_FALSE(DetectWorkerTorchVersion(o, env, probe, &why).known());
  CHECK(why.find("links no LibTorch") != std::string::npos);
  o.entrypoint = job.Write("run.sh", "#!/bin/sh\n");
  chmod(o.entrypoint.c_str(), 0755);
  CHECK_FALSE(DetectWorkerTorchVersion(o, env, probe, &why).known());
  CHECK(why.find("is not a compiled program") != std::string::npos);
  job.Write("bin/.keep", "");
  WriteFakeElf(job.root() + "/bin/trainer", {"libc10.so.1.13"}, "");
  o.entrypoint = job.root() + "/bin/trainer";
  CHECK(DetectWorkerTorchVersion(o, env, probe, &why).text == "1.13");
}
