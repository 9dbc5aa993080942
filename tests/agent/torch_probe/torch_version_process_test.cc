// The real ddprun and ddprun-launch with Python workers whose torch is a
// fake package of a given version (torch/version.py on PYTHONPATH, never
// imported): each worker gets what torchrun / torch.distributed.launch of
// that version gives, from their source (local_elastic_agent.py, run.py).

#include "ddprun_catch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "tests/agent/process_harness.h"

using namespace ddprun::test;  // NOLINT

namespace {

// Writes the environment and argv of the worker, as env_dump.sh does.
constexpr const char* kPyDump =
    "import os, sys\n"
    "out = os.environ['DDPRUN_TEST_OUT']\n"
    "with open(os.path.join(out, 'env_' + os.environ['RANK']), 'w') as f:\n"
    "    f.write(''.join('%s=%s\\n' % kv for kv in os.environ.items()))\n"
    "with open(os.path.join(out, 'args_' + os.environ['LOCAL_RANK']), 'w') "
    "as f:\n"
    "    f.write('args:' + ' '.join(sys.argv[1:]) + '\\n')\n";

struct Job {
  TempDir dir;
  std::string script, site, cache;
  explicit Job(const std::string& torch_version) {
    script = dir.path() + "/job/dump.py";
    site = dir.path() + "/site";
    cache = dir.path() + "/cache";
    REQUIRE(system(("mkdir -p " + dir.path() + "/job " + site + "/torch")
                       .c_str()) == 0);
    std::ofstream(script) << kPyDump;
    std::ofstream(site + "/torch/__init__.py") << "raise ImportError('fake')\n";
    std::ofstream(site + "/torch/version.py")
        << "__version__ = '" << torch_version << "'\n";
  }
  std::map<std::string, std::string> Env() const {
    return {{"PYTHON_EXEC", "/usr/bin/python3"},
            {"PYTHONPATH", site},
            {"DDPRUN_CACHE_DIR", cache},
            {"-NCCL_ASYNC_ERROR_HANDLING", ""},
            {"-TORCH_NCCL_ASYNC_ERROR_HANDLING", ""},
            {"-TORCHELASTIC_SIGNALS_TO_HANDLE", ""}};
  }
};

}  // namespace

TEST_CASE("ddprun: workers get what torchrun of their torch version sets",
          "[agent][process][torch_version]") {
  struct Case {
    const char* torch;
    const char* nccl;    // the only NCCL error-handling variable
    const char* absent;  // the other name
    bool signals;        // TORCHELASTIC_SIGNALS_TO_HANDLE
  };
  for (const Case& c : {Case{"1.13.1", "NCCL_ASYNC_ERROR_HANDLING",
                             "TORCH_NCCL_ASYNC_ERROR_HANDLING", false},
                        Case{"2.6.0+debian", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                             "NCCL_ASYNC_ERROR_HANDLING", false},
                        Case{"2.11.0+cu130", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                             "NCCL_ASYNC_ERROR_HANDLING", true}}) {
    INFO("torch " << c.torch);
    Job job(c.torch);
    // Twice: the second launch reads the cached sys.path.
    for (int launch = 0; launch < 2; ++launch) {
      Ddprun run(job.dir, {"--standalone", "--nproc_per_node=2", job.script},
                 job.Env());
      REQUIRE(run.Wait(30s) == 0);
      CHECK(run.Stderr().find("has no torch") == std::string::npos);
      for (int r = 0; r < 2; ++r) {
        auto e =
            ParseEnv(ReadFile(job.dir.path() + "/env_" + std::to_string(r)));
        CHECK(e[c.nccl] == "1");
        CHECK(e.count(c.absent) == 0);
        CHECK(e.count("TORCHELASTIC_SIGNALS_TO_HANDLE") ==
              (c.signals ? 1u : 0u));
      }
    }
    CHECK(Exists(job.cache));
  }
}

TEST_CASE("ddprun: a workers' Python without torch is named before they fail",
          "[agent][process][torch_version]") {
  TempDir dir;
  // Debian's python3 without its site-packages (-S): no torch to import.
  const std::string bare = dir.path() + "/bin/python3";
  const std::string script = dir.path() + "/job/train.py";
  REQUIRE(system(("mkdir -p " + dir.path() + "/bin " + dir.path() + "/job")
                     .c_str()) == 0);
  std::ofstream(bare) << "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n";
  REQUIRE(chmod(bare.c_str(), 0755) == 0);
  std::ofstream(script) << "import torch\n";
  Ddprun run(dir, {"--standalone", "--nproc_per_node=1", script},
             {{"PYTHON_EXEC", bare}, {"DDPRUN_CACHE_DIR", dir.path() + "/c"}});
  REQUIRE(run.Wait(30s) == 1);
  const std::string err = run.Stderr();
  INFO(err);
  const std::string warning =
      "the workers' Python " + bare + " has no torch on its sys.path";
  const size_t at = err.find(warning);
  REQUIRE(at != std::string::npos);
  CHECK(err.find(warning, at + 1) == std::string::npos);  // once
  // Before the workers' own error, which does not say where to look.
  CHECK(err.find("No module named 'torch'") > at);
}

TEST_CASE("ddprun-launch: --local-rank from torch 2.0, --local_rank before",
          "[agent][process][torch_version]") {
  for (const auto& [torch, flag] :
       std::vector<std::pair<std::string, std::string>>{
           {"1.13.0a0", "--local_rank"}, {"2.0.1", "--local-rank"}}) {
    INFO("torch " << torch);
    Job job(torch);
    Ddprun run(job.dir,
               {"--nproc_per_node=2",
                "--master_port=" + std::to_string(FreeLoopbackPort()),
                job.script, "x"},
               job.Env(), DDPRUN_BIN_DIR "/ddprun-launch");
    REQUIRE(run.Wait(30s) == 0);
    for (int r = 0; r < 2; ++r) {
      CHECK(ReadFile(job.dir.path() + "/args_" + std::to_string(r)) ==
            "args:" + flag + "=" + std::to_string(r) + " x\n");
    }
    // --torch_version overrides what is installed.
    TempDir dir;
    Ddprun forced(
        dir,
        {"--nproc_per_node=1", "--torch_version=2.6",
         "--master_port=" + std::to_string(FreeLoopbackPort()), job.script},
        job.Env(), DDPRUN_BIN_DIR "/ddprun-launch");
    REQUIRE(forced.Wait(30s) == 0);
    CHECK(ReadFile(dir.path() + "/args_0") == "args:--local-rank=0\n");
  }
}
