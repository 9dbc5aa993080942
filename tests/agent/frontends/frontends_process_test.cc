// The real ddprun-deepspeed and ddprun-accelerate binaries on small shell
// workers: every rank's environment and argv against what the original
// launcher gives (deepspeed/launcher/launch.py; accelerate's
// prepare_multi_gpu_env + torchrun, prepare_simple_launcher_cmd_env), the
// local multi-node fan-out, failures and signals.

#include "ddprun_catch.h"

#include <memory>
#include <set>

#include "tests/agent/process_harness.h"

using namespace ddprun::test;  // NOLINT

namespace {

const std::string kDeepSpeed = DDPRUN_BIN_DIR "/ddprun-deepspeed";
const std::string kAccelerate = DDPRUN_BIN_DIR "/ddprun-accelerate";
const std::string kEnvDump = kData + "/env_dump.sh";

// The environment env_dump.sh records when run directly (no launcher) with
// the same inherited environment: the baseline a launcher's additions are
// measured against.
std::map<std::string, std::string> Baseline(
    const std::map<std::string, std::string>& extra_env) {
  TempDir dir;
  std::map<std::string, std::string> env = extra_env;
  env["RANK"] = "baseline";
  Ddprun direct(dir, {}, env, kEnvDump);
  REQUIRE(direct.Wait() == 0);
  auto out = ParseEnv(ReadFile(dir.path() + "/env_baseline"));
  out.erase("RANK");
  out.erase("DDPRUN_TEST_OUT");
  return out;
}

// Names whose value differs from the baseline (set or changed by the
// launcher), without the harness's DDPRUN_TEST_OUT.
// ddprun's own additions to every worker (DDPRUN_* variables, its stack
// dump hook appended to PYTHONPATH) are not part of a launcher's contract.
std::string WithoutDdprunHook(const std::string& k, const std::string& v) {
  const std::string hook = "/lib/ddprun/python";
  if (k != "PYTHONPATH" || v.size() < hook.size() ||
      v.compare(v.size() - hook.size(), hook.size(), hook) != 0) {
    return v;
  }
  size_t colon = v.rfind(':');
  return colon == std::string::npos ? "" : v.substr(0, colon);
}

std::set<std::string> LauncherSet(
    const std::map<std::string, std::string>& worker,
    const std::map<std::string, std::string>& baseline) {
  std::set<std::string> names;
  for (const auto& [key, value] : worker) {
    const std::string& k = key;
    const std::string v = WithoutDdprunHook(k, value);
    auto it = baseline.find(k);
    if (k.rfind("DDPRUN_", 0) == 0) continue;
    if (v.empty() && it == baseline.end()) continue;  // only the hook
    if (k != "DDPRUN_TEST_OUT" && (it == baseline.end() || it->second != v)) {
      names.insert(k);
    }
  }
  return names;
}

const std::set<std::string> kDeepSpeedVars = {
    "RANK",        "LOCAL_RANK",  "WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "CROSS_RANK",
    "CROSS_SIZE",  "LOCAL_SIZE",  "CUDA_VISIBLE_DEVICES"};

}  // namespace

TEST_CASE("ddprun-deepspeed: one node gets deepspeed launch's contract",
          "[agent][process][deepspeed]") {
  TempDir dir;
  const std::map<std::string, std::string> env = {{"-OMP_NUM_THREADS", ""},
                                                  {"CUDA_VISIBLE_DEVICES", ""}};
  const auto baseline = Baseline(env);
  const int port = FreeLoopbackPort();
  Ddprun run(dir,
             {"--num_gpus=2", "--master_port=" + std::to_string(port),
              "--no_python", kEnvDump, "a", "b c"},
             env, kDeepSpeed);
  REQUIRE(run.Wait(30s) == 0);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    auto e = ParseEnv(ReadFile(dir.path() + "/env_" + std::to_string(r)));
    // launch.py sets exactly these, and nothing else (no torchrun variable,
    // no OMP_NUM_THREADS, no NCCL variable).
    CHECK(LauncherSet(e, baseline) == kDeepSpeedVars);
    CHECK(e["RANK"] == std::to_string(r));
    CHECK(e["LOCAL_RANK"] == std::to_string(r));
    CHECK(e["WORLD_SIZE"] == "2");
    CHECK(e["MASTER_ADDR"] == "127.0.0.1");
    CHECK(e["MASTER_PORT"] == std::to_string(port));
    CHECK(e["CROSS_RANK"] == "0");
    CHECK(e["CROSS_SIZE"] == "1");
    CHECK(e["LOCAL_SIZE"] == "2");
    CHECK(e["CUDA_VISIBLE_DEVICES"] == "0,1");
    // --local_rank=N right after the script, then the user's arguments.
    CHECK(ReadFile(dir.path() + "/args_" + std::to_string(r)) ==
          "args:--local_rank=" + std::to_string(r) + " a b c\n");
  }
  // CUDA_VISIBLE_DEVICES picks the slots (runner.py: --include=localhost:..).
  TempDir dir2;
  Ddprun visible(dir2,
                 {"--master_port=" + std::to_string(FreeLoopbackPort()),
                  "--no_local_rank", "--no_python", kEnvDump},
                 {{"CUDA_VISIBLE_DEVICES", "3,5"}}, kDeepSpeed);
  REQUIRE(visible.Wait(30s) == 0);
  for (int r = 0; r < 2; ++r) {
    auto e = ParseEnv(ReadFile(dir2.path() + "/env_" + std::to_string(r)));
    CHECK(e["CUDA_VISIBLE_DEVICES"] == "3,5");
    CHECK(e["WORLD_SIZE"] == "2");
    CHECK(ReadFile(dir2.path() + "/args_" + std::to_string(r)) == "args:\n");
  }
}

TEST_CASE("ddprun-deepspeed: a hostfile of local hosts starts every node",
          "[agent][process][deepspeed]") {
  TempDir dir;
  // Two names of this host: both nodes start here as child processes (no
  // ssh); the slot counts differ, as deepspeed allows.
  std::ofstream(dir.path() + "/hostfile")
      << "localhost slots=2\n127.0.0.1 slots=1\n";
  const int port = FreeLoopbackPort();
  Ddprun run(
      dir,
      {"-H", dir.path() + "/hostfile", "--master_addr=127.0.0.1",
       "--master_port=" + std::to_string(port), "--no_python", kEnvDump, "x"},
      {{"-OMP_NUM_THREADS", ""}}, kDeepSpeed);
  REQUIRE(run.Wait(60s) == 0);
  INFO(run.Stderr());
  std::set<std::string> ranks;
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    auto e = ParseEnv(ReadFile(dir.path() + "/env_" + std::to_string(r)));
    ranks.insert(e["RANK"]);
    const bool node0 = r < 2;  // ranks follow hostfile order
    CHECK(e["WORLD_SIZE"] == "3");
    CHECK(e["CROSS_RANK"] == (node0 ? "0" : "1"));
    CHECK(e["CROSS_SIZE"] == "2");
    CHECK(e["LOCAL_SIZE"] == (node0 ? "2" : "1"));
    CHECK(e["CUDA_VISIBLE_DEVICES"] == (node0 ? "0,1" : "0"));
    // launch.py: LOCAL_RANK = RANK % number of local processes.
    CHECK(e["LOCAL_RANK"] == std::to_string(node0 ? r : r % 1));
    CHECK(e["MASTER_ADDR"] == "127.0.0.1");
    // runner.py exports PYTHONPATH with the launch directory first.
    char cwd[4096];
    REQUIRE(getcwd(cwd, sizeof(cwd)) != nullptr);
    CHECK(e["PYTHONPATH"].find(cwd) == 0);
  }
  CHECK(ranks == std::set<std::string>{"0", "1", "2"});
}

TEST_CASE("ddprun-deepspeed: --venv_script, -q and --log_level (0.19.6)",
          "[agent][process][deepspeed]") {
  TempDir dir;
  std::ofstream(dir.path() + "/hostfile")
      << "localhost slots=1\n127.0.0.1 slots=1\n";
  // The script every node sources before its launch.
  std::ofstream(dir.path() + "/activate")
      << "VIRTUAL_ENV=" << dir.path() << "/venv\nexport VIRTUAL_ENV\n";
  const int port = FreeLoopbackPort();
  Ddprun run(dir,
             {"-H", dir.path() + "/hostfile", "--master_addr=127.0.0.1",
              "--master_port=" + std::to_string(port), "--venv_script",
              dir.path() + "/activate", "-q", "--no_python", kEnvDump},
             {{"-VIRTUAL_ENV", ""}}, kDeepSpeed);
  REQUIRE(run.Wait(60s) == 0);
  const std::string err = run.Stderr();
  INFO(err);
  for (int r = 0; r < 2; ++r) {
    auto e = ParseEnv(ReadFile(dir.path() + "/env_" + std::to_string(r)));
    CHECK(e["VIRTUAL_ENV"] == dir.path() + "/venv");
  }
  // --quiet: the launcher's own info lines are gone ("over ssh"/"here").
  CHECK(err.find(" I ") == std::string::npos);
  CHECK(err.find("warning from 0") != std::string::npos);
  // Without -q the same launch logs at info.
  TempDir dir2;
  std::ofstream(dir2.path() + "/hostfile")
      << "localhost slots=1\n127.0.0.1 slots=1\n";
  Ddprun loud(dir2,
              {"-H", dir2.path() + "/hostfile", "--master_addr=127.0.0.1",
               "--master_port=" + std::to_string(FreeLoopbackPort()),
               "--log_level=info", "--no_python", kEnvDump},
              {}, kDeepSpeed);
  REQUIRE(loud.Wait(60s) == 0);
  CHECK(loud.Stderr().find(": here, slots 1") != std::string::npos);
}

TEST_CASE("ddprun-deepspeed: --launcher_args of an MPI launcher are exit 2",
          "[agent][process][deepspeed]") {
  TempDir dir;
  // Hosts that do not exist: nothing may be tried over ssh.
  std::ofstream(dir.path() + "/hostfile")
      << "worker-a.invalid slots=1\nworker-b.invalid slots=1\n";
  Ddprun mpi(dir,
             {"-H", dir.path() + "/hostfile", "--launcher", "openmpi",
              "--launcher_args", "--mca btl_tcp_if_include eth0", "--no_python",
              kEnvDump},
             {}, kDeepSpeed);
  REQUIRE(mpi.Wait() == 2);
  CHECK(
      mpi.Stderr().find("ddprun-deepspeed: error: --launcher_args '--mca "
                        "btl_tcp_if_include eth0': with --launcher=openmpi") !=
      std::string::npos);
  CHECK(mpi.Stderr().find("not reachable") == std::string::npos);
}

TEST_CASE("ddprun-deepspeed: -i host:N with a slot the host lacks is exit 2",
          "[agent][process][deepspeed]") {
  // deepspeed's test_parser_errors: a slot that does not exist.
  for (const std::string& include : {"localhost:99", "localhost:0,4"}) {
    TempDir d;
    Ddprun run(d, {"-i", include, "--no_python", kEnvDump},
               {{"CUDA_VISIBLE_DEVICES", "0,1"}}, kDeepSpeed);
    INFO(include);
    REQUIRE(run.Wait() == 2);
    CHECK(run.Stderr().find("has no slot") != std::string::npos);
    CHECK(ReadFile(d.path() + "/env_0").empty());
  }
}

TEST_CASE("ddprun-deepspeed --no_ssh: each node started by hand",
          "[agent][process][deepspeed]") {
  TempDir dir0, dir1;
  std::ofstream(dir0.path() + "/hostfile")
      << "node-a slots=1\nnode-b slots=2\n";
  const int port = FreeLoopbackPort();
  std::vector<std::unique_ptr<Ddprun>> nodes;
  for (int n = 0; n < 2; ++n) {
    nodes.push_back(std::make_unique<Ddprun>(
        n == 0 ? dir0 : dir1,
        std::vector<std::string>{
            "-H", dir0.path() + "/hostfile", "--no_ssh",
            "--node_rank=" + std::to_string(n), "--master_addr=127.0.0.1",
            "--master_port=" + std::to_string(port), "--no_python", kEnvDump},
        std::map<std::string, std::string>{{"-OMP_NUM_THREADS", ""}},
        kDeepSpeed));
  }
  REQUIRE(nodes[0]->Wait(60s) == 0);
  REQUIRE(nodes[1]->Wait(60s) == 0);
  // node-a: rank 0; node-b: ranks 1, 2 with LOCAL_RANK = RANK % 2.
  auto a = ParseEnv(ReadFile(dir0.path() + "/env_0"));
  CHECK(a["CROSS_RANK"] == "0");
  CHECK(a["LOCAL_SIZE"] == "1");
  CHECK(a["WORLD_SIZE"] == "3");
  CHECK(ReadFile(dir0.path() + "/args_0") == "args:--local_rank=0\n");
  for (int r = 1; r <= 2; ++r) {
    auto b = ParseEnv(ReadFile(dir1.path() + "/env_" + std::to_string(r)));
    CHECK(b["CROSS_RANK"] == "1");
    CHECK(b["LOCAL_SIZE"] == "2");
    CHECK(b["LOCAL_RANK"] == std::to_string(r % 2));
    CHECK(b["CUDA_VISIBLE_DEVICES"] == "0,1");
    CHECK(ReadFile(dir1.path() + "/args_" + std::to_string(r % 2)) ==
          "args:--local_rank=" + std::to_string(r % 2) + "\n");
  }
}

TEST_CASE("ddprun-deepspeed: a failing node stops the whole job",
          "[agent][process][deepspeed]") {
  TempDir dir;
  std::ofstream(dir.path() + "/hostfile")
      << "localhost slots=1\n127.0.0.1 slots=1\n";
  // Rank 1 fails once both ranks run; rank 0 would sleep a minute.
  const std::string script =
      "echo $$ > $DDPRUN_TEST_OUT/pid_$RANK.tmp && "
      "mv $DDPRUN_TEST_OUT/pid_$RANK.tmp $DDPRUN_TEST_OUT/pid_$RANK; "
      "if [ $RANK = 1 ]; then "
      "while [ ! -e $DDPRUN_TEST_OUT/pid_0 ]; do sleep 0.05; done; exit 3; fi; "
      "exec sleep 60";
  Ddprun run(dir,
             {"-H", dir.path() + "/hostfile", "--master_addr=127.0.0.1",
              "--master_port=" + std::to_string(FreeLoopbackPort()),
              "--no_local_rank", "--no_python", "sh", "-c", script},
             {}, kDeepSpeed);
  REQUIRE(WaitForFiles({dir.path() + "/pid_0", dir.path() + "/pid_1"}, 30s));
  const auto pids =
      std::vector<int>{std::atoi(ReadFile(dir.path() + "/pid_0").c_str()),
                       std::atoi(ReadFile(dir.path() + "/pid_1").c_str())};
  const int rc = run.Wait(60s);
  INFO(run.Stderr());
  CHECK(rc != 0);
  CHECK(rc != -1);
  CHECK(WaitDead(pids, 10s));
}

TEST_CASE("ddprun-deepspeed: SIGTERM stops every node and worker",
          "[agent][process][deepspeed]") {
  TempDir dir;
  std::ofstream(dir.path() + "/hostfile")
      << "localhost slots=1\n127.0.0.1 slots=1\n";
  Ddprun run(dir,
             {"-H", dir.path() + "/hostfile", "--master_addr=127.0.0.1",
              "--master_port=" + std::to_string(FreeLoopbackPort()),
              "--no_local_rank", "--no_python", kData + "/sleeper.sh"},
             {}, kDeepSpeed);
  REQUIRE(WaitForFiles({dir.path() + "/pid_0", dir.path() + "/pid_1"}, 30s));
  const auto pids =
      std::vector<int>{std::atoi(ReadFile(dir.path() + "/pid_0").c_str()),
                       std::atoi(ReadFile(dir.path() + "/pid_1").c_str())};
  kill(run.pid(), SIGTERM);
  CHECK(run.Wait(30s) == 128 + SIGTERM);
  CHECK(WaitDead(pids, 10s));
}

TEST_CASE("ddprun-deepspeed --elastic_training: DSElasticAgent's workers",
          "[agent][process][deepspeed]") {
  TempDir dir;
  const int port = FreeLoopbackPort();
  Ddprun run(dir,
             {"--elastic_training", "--master_addr=127.0.0.1",
              "--master_port=" + std::to_string(port), "--num_gpus=2",
              "--no_python", kEnvDump, "x"},
             {{"-OMP_NUM_THREADS", ""}, {"-ELASTIC_RUN_ID", ""}}, kDeepSpeed);
  REQUIRE(run.Wait(30s) == 0);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    auto e = ParseEnv(ReadFile(dir.path() + "/env_" + std::to_string(r)));
    // deepspeed/elasticity/elastic_agent.py: torch elastic's variables over
    // launch.py's, role "trainer", run id ELASTIC_RUN_ID or 123456789.
    CHECK(e["RANK"] == std::to_string(r));
    CHECK(e["GROUP_RANK"] == "0");
    CHECK(e["ROLE_NAME"] == "trainer");
    CHECK(e["TORCHELASTIC_RUN_ID"] == "123456789");
    CHECK(e["TORCHELASTIC_MAX_RESTARTS"] == "100");
    CHECK(e["WORLD_SIZE"] == "2");
    CHECK(e["CROSS_RANK"] == "0");
    CHECK(e["CROSS_SIZE"] == "1");
    CHECK(e["LOCAL_SIZE"] == "2");
    CHECK(e["CUDA_VISIBLE_DEVICES"] == "0,1");
    CHECK(e.count("OMP_NUM_THREADS") == 0);  // the agent sets none
    // No --local_rank with --elastic_training.
    CHECK(ReadFile(dir.path() + "/args_" + std::to_string(r)) == "args:x\n");
  }
  CHECK(run.Stderr().find("Setting OMP_NUM_THREADS") == std::string::npos);
}

TEST_CASE("ddprun-deepspeed: bad input is one line and exit 2, and --help",
          "[agent][process][deepspeed]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--num_gpus=x", "t.py"},
           {"--bogus", "t.py"},
           {"--num_gpus=1", "-i", "localhost:0", "t.py"},
           {"--no_python", "/nonexistent/prog"},
           {"-H", "/dev/null", "--num_gpus=1", "/bin/true"}}) {
    TempDir dir;
    Ddprun run(dir, args, {}, kDeepSpeed);
    INFO(args[0]);
    REQUIRE(run.Wait() == 2);
    const std::string err = run.Stderr();
    CHECK(err.find("ddprun-deepspeed: error: ") == 0);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
  TempDir dir;
  Ddprun help(dir, {"--help"}, {}, kDeepSpeed);
  REQUIRE(help.Wait() == 0);
  CHECK(help.Stdout().find("usage: ddprun-deepspeed") == 0);
}

TEST_CASE("ddprun-accelerate --multi_gpu: torchrun's and accelerate's vars",
          "[agent][process][accelerate]") {
  TempDir home, dir;
  const std::map<std::string, std::string> env = {{"HOME", home.path()},
                                                  {"-OMP_NUM_THREADS", ""},
                                                  {"-CUDA_VISIBLE_DEVICES", ""},
                                                  {"-HF_HOME", ""},
                                                  {"-XDG_CACHE_HOME", ""}};
  const auto baseline = Baseline(env);
  const int port = FreeLoopbackPort();
  Ddprun run(dir,
             {"--multi_gpu", "--num_processes=2", "--mixed_precision=bf16",
              "--main_process_port=" + std::to_string(port), "--debug",
              "--gpu_ids=0,1", "--no_python", kEnvDump, "--lr", "1"},
             env, kAccelerate);
  REQUIRE(run.Wait(30s) == 0);
  // torchrun (a shell worker: no torch, so the newest torchrun's contract)
  // + what prepare_multi_gpu_env sets in the launcher's environment.
  const std::set<std::string> expected = {
      "RANK",
      "LOCAL_RANK",
      "GROUP_RANK",
      "ROLE_RANK",
      "ROLE_NAME",
      "LOCAL_WORLD_SIZE",
      "WORLD_SIZE",
      "GROUP_WORLD_SIZE",
      "ROLE_WORLD_SIZE",
      "MASTER_ADDR",
      "MASTER_PORT",
      "TORCHELASTIC_RESTART_COUNT",
      "TORCHELASTIC_MAX_RESTARTS",
      "TORCHELASTIC_RUN_ID",
      "TORCHELASTIC_USE_AGENT_STORE",
      "TORCHELASTIC_ERROR_FILE",
      "TORCHELASTIC_SIGNALS_TO_HANDLE",
      "TORCH_NCCL_ASYNC_ERROR_HANDLING",
      "ACCELERATE_MIXED_PRECISION",
      "ACCELERATE_DYNAMO_BACKEND",
      "ACCELERATE_DYNAMO_MODE",
      "ACCELERATE_DYNAMO_USE_FULLGRAPH",
      "ACCELERATE_DYNAMO_USE_DYNAMIC",
      "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION",
      "ACCELERATE_DEBUG_MODE",
      "CUDA_VISIBLE_DEVICES",
      "OMP_NUM_THREADS"};
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    auto e = ParseEnv(ReadFile(dir.path() + "/env_" + std::to_string(r)));
    CHECK(LauncherSet(e, baseline) == expected);
    CHECK(e["ACCELERATE_MIXED_PRECISION"] == "bf16");
    CHECK(e["ACCELERATE_DYNAMO_BACKEND"] == "NO");
    CHECK(e["ACCELERATE_DEBUG_MODE"] == "true");
    CHECK(e["CUDA_VISIBLE_DEVICES"] == "0,1");
    // accelerate sets OMP_NUM_THREADS itself: torchrun keeps it (no banner).
    CHECK(e["OMP_NUM_THREADS"] == "1");
    CHECK(e["MASTER_PORT"] == std::to_string(port));
    CHECK(e["WORLD_SIZE"] == "2");
    CHECK(e["TORCHELASTIC_RUN_ID"] == "none");
    CHECK(ReadFile(dir.path() + "/args_" + std::to_string(r)) ==
          "args:--lr 1\n");
  }
  CHECK(run.Stderr().find("Setting OMP_NUM_THREADS") == std::string::npos);
}

TEST_CASE("ddprun-accelerate --cpu: one process, the simple launcher's vars",
          "[agent][process][accelerate]") {
  TempDir home, dir;
  const std::map<std::string, std::string> env = {
      {"HOME", home.path()},   {"OMP_NUM_THREADS", "3"}, {"-HF_HOME", ""},
      {"-XDG_CACHE_HOME", ""}, {"-MASTER_ADDR", ""},     {"-MASTER_PORT", ""}};
  const auto baseline = Baseline(env);
  Ddprun run(dir, {"--cpu", "--no_python", kEnvDump, "x"}, env, kAccelerate);
  REQUIRE(run.Wait(30s) == 0);
  // No launcher rank variables: RANK is unset, so the file is env_.
  auto e = ParseEnv(ReadFile(dir.path() + "/env_"));
  CHECK(LauncherSet(e, baseline) ==
        std::set<std::string>{
            "ACCELERATE_USE_CPU", "ACCELERATE_MIXED_PRECISION",
            "ACCELERATE_DYNAMO_BACKEND", "ACCELERATE_DYNAMO_MODE",
            "ACCELERATE_DYNAMO_USE_FULLGRAPH", "ACCELERATE_DYNAMO_USE_DYNAMIC",
            "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "KMP_AFFINITY",
            "KMP_BLOCKTIME"});
  CHECK(e["ACCELERATE_USE_CPU"] == "True");
  CHECK(e["OMP_NUM_THREADS"] == "3");  // get_int_from_env: inherited
  CHECK(ReadFile(dir.path() + "/args_") == "args:x\n");
  // The script ran in place of the launcher: its output is not prefixed.
  CHECK(run.Stdout() == "hello from \n");
  // accelerate's defaults warning: its list is real lines and tabs.
  const std::string err = run.Stderr();
  CHECK(err.find("ddprun-accelerate: warning: The following values were not "
                 "passed to `accelerate launch` and had defaults used "
                 "instead:\n\t`--num_processes` was set to a value of `") !=
        std::string::npos);
  CHECK(err.find("\\n") == std::string::npos);
  CHECK(err.find("\\t") == std::string::npos);
}

TEST_CASE("ddprun-accelerate: a config file as `accelerate config` writes it",
          "[agent][process][accelerate]") {
  TempDir home, dir;
  // Unquoted, as accelerate config writes it: the address, not 10.1.
  std::ofstream(dir.path() + "/cpu.yaml")
      << "compute_environment: LOCAL_MACHINE\n"
         "distributed_type: MULTI_CPU\n"
         "main_process_ip: 10.1.2.3\n"
         "main_process_port: 29555\n"
         "mixed_precision: 'no'\n"
         "num_machines: 1\n"
         "num_processes: 2\n"
         "use_cpu: true\n"
         "mpirun_config: {}\n";
  const std::map<std::string, std::string> env = {{"HOME", home.path()},
                                                  {"-MASTER_ADDR", ""}};
  Ddprun run(
      dir, {"--config_file", dir.path() + "/cpu.yaml", "--no_python", kEnvDump},
      env, kAccelerate);
  REQUIRE(run.Wait(30s) == 0);
  INFO(run.Stderr());
  auto e = ParseEnv(ReadFile(dir.path() + "/env_"));
  CHECK(e["MASTER_ADDR"] == "10.1.2.3");
  CHECK(e["MASTER_PORT"] == "29555");
  // accelerate's 0_28_0_mpi.yaml: mpirun over a hostfile is refused,
  // naming the key, instead of one silent process.
  TempDir mpi_dir;
  std::ofstream(mpi_dir.path() + "/mpi.yaml")
      << "distributed_type: MULTI_CPU\n"
         "mpirun_config:\n"
         "  mpirun_hostfile: /home/user/hostfile\n"
         "num_machines: 4\n"
         "num_processes: 16\n"
         "use_cpu: true\n";
  Ddprun mpi(
      mpi_dir,
      {"--config_file", mpi_dir.path() + "/mpi.yaml", "--no_python", kEnvDump},
      env, kAccelerate);
  REQUIRE(mpi.Wait() == 2);
  CHECK(mpi.Stderr().find("ddprun-accelerate: error: "
                          "mpirun_config.mpirun_hostfile") == 0);
  CHECK(ReadFile(mpi_dir.path() + "/env_").empty());
  // test_validate_launch_command: --deepspeed_config_file on a launch that
  // is not a DeepSpeed launch is accepted (and unused).
  TempDir ds_dir;
  Ddprun ds(ds_dir,
            {"--cpu", "--deepspeed_config_file", "path/to/be/accepted",
             "--no_python", kEnvDump},
            env, kAccelerate);
  REQUIRE(ds.Wait(30s) == 0);
  CHECK_FALSE(ReadFile(ds_dir.path() + "/env_").empty());
}

TEST_CASE("ddprun-accelerate: bad input is one line and exit 2, and --help",
          "[agent][process][accelerate]") {
  TempDir home;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--multi_gpu", "--num_processes=1", "/bin/true"},
           {"--cpu", "--multi_gpu", "/bin/true"},
           {"--mixed_precision=fp32", "/bin/true"},
           {"--zero_stage=2", "/bin/true"},
           {"--config_file=/nonexistent.yaml", "/bin/true"}}) {
    TempDir dir;
    Ddprun run(dir, args, {{"HOME", home.path()}}, kAccelerate);
    INFO(args[0]);
    REQUIRE(run.Wait() == 2);
    const std::string err = run.Stderr();
    CHECK(err.find("ddprun-accelerate: error: ") == 0);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
  TempDir dir;
  Ddprun help(dir, {"-h"}, {}, kAccelerate);
  REQUIRE(help.Wait() == 0);
  CHECK(help.Stdout().find("usage: ddprun-accelerate") == 0);
}
