#include "ddprun_catch.h"

#include <csignal>

#include "agent/elastic/worker_env.h"

using ddprun::agent::AddWatchEnv;
using ddprun::agent::BuildWorkerArgv;
using ddprun::agent::BuildWorkerEnv;
using ddprun::agent::EntrypointName;
using ddprun::agent::EnvMap;
using ddprun::agent::LaunchOptions;
using ddprun::agent::NeedsOmpDefault;
using ddprun::agent::TorchVersion;
using ddprun::agent::WorkerWatchFiles;
using ddprun::rendezvous::RendezvousResult;

namespace {

RendezvousResult Round() {
  RendezvousResult r;
  r.round = 3;
  r.group_rank = 1;
  r.group_world_size = 2;
  r.rank_offset = 4;
  r.world_size = 8;
  r.role_rank_offset = 4;
  r.role_world_size = 8;
  r.master_addr = "10.1.2.3";
  r.master_port = 29511;
  r.restart_count = 2;
  return r;
}

LaunchOptions Options() {
  LaunchOptions o;
  o.nproc_per_node = 4;
  o.max_restarts = 5;
  o.role = "trainer";
  o.entrypoint = "train.py";
  o.entrypoint_args = {"--lr", "1e-4"};
  return o;
}

}  // namespace

TEST_CASE("BuildWorkerEnv: static multi-node workers use the agent store",
          "[agent]") {
  // Node 0's agent serves their c10d store on --master_port
  // (agent/hosting/agent_store.h): torch must connect to it, not bind it in
  // rank 0.
  LaunchOptions o = Options();
  o.min_nodes = o.max_nodes = 2;
  EnvMap env = BuildWorkerEnv(o, TorchVersion(), Round(), "job7", 0, "", {});
  CHECK(env.at("TORCHELASTIC_USE_AGENT_STORE") == "True");
  o.contract = ddprun::agent::WorkerContract::kDeepSpeed;
  env = BuildWorkerEnv(o, TorchVersion(), Round(), "job7", 0, "", {});
  CHECK(env.at("TORCHELASTIC_USE_AGENT_STORE") == "True");
  // With rdzv_conf TLS the rendezvous keeps the port: rank 0's store.
  o.contract = ddprun::agent::WorkerContract::kTorchrun;
  o.rendezvous.tls_cert_pem = "cert";
  env = BuildWorkerEnv(o, TorchVersion(), Round(), "job7", 0, "", {});
  CHECK(env.at("TORCHELASTIC_USE_AGENT_STORE") == "False");
  // An elastic grpc job: rank 0's store, as before.
  o.rendezvous.tls_cert_pem.clear();
  o.rdzv_backend = "grpc";
  o.rdzv_endpoint = "10.0.0.1:29400";
  env = BuildWorkerEnv(o, TorchVersion(), Round(), "job7", 0, "", {});
  CHECK(env.at("TORCHELASTIC_USE_AGENT_STORE") == "False");
}

TEST_CASE("BuildWorkerEnv: workers never see the rendezvous token", "[agent]") {
  // Issue 39: workers (user code and whatever it starts) inherited the
  // agents' secret; the live view's tokens (issue 42) are secrets too.
  const EnvMap parent = {{"DDPRUN_RDZV_TOKEN", "s3cret"},
                         {"DDPRUN_RDZV_TOKEN_FILE", "/etc/ddprun/token"},
                         {"DDPRUN_HTTP_TOKEN", "read"},
                         {"DDPRUN_HTTP_ADMIN_TOKEN", "admin"},
                         {"HOME", "/home/u"}};
  LaunchOptions o = Options();
  for (auto contract : {ddprun::agent::WorkerContract::kTorchrun,
                        ddprun::agent::WorkerContract::kDeepSpeed}) {
    o.contract = contract;
    EnvMap env =
        BuildWorkerEnv(o, TorchVersion(), Round(), "job7", 0, "", parent);
    CHECK(env.count("DDPRUN_RDZV_TOKEN") == 0);
    CHECK(env.count("DDPRUN_RDZV_TOKEN_FILE") == 0);
    CHECK(env.count("DDPRUN_HTTP_TOKEN") == 0);
    CHECK(env.count("DDPRUN_HTTP_ADMIN_TOKEN") == 0);
    CHECK(env.at("HOME") == "/home/u");
  }
}

TEST_CASE("BuildWorkerEnv: sets every torchrun variable", "[agent]") {
  EnvMap parent = {{"PATH", "/usr/bin"}, {"HOME", "/root"}};
  EnvMap env = BuildWorkerEnv(Options(), TorchVersion(), Round(), "job7", 2,
                              "/logs/attempt_2/2/error.json", parent);
  CHECK(env.at("RANK") == "6");
  CHECK(env.at("LOCAL_RANK") == "2");
  CHECK(env.at("GROUP_RANK") == "1");
  CHECK(env.at("ROLE_RANK") == "6");
  CHECK(env.at("ROLE_NAME") == "trainer");
  CHECK(env.at("ROLE_WORLD_SIZE") == "8");
  CHECK(env.at("LOCAL_WORLD_SIZE") == "4");
  CHECK(env.at("WORLD_SIZE") == "8");
  CHECK(env.at("GROUP_WORLD_SIZE") == "2");
  CHECK(env.at("MASTER_ADDR") == "10.1.2.3");
  CHECK(env.at("MASTER_PORT") == "29511");
  CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(env.at("TORCHELASTIC_MAX_RESTARTS") == "5");
  CHECK(env.at("TORCHELASTIC_RUN_ID") == "job7");
  CHECK(env.at("TORCHELASTIC_USE_AGENT_STORE") == "False");
  CHECK(env.at("TORCHELASTIC_ERROR_FILE") == "/logs/attempt_2/2/error.json");
  // Torch version unknown: what the newest torchrun sets.
  CHECK(env.at("TORCHELASTIC_SIGNALS_TO_HANDLE") ==
        "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(env.count("NCCL_ASYNC_ERROR_HANDLING") == 0);
  CHECK(env.at("OMP_NUM_THREADS") == "1");
  // The parent's environment is inherited.
  CHECK(env.at("PATH") == "/usr/bin");
  CHECK(env.at("HOME") == "/root");
  CHECK(env.count("CUDA_VISIBLE_DEVICES") == 0);
}

TEST_CASE("BuildWorkerEnv: only what torchrun of the workers' torch sets",
          "[agent]") {
  struct Case {
    const char* torch;
    const char* nccl_var;  // the one NCCL error-handling name set
    bool signals;          // TORCHELASTIC_SIGNALS_TO_HANDLE exported
  };
  const Case cases[] = {
      {"1.13.0a0", "NCCL_ASYNC_ERROR_HANDLING", false},
      {"2.1.2", "NCCL_ASYNC_ERROR_HANDLING", false},
      {"2.2.0", "TORCH_NCCL_ASYNC_ERROR_HANDLING", false},
      {"2.6.0+debian", "TORCH_NCCL_ASYNC_ERROR_HANDLING", false},
      {"2.9.0", "TORCH_NCCL_ASYNC_ERROR_HANDLING", true},
      {"2.11.0+cu130", "TORCH_NCCL_ASYNC_ERROR_HANDLING", true},
  };
  for (const Case& c : cases) {
    INFO("torch " << c.torch);
    LaunchOptions o = Options();
    o.torch_version = *ddprun::agent::ParseTorchVersion("test", c.torch);
    EnvMap env = BuildWorkerEnv(o, o.torch_version, Round(), "j", 0, "e", {});
    const std::string other =
        std::string(c.nccl_var) == "NCCL_ASYNC_ERROR_HANDLING"
            ? "TORCH_NCCL_ASYNC_ERROR_HANDLING"
            : "NCCL_ASYNC_ERROR_HANDLING";
    CHECK(env.at(c.nccl_var) == "1");
    CHECK(env.count(other) == 0);
    CHECK(env.count("TORCHELASTIC_SIGNALS_TO_HANDLE") == (c.signals ? 1u : 0u));
    // An inherited old name stays (the parent set it), and is not added.
    EnvMap inherited = BuildWorkerEnv(o, o.torch_version, Round(), "j", 0, "e",
                                      {{c.nccl_var, "0"}});
    CHECK(inherited.at(c.nccl_var) == "0");
  }
}

TEST_CASE("BuildWorkerEnv: inherited values win over defaults", "[agent]") {
  EnvMap parent = {{"OMP_NUM_THREADS", "8"},
                   {"NCCL_ASYNC_ERROR_HANDLING", "0"},
                   {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"},
                   {"RANK", "99"}};
  LaunchOptions o = Options();
  o.signals_to_handle = {SIGUSR1, SIGTERM};
  EnvMap env =
      BuildWorkerEnv(o, o.torch_version, Round(), "job7", 0, "e.json", parent);
  CHECK(env.at("OMP_NUM_THREADS") == "8");
  CHECK(env.at("NCCL_ASYNC_ERROR_HANDLING") == "0");
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "3");
  CHECK(env.at("RANK") == "4");  // the agent's value, not the parent's
  CHECK(env.at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGUSR1,SIGTERM");
}

TEST_CASE("BuildWorkerEnv: OMP_NUM_THREADS only defaulted for nproc > 1",
          "[agent]") {
  LaunchOptions o = Options();
  o.nproc_per_node = 1;
  EnvMap env = BuildWorkerEnv(o, o.torch_version, Round(), "j", 0, "e", {});
  CHECK(env.count("OMP_NUM_THREADS") == 0);
  CHECK_FALSE(NeedsOmpDefault(o, {}));
  o.nproc_per_node = 2;
  CHECK(NeedsOmpDefault(o, {}));
  CHECK_FALSE(NeedsOmpDefault(o, {{"OMP_NUM_THREADS", "4"}}));
}

TEST_CASE("BuildWorkerEnv: virtual local rank pins one device", "[agent]") {
  LaunchOptions o = Options();
  o.virtual_local_rank = true;
  EnvMap env = BuildWorkerEnv(o, o.torch_version, Round(), "j", 2, "e",
                              {{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}});
  CHECK(env.at("LOCAL_RANK") == "0");
  CHECK(env.at("RANK") == "6");
  CHECK(env.at("CUDA_VISIBLE_DEVICES") == "6");
  // ddprun's C++ worker must not read LOCAL_WORLD_SIZE ranks on one GPU
  // (it would run Gloo on CUDA, or exit 2 with --backend nccl).
  CHECK(env.at("DDPRUN_GPU_PER_RANK") == "1");
  EnvMap no_list = BuildWorkerEnv(o, o.torch_version, Round(), "j", 3, "e", {});
  CHECK(no_list.at("CUDA_VISIBLE_DEVICES") == "3");
  CHECK(no_list.at("DDPRUN_GPU_PER_RANK") == "1");
  o.virtual_local_rank = false;
  EnvMap shared = BuildWorkerEnv(o, o.torch_version, Round(), "j", 2, "e",
                                 {{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}});
  CHECK(shared.count("DDPRUN_GPU_PER_RANK") == 0);
  CHECK(shared.at("CUDA_VISIBLE_DEVICES") == "4,5,6,7");
}

TEST_CASE("AddWatchEnv: ddprun's files, the dump signal, the Python hook",
          "[agent]") {
  WorkerWatchFiles files;
  files.heartbeat = "/logs/attempt_0/1/heartbeat";
  files.steps = "/logs/attempt_0/1/steps";
  files.stacks = "/logs/attempt_0/1/stacks.txt";
  EnvMap env = {{"PYTHONPATH", "/user/path"}, {"RANK", "1"}};
  AddWatchEnv(files, "/opt/ddprun/lib/ddprun/python", &env);
  CHECK(env.at("DDPRUN_WATCHDOG_FILE") == "/logs/attempt_0/1/heartbeat");
  CHECK(env.at("DDPRUN_STEP_FILE") == "/logs/attempt_0/1/steps");
  CHECK(env.at("DDPRUN_STACKS_FILE") == "/logs/attempt_0/1/stacks.txt");
  CHECK(env.at("DDPRUN_STACKS_SIGNAL") == std::to_string(SIGRTMAX - 2));
  // Last: the user's order is kept (deepspeed's cwd stays first).
  CHECK(env.at("PYTHONPATH") == "/user/path:/opt/ddprun/lib/ddprun/python");
  CHECK(env.at("RANK") == "1");
  CHECK(env.size() == 6);
  EnvMap no_user_path;
  AddWatchEnv(files, "/opt/ddprun/lib/ddprun/python", &no_user_path);
  CHECK(no_user_path.at("PYTHONPATH") == "/opt/ddprun/lib/ddprun/python");
  // No hook folder found: stacks file and signal, PYTHONPATH untouched.
  EnvMap no_hook = {{"PYTHONPATH", "/user/path"}};
  AddWatchEnv(files, "", &no_hook);
  CHECK(no_hook.at("DDPRUN_STACKS_FILE") == "/logs/attempt_0/1/stacks.txt");
  CHECK(no_hook.at("PYTHONPATH") == "/user/path");
}

TEST_CASE("AddWatchEnv: nothing for watching that is off", "[agent]") {
  // No log dir (--log_dir /dev/null), no --watchdog_timeout, DDPRUN_STACKS=0:
  // no file, and PYTHONPATH stays as inherited even with a hook folder.
  EnvMap env = {{"PATH", "/usr/bin"}};
  AddWatchEnv(WorkerWatchFiles(), "/opt/ddprun/lib/ddprun/python", &env);
  CHECK(env == EnvMap{{"PATH", "/usr/bin"}});
  // Only a heartbeat (the watchdog on, stack dumps off).
  WorkerWatchFiles heartbeat_only;
  heartbeat_only.heartbeat = "/logs/attempt_0/0/heartbeat";
  AddWatchEnv(heartbeat_only, "/opt/ddprun/lib/ddprun/python", &env);
  CHECK(env.at("DDPRUN_WATCHDOG_FILE") == "/logs/attempt_0/0/heartbeat");
  CHECK(env.count("DDPRUN_STACKS_FILE") == 0);
  CHECK(env.count("DDPRUN_STACKS_SIGNAL") == 0);
  CHECK(env.count("DDPRUN_STEP_FILE") == 0);
  CHECK(env.count("PYTHONPATH") == 0);
}

TEST_CASE("BuildWorkerArgv: python script, module, no_python", "[agent]") {
  LaunchOptions o = Options();
  using V = std::vector<std::string>;
  CHECK(BuildWorkerArgv(o, o.torch_version, 1, {}) ==
        V{"python3", "-u", "train.py", "--lr", "1e-4"});
  CHECK(BuildWorkerArgv(o, o.torch_version, 1,
                        {{"PYTHON_EXEC", "/usr/bin/python3"}}) ==
        V{"/usr/bin/python3", "-u", "train.py", "--lr", "1e-4"});
  o.module = true;
  o.entrypoint = "pkg.mod";
  CHECK(BuildWorkerArgv(o, o.torch_version, 0, {}) ==
        V{"python3", "-u", "-m", "pkg.mod", "--lr", "1e-4"});
  o.module = false;
  o.no_python = true;
  o.entrypoint = "/bin/true";
  CHECK(BuildWorkerArgv(o, o.torch_version, 0, {}) ==
        V{"/bin/true", "--lr", "1e-4"});
  CHECK(EntrypointName(o) == "/bin/true");
  o.no_python = false;
  o.run_path = true;
  o.entrypoint = "/abs/x.py";
  CHECK(BuildWorkerArgv(o, o.torch_version, 0, {}) ==
        V{"python3", "-u", "/abs/x.py", "--lr", "1e-4"});
}

TEST_CASE("BuildWorkerArgv: legacy launch appends --local-rank or --local_rank",
          "[agent]") {
  LaunchOptions o = Options();
  o.legacy_launch = true;
  using V = std::vector<std::string>;
  // torch.distributed.launch of torch >= 2.0 (and an unknown torch).
  CHECK(BuildWorkerArgv(o, o.torch_version, 3, {}) ==
        V{"python3", "-u", "train.py", "--local-rank=3", "--lr", "1e-4"});
  o.torch_version = *ddprun::agent::ParseTorchVersion("test", "2.0.1");
  CHECK(BuildWorkerArgv(o, o.torch_version, 3, {})[3] == "--local-rank=3");
  o.torch_version = *ddprun::agent::ParseTorchVersion("test", "1.13.0a0");
  CHECK(BuildWorkerArgv(o, o.torch_version, 3, {}) ==
        V{"python3", "-u", "train.py", "--local_rank=3", "--lr", "1e-4"});
  o.use_env = true;
  CHECK(BuildWorkerArgv(o, o.torch_version, 3, {}) ==
        V{"python3", "-u", "train.py", "--lr", "1e-4"});
}

TEST_CASE("BuildWorkerArgv: an ELF entrypoint runs without Python", "[agent]") {
  LaunchOptions o = Options();
  o.entrypoint = "/bin/true";  // an ELF binary, no --no_python
  using V = std::vector<std::string>;
  CHECK(BuildWorkerArgv(o, o.torch_version, 0, {}) ==
        V{"/bin/true", "--lr", "1e-4"});
  o.entrypoint = DDPRUN_SOURCE_DIR "/tests/agent/data/env_dump.sh";
  CHECK(BuildWorkerArgv(o, o.torch_version, 0, {})[0] ==
        "python3");  // not ELF: Python
}
