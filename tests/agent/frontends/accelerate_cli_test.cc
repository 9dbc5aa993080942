// ddprun-accelerate against accelerate's own launcher code: every expected
// value below is what accelerate/commands/launch.py (launch_command_parser,
// _validate_launch_command, launch_command) and accelerate/utils/launch.py
// (prepare_multi_gpu_env, prepare_simple_launcher_cmd_env, setup_fp8_env,
// prepare_extend_env_parallelism_config) of accelerate 1.15.0.dev0 compute
// for the same arguments; the function is named at each case.

#include "ddprun_catch.h"

#include <stdlib.h>

#include <chrono>
#include <fstream>

#include "agent/frontends/accelerate/accelerate_args.h"
#include "agent/frontends/accelerate/accelerate_cli.h"
#include "agent/frontends/accelerate/accelerate_config.h"
#include "agent/frontends/py_value.h"

using namespace ddprun::agent;  // NOLINT

namespace {

using Env = std::map<std::string, std::string>;

class TempHome {
 public:
  TempHome() {
    char tmpl[] = "/tmp/ddprun_acc_XXXXXX";
    path_ = mkdtemp(tmpl);
    script_ = Write("train.py", "print('hi')\n");
  }
  ~TempHome() { (void)!system(("rm -rf " + path_).c_str()); }
  std::string Write(const std::string& name, const std::string& text) {
    (void)!system(("mkdir -p $(dirname " + path_ + "/" + name + ")").c_str());
    std::ofstream(path_ + "/" + name) << text;
    return path_ + "/" + name;
  }
  // HOME without an accelerate config (unless one is written to
  // .cache/huggingface/accelerate/default_config.yaml).
  Env BaseEnv() const { return {{"HOME", path_}, {"PATH", "/usr/bin:/bin"}}; }
  const std::string& script() const { return script_; }

 private:
  std::string path_, script_;
};

struct Probes {
  AccelerateProbes p;
  int free_port_calls = 0;
  std::set<int> busy;
  Probes(int gpus, int cores) {
    p.host.cuda_devices = gpus;
    p.host.physical_cores = cores;
    p.port_in_use = [this](int port) { return busy.count(port) > 0; };
    p.free_port = [this] {
      ++free_port_calls;
      return 41234;
    };
  }
};

AcceleratePlan Plan(std::vector<std::string> args, const Env& env,
                    const Probes& probes) {
  auto plan = PlanAccelerateLaunch(args, env, probes.p);
  INFO((plan.ok() ? "" : plan.status().message()));
  REQUIRE(plan.ok());
  return std::move(plan).value();
}

std::string PlanError(std::vector<std::string> args, const Env& env,
                      const Probes& probes) {
  auto plan = PlanAccelerateLaunch(args, env, probes.p);
  REQUIRE_FALSE(plan.ok());
  return plan.status().message();
}

// prepare_multi_gpu_env's variables for default flags (mixed precision and
// the dynamo defaults; OMP_NUM_THREADS from get_int_from_env(..., 1)).
Env MultiGpuDefaults(const std::string& precision) {
  return {{"ACCELERATE_MIXED_PRECISION", precision},
          {"ACCELERATE_DYNAMO_BACKEND", "NO"},
          {"ACCELERATE_DYNAMO_MODE", "default"},
          {"ACCELERATE_DYNAMO_USE_FULLGRAPH", "False"},
          {"ACCELERATE_DYNAMO_USE_DYNAMIC", "False"},
          {"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "False"},
          {"OMP_NUM_THREADS", "1"}};
}

}  // namespace

TEST_CASE("accelerate --multi_gpu: torchrun plus prepare_multi_gpu_env",
          "[accelerate]") {
  TempHome home;
  Probes probes(/*gpus=*/0, /*cores=*/2);
  AcceleratePlan plan =
      Plan({"--multi_gpu", "--num_processes", "2", "--mixed-precision=fp16",
            home.script(), "--lr", "1"},
           home.BaseEnv(), probes);
  REQUIRE(plan.torchrun);
  // prepare_multi_gpu_env: nproc_per_node = num_processes, master_port 29500.
  const LaunchOptions& o = plan.launch.options;
  CHECK(o.nproc_per_node == 2);
  CHECK(o.min_nodes == 1);
  CHECK(o.max_nodes == 1);
  CHECK(o.master_port == 29500);
  CHECK(o.rdzv_backend == "static");
  CHECK_FALSE(o.standalone);
  CHECK(o.max_restarts == 0);
  CHECK(o.entrypoint == home.script());
  CHECK(o.entrypoint_args == std::vector<std::string>{"--lr", "1"});
  CHECK(plan.launch.env_overrides == MultiGpuDefaults("fp16"));
  // _validate_launch_command's warning for the values it defaulted.
  REQUIRE(plan.warnings.size() == 1);
  CHECK(plan.warnings[0] ==
        "The following values were not passed to `accelerate launch` and had "
        "defaults used instead:\n"
        "\t`--num_machines` was set to a value of `1`\n"
        "\t`--dynamo_backend` was set to a value of `'no'`\n"
        "To avoid this warning pass in values for each of the problematic "
        "parameters or run `accelerate config`.");
  // The port taken: accelerate's standalone-like mode.
  probes.busy.insert(29500);
  AcceleratePlan busy =
      Plan({"--multi_gpu", "--num_processes=2", "--num_machines=1",
            "--dynamo_backend=no", home.script()},
           home.BaseEnv(), probes);
  CHECK(busy.launch.options.standalone);
  CHECK(busy.warnings.back().find("Port `29500` is already in use.") == 0);
  // --main_process_port 0: get_free_port().
  AcceleratePlan free = Plan({"--multi_gpu", "--num_processes=2",
                              "--main_process_port=0", home.script()},
                             home.BaseEnv(), probes);
  CHECK(free.launch.options.master_port == 41234);
  CHECK(probes.free_port_calls == 1);
  // Several GPUs and no --multi_gpu: multi-GPU all the same.
  Probes gpus(/*gpus=*/4, /*cores=*/2);
  AcceleratePlan found =
      Plan({home.script()}, home.BaseEnv(), gpus);  // num_processes = 4
  CHECK(found.torchrun);
  CHECK(found.launch.options.nproc_per_node == 4);
}

TEST_CASE("accelerate: every flag prepare_multi_gpu_env turns into a variable",
          "[accelerate]") {
  TempHome home;
  Probes probes(0, 2);
  AcceleratePlan plan =
      Plan({"--multi_gpu", "--num_processes=2", "--num_machines=1",
            "--mixed_precision=fp8", "--fp8_backend=te", "--fp8_margin=2",
            "--fp8_override_linear_precision=true,false,1", "--dynamo_backend",
            "inductor", "--dynamo_mode=max-autotune", "--dynamo_use_fullgraph",
            "--gpu_ids=0,1", "--debug", "--enable_cpu_affinity",
            "--num_cpu_threads_per_process=3", home.script()},
           home.BaseEnv(), probes);
  Env expected = {
      {"ACCELERATE_MIXED_PRECISION", "fp8"},
      {"ACCELERATE_DYNAMO_BACKEND", "INDUCTOR"},
      {"ACCELERATE_DYNAMO_MODE", "max-autotune"},
      {"ACCELERATE_DYNAMO_USE_FULLGRAPH", "True"},
      {"ACCELERATE_DYNAMO_USE_DYNAMIC", "False"},
      {"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "False"},
      {"ACCELERATE_DEBUG_MODE", "true"},
      {"CUDA_VISIBLE_DEVICES", "0,1"},
      {"ACCELERATE_CPU_AFFINITY", "1"},
      {"OMP_NUM_THREADS", "3"},
      // setup_fp8_env: every fp8_* argument that is not None.
      {"ACCELERATE_FP8_BACKEND", "te"},
      {"ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL", "False"},
      {"ACCELERATE_FP8_MARGIN", "2"},
      {"ACCELERATE_FP8_INTERVAL", "1"},
      {"ACCELERATE_FP8_FORMAT", "HYBRID"},
      {"ACCELERATE_FP8_AMAX_HISTORY_LEN", "1024"},
      {"ACCELERATE_FP8_AMAX_COMPUTE_ALGO", "most_recent"},
      {"ACCELERATE_FP8_OVERRIDE_FPROP", "1"},
      {"ACCELERATE_FP8_OVERRIDE_DGRAD", "0"},
      {"ACCELERATE_FP8_OVERRIDE_WGRAD", "1"},
      {"ACCELERATE_FP8_OPT_LEVEL", "O2"},
      // type=str_to_bool applied to the default "true".
      {"ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER", "1"},
      {"ACCELERATE_FP8_PAD_INNER_DIM", "1"},
  };
  CHECK(plan.launch.env_overrides == expected);
  CHECK(plan.warnings.empty());
}

TEST_CASE("accelerate --use_fsdp: FSDP_* and parallelism variables",
          "[accelerate]") {
  TempHome home;
  Probes probes(0, 2);
  AcceleratePlan plan =
      Plan({"--use_fsdp", "--num_processes=2", "--num_machines=1",
            "--dynamo_backend=no", "--mixed_precision=bf16", "--fsdp_version=2",
            "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
            "--fsdp_transformer_layer_cls_to_wrap", "BertLayer",
            "--fsdp_reshard_after_forward=True", "--use_parallelism_config",
            "--parallelism_config_dp_shard_size=2",
            "--parallelism_config_cp_size=2", home.script()},
           home.BaseEnv(), probes);
  REQUIRE(plan.torchrun);
  Env expected = MultiGpuDefaults("bf16");
  Env fsdp = {{"ACCELERATE_USE_FSDP", "true"},
              {"FSDP_VERSION", "2"},
              {"FSDP_SHARDING_STRATEGY", "FULL_SHARD"},
              {"FSDP_RESHARD_AFTER_FORWARD", "true"},
              {"FSDP_OFFLOAD_PARAMS", "false"},
              {"FSDP_MIN_NUM_PARAMS", "100000000"},
              {"FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP"},
              {"FSDP_TRANSFORMER_CLS_TO_WRAP", "BertLayer"},
              {"FSDP_FORWARD_PREFETCH", "false"},
              {"FSDP_USE_ORIG_PARAMS", "true"},
              {"FSDP_CPU_RAM_EFFICIENT_LOADING", "true"},
              {"FSDP_SYNC_MODULE_STATES", "true"},
              {"FSDP_ACTIVATION_CHECKPOINTING", "false"},
              {"ACCELERATE_USE_PARALLELISM_CONFIG", "true"},
              {"PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "1"},
              {"PARALLELISM_CONFIG_DP_SHARD_SIZE", "2"},
              {"PARALLELISM_CONFIG_TP_SIZE", "1"},
              {"PARALLELISM_CONFIG_CP_SIZE", "2"},
              {"PARALLELISM_CONFIG_CP_BACKEND", "torch"},
              {"PARALLELISM_CONFIG_SP_SIZE", "1"},
              {"PARALLELISM_CONFIG_SP_BACKEND", "deepspeed"},
              {"PARALLELISM_CONFIG_CP_COMM_STRATEGY", "allgather"}};
  expected.insert(fsdp.begin(), fsdp.end());
  CHECK(plan.launch.env_overrides == expected);
}

TEST_CASE("accelerate: several machines, as prepare_multi_gpu_env",
          "[accelerate]") {
  TempHome home;
  Probes probes(0, 2);
  probes.busy.insert(29555);  // only machine 0 checks its port
  AcceleratePlan rank1 =
      Plan({"--multi_gpu", "--num_processes=4", "--num_machines=2",
            "--machine_rank=1", "--main_process_ip=10.0.0.1",
            "--main_process_port=29555", "--rdzv_conf=join_timeout=30",
            home.script()},
           home.BaseEnv(), probes);
  const LaunchOptions& o = rank1.launch.options;
  CHECK(o.nproc_per_node == 2);  // num_processes // num_machines
  CHECK(o.min_nodes == 2);
  CHECK(o.node_rank == 1);
  CHECK(o.rdzv_backend == "static");
  CHECK(o.rdzv_endpoint == "10.0.0.1:29555");
  // torchrun's static rule: the endpoint is the master.
  CHECK(o.master_addr == "10.0.0.1");
  CHECK(o.master_port == 29555);
  CHECK(o.rendezvous.join_timeout == std::chrono::seconds(30));
  AcceleratePlan same =
      Plan({"--multi_gpu", "--num_processes=4", "--num_machines=2",
            "--machine_rank=1", "--main_process_ip=10.0.0.1", "--same_network",
            home.script()},
           home.BaseEnv(), probes);
  CHECK(same.launch.options.rdzv_endpoint.empty());
  CHECK(same.launch.options.master_addr == "10.0.0.1");
  CHECK(same.launch.options.master_port == 29500);
  // Machine 0 with its port taken: accelerate's ConnectionError.
  auto rank0 = PlanAccelerateLaunch(
      {"--multi_gpu", "--num_processes=4", "--num_machines=2",
       "--machine_rank=0", "--main_process_ip=10.0.0.1",
       "--main_process_port=29555", home.script()},
      home.BaseEnv(), probes.p);
  CHECK(rank0.status().code() == ddprun::StatusCode::kUnavailable);
  CHECK(PlanError({"--multi_gpu", "--num_processes=4", "--num_machines=2",
                   "--main_process_ip=10.0.0.1", home.script()},
                  home.BaseEnv(), probes) ==
        "--machine_rank is required with --num_machines > 1");
}

TEST_CASE("accelerate --cpu: simple_launcher, one process", "[accelerate]") {
  TempHome home;
  Probes probes(0, 8);
  Env env = home.BaseEnv();
  env["PYTHON_EXEC"] = "/usr/bin/python3";
  AcceleratePlan plan =
      Plan({"--cpu", "--num_processes=2", home.script(), "a"}, env, probes);
  CHECK_FALSE(plan.torchrun);
  CHECK(plan.exec_argv ==
        std::vector<std::string>{"/usr/bin/python3", home.script(), "a"});
  Env expected = env;
  const Env simple = {
      {"ACCELERATE_USE_CPU", "True"},
      {"ACCELERATE_MIXED_PRECISION", "no"},
      {"ACCELERATE_DYNAMO_BACKEND", "NO"},
      {"ACCELERATE_DYNAMO_MODE", "default"},
      {"ACCELERATE_DYNAMO_USE_FULLGRAPH", "False"},
      {"ACCELERATE_DYNAMO_USE_DYNAMIC", "False"},
      {"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "False"},
      // num_processes > 1
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", "29500"},
      // parse_flag_from_env(ACCELERATE_USE_CPU)
      {"KMP_AFFINITY", "granularity=fine,compact,1,0"},
      {"KMP_BLOCKTIME", "1"},
      // psutil.cpu_count(logical=False) / local processes: 8 / 2.
      {"OMP_NUM_THREADS", "4"}};
  expected.insert(simple.begin(), simple.end());
  CHECK(plan.exec_env == expected);
  // One process, module.
  AcceleratePlan one = Plan({"--cpu", "-m", "pkg.train"}, env, probes);
  CHECK(one.exec_argv ==
        std::vector<std::string>{"/usr/bin/python3", "-m", "pkg.train"});
  CHECK(one.exec_env.count("MASTER_ADDR") == 0);
  // OMP_NUM_THREADS set: kept, no core count.
  env["OMP_NUM_THREADS"] = "6";
  CHECK(Plan({"--cpu", "--num_processes=2", home.script()}, env, probes)
            .exec_env.at("OMP_NUM_THREADS") == "6");
  env["OMP_NUM_THREADS"] = "many";
  CHECK(PlanError({"--cpu", home.script()}, env, probes) ==
        "OMP_NUM_THREADS: invalid value 'many' (not an integer)");
  // No GPU, no flag: the simple launcher too (num_processes = 0 GPUs).
  AcceleratePlan plain = Plan({home.script()}, home.BaseEnv(), probes);
  CHECK_FALSE(plain.torchrun);
  CHECK(plain.exec_env.at("ACCELERATE_USE_CPU") == "False");
}

TEST_CASE("accelerate config file: default_config.yaml merged as accelerate",
          "[accelerate]") {
  TempHome home;
  Probes probes(0, 2);
  home.Write(".cache/huggingface/accelerate/default_config.yaml",
             "compute_environment: LOCAL_MACHINE\n"
             "distributed_type: MULTI_GPU\n"
             "num_processes: 2\n"
             "num_machines: 1\n"
             "machine_rank: 0\n"
             "gpu_ids: all\n"
             "mixed_precision: bf16\n"
             "debug: yes\n"
             "main_process_port: 29512\n"
             "rdzv_backend: c10d\n"  // ignored: the flag's default wins
             "use_cpu: false\n"
             "dynamo_config:\n"
             "  dynamo_backend: INDUCTOR\n"
             "  dynamo_use_dynamic: true\n");
  AcceleratePlan plan = Plan({home.script()}, home.BaseEnv(), probes);
  REQUIRE(plan.torchrun);  // distributed_type MULTI_GPU -> --multi_gpu
  CHECK(plan.launch.options.nproc_per_node == 2);
  CHECK(plan.launch.options.master_port == 29512);
  CHECK(plan.launch.options.rdzv_backend == "static");
  Env expected = MultiGpuDefaults("bf16");
  expected["ACCELERATE_DYNAMO_BACKEND"] = "INDUCTOR";
  expected["ACCELERATE_DYNAMO_USE_DYNAMIC"] = "True";
  expected["ACCELERATE_DEBUG_MODE"] = "true";
  CHECK(plan.launch.env_overrides == expected);
  CHECK(plan.warnings.empty());
  // The command line wins over the file; --cpu skips the default file.
  AcceleratePlan fp16 =
      Plan({"--mixed_precision=fp16", "--dynamo_use_dynamic", home.script()},
           home.BaseEnv(), probes);
  CHECK(fp16.launch.env_overrides.at("ACCELERATE_MIXED_PRECISION") == "fp16");
  CHECK_FALSE(Plan({"--cpu", home.script()}, home.BaseEnv(), probes).torchrun);
  // An explicit JSON config with the legacy keys.
  const std::string json = home.Write(
      "cfg.json",
      "{\"distributed_type\": \"MULTI_GPU\", \"num_processes\": 2, "
      "\"fp16\": true, \"dynamo_backend\": \"NO\", \"gpu_ids\": \"0,1\"}");
  AcceleratePlan legacy =
      Plan({"--config_file", json, home.script()}, home.BaseEnv(), probes);
  CHECK(legacy.launch.env_overrides.at("ACCELERATE_MIXED_PRECISION") == "fp16");
  CHECK(legacy.launch.env_overrides.at("CUDA_VISIBLE_DEVICES") == "0,1");
  const std::string one_gpu =
      home.Write("one.yaml",
                 "distributed_type: MULTI_GPU\nnum_processes: 2\ngpu_ids: 0\n");
  CHECK(PlanError({"--config_file", one_gpu, home.script()}, home.BaseEnv(),
                  probes)
            .find("Less than two GPU ids were configured") == 0);
  const std::string unknown =
      home.Write("bad.yaml", "distributed_type: NO\nnum_gpus: 3\n");
  CHECK(PlanError({"--config_file", unknown, home.script()}, home.BaseEnv(),
                  probes) ==
        "--config_file " + unknown +
            ": unknown keys (num_gpus); fix or remove them (accelerate "
            "rejects them too)");
  const std::string no_count =
      home.Write("nocount.yaml", "distributed_type: MULTI_GPU\n");
  CHECK(PlanError({"--config_file", no_count, home.script()}, home.BaseEnv(),
                  probes)
            .find("You need to manually pass in `--num_processes`") == 0);
  CHECK(PlanError({"--config_file", home.script() + ".missing", home.script()},
                  home.BaseEnv(), probes)
            .find("the configuration file does not exist") !=
        std::string::npos);
}

TEST_CASE("accelerate config: scalars resolve as PyYAML's YAML 1.1 loader",
          "[accelerate]") {
  using K = PyValue::Kind;
  auto is = [](const std::string& text, K kind, const std::string& str) {
    const PyValue v = ResolveYamlPlainScalar(text);
    INFO(text << " -> " << v.ToString());
    CHECK(v.kind == kind);
    CHECK(v.ToString() == str);
  };
  // Strings: no implicit resolver of yaml/resolver.py matches them whole.
  for (const char* text :
       {"10.1.2.3", "1.2.3",     "1e3",     "1E3",        "1e+3",
        "-.5",      "+.5",       "0x",      "08",         "0b2",
        "1.0e3",    "127.0.0.1", "fe80::1", "y",          "n",
        "Yes!",     "TRUE.",     "nul",     "0o17",       "1:60",
        ".",        "._",        "1__a",    "2001-12-14", "main"}) {
    is(text, K::kStr, text);
  }
  is("10.1", K::kFloat, "10.1");
  is("1.10", K::kFloat, "1.1");  // a version read as YAML 1.1 does
  is(".5", K::kFloat, "0.5");
  is("1.", K::kFloat, "1.0");
  is("-1_000.5", K::kFloat, "-1000.5");
  is("1.0e+3", K::kFloat, "1000.0");
  is("6.8523015e+5", K::kFloat, "685230.15");
  is("190:20:30.15", K::kFloat, "685230.15");
  is("-.inf", K::kFloat, "-inf");
  is(".NaN", K::kFloat, "nan");
  is("0x1A", K::kInt, "26");
  is("-0x1a", K::kInt, "-26");
  is("0b1010", K::kInt, "10");
  is("0755", K::kInt, "493");
  is("0", K::kInt, "0");
  is("+42", K::kInt, "42");
  is("1_000", K::kInt, "1000");
  is("190:20:30", K::kInt, "685230");
  for (const char* t :
       {"yes", "Yes", "YES", "on", "On", "ON", "true", "True"}) {
    is(t, K::kBool, "True");
  }
  for (const char* f : {"no", "No", "NO", "off", "Off", "OFF", "false"}) {
    is(f, K::kBool, "False");
  }
  for (const char* n : {"~", "null", "Null", "NULL", ""}) {
    is(n, K::kNone, "None");
  }

  // accelerate config writes the IP unquoted: it stays the address.
  TempHome home;
  Probes probes(0, 2);
  const std::string cfg = home.Write("two.yaml",
                                     "compute_environment: LOCAL_MACHINE\n"
                                     "distributed_type: MULTI_GPU\n"
                                     "machine_rank: 1\n"
                                     "main_process_ip: 10.1.2.3\n"
                                     "main_process_port: 0x7531\n"  // 30001
                                     "num_machines: 2\n"
                                     "num_processes: 4\n"
                                     "use_cpu: off\n"
                                     "debug: ~\n"
                                     "mixed_precision: 'no'\n");
  AcceleratePlan two =
      Plan({"--config_file", cfg, home.script()}, home.BaseEnv(), probes);
  CHECK(two.launch.options.master_addr == "10.1.2.3");
  CHECK(two.launch.options.master_port == 30001);
  CHECK(two.launch.options.rdzv_endpoint == "10.1.2.3:30001");
  // Quoted, the same text is a string whatever it looks like.
  const std::string quoted = home.Write(
      "q.yaml",
      "distributed_type: MULTI_GPU\nnum_processes: 4\nnum_machines: 2\n"
      "machine_rank: 1\nmain_process_ip: '10.10'\n");
  CHECK(Plan({"--config_file", quoted, home.script()}, home.BaseEnv(), probes)
            .launch.options.master_addr == "10.10");
}

TEST_CASE("accelerate: --deepspeed_config_file on a launch without DeepSpeed",
          "[accelerate]") {
  // tests/test_cli.py test_validate_launch_command with
  // tests/test_configs/validate_launch_cmd.yaml: accepted, the flag kept,
  // the file's values merged.
  TempHome home;
  Probes probes(0, 2);
  const std::string cfg =
      home.Write("validate_launch_cmd.yaml",
                 "compute_environment: LOCAL_MACHINE\n"
                 "debug: true\n"
                 "num_processes: 1\n"
                 "distributed_type: 'NO'\n"
                 "fsdp_config:\n"
                 "  fsdp_sync_module_states: false\n"
                 "deepspeed_config:\n"
                 "  deepspeed_config_file: path/to/be/ignored\n");
  auto args = ParseAccelerateArgs(
      {"--num-processes", "2", "--deepspeed_config_file", "path/to/be/accepted",
       "--config-file", cfg, "test.py"},
      home.BaseEnv(), probes.p.host);
  INFO((args.ok() ? "" : args.status().message()));
  REQUIRE(args.ok());
  CHECK(args->Get("debug").Truthy());
  CHECK(args->Int("num_processes", 0) == 2);
  CHECK(args->Get("fsdp_sync_module_states").kind == PyValue::Kind::kBool);
  CHECK_FALSE(args->Get("fsdp_sync_module_states").Truthy());
  CHECK(args->Get("deepspeed_config_file").ToString() == "path/to/be/accepted");
  // The whole launch plans (the simple launcher: distributed_type NO).
  CHECK_FALSE(Plan({"--deepspeed_config_file", "ds.json", home.script()},
                   home.BaseEnv(), probes)
                  .torchrun);
  // The DeepSpeed launch itself stays unsupported.
  CHECK(PlanError({"--zero_stage=2", home.script()}, home.BaseEnv(), probes)
            .find("accelerate's DeepSpeed (use ddprun-deepspeed) launch is "
                  "not supported") != std::string::npos);
}

TEST_CASE("accelerate config: mpirun_config is refused, naming the key",
          "[accelerate]") {
  // tests/test_configs/0_28_0_mpi.yaml: accelerate runs mpirun -f HOSTFILE
  // -ppn 4 -n 16; one plain process would be another job.
  TempHome home;
  Probes probes(0, 2);
  const std::string mpi = home.Write("0_28_0_mpi.yaml",
                                     "compute_environment: LOCAL_MACHINE\n"
                                     "debug: false\n"
                                     "distributed_type: MULTI_CPU\n"
                                     "downcast_bf16: 'no'\n"
                                     "machine_rank: 0\n"
                                     "main_process_ip: 127.0.0.1\n"
                                     "main_process_port: 29500\n"
                                     "main_training_function: main\n"
                                     "mixed_precision: 'no'\n"
                                     "mpirun_config:\n"
                                     "  mpirun_hostfile: /home/user/hostfile\n"
                                     "num_machines: 4\n"
                                     "num_processes: 16\n"
                                     "rdzv_backend: static\n"
                                     "same_network: true\n"
                                     "tpu_env: []\n"
                                     "tpu_use_cluster: false\n"
                                     "tpu_use_sudo: false\n"
                                     "use_cpu: true\n");
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, std::vector<std::string>{"--cpu"}}) {
    std::vector<std::string> args = {"--config_file", mpi};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(home.script());
    CHECK(PlanError(args, home.BaseEnv(), probes) ==
          "mpirun_config.mpirun_hostfile (--config_file " + mpi +
              "): accelerate's mpirun launch is not supported by "
              "ddprun-accelerate; remove mpirun_config and start "
              "ddprun-accelerate (or ddprun) on each machine");
  }
  // An empty mpirun_config (no hostfile) is no mpirun launch.
  const std::string empty =
      home.Write("cpu.yaml",
                 "distributed_type: MULTI_CPU\nnum_processes: 1\n"
                 "use_cpu: true\nmpirun_config: {}\n");
  CHECK_FALSE(
      Plan({"--config_file", empty, home.script()}, home.BaseEnv(), probes)
          .torchrun);
}

TEST_CASE("accelerate: bad input is one line, as accelerate rejects it",
          "[accelerate]") {
  TempHome home;
  Probes probes(0, 2);
  const Env env = home.BaseEnv();
  const std::string s = home.script();
  CHECK(PlanError({"--cpu", "--multi_gpu", s}, env, probes) ==
        "You can only use one of `--cpu`, `--multi_gpu`, `--tpu`, "
        "`--use_deepspeed`, `--use_fsdp` at a time.");
  CHECK(PlanError({"--multi_gpu", "--num_processes=1", s}, env, probes) ==
        "You need to use at least 2 processes to use `--multi_gpu`.");
  CHECK(PlanError({"--mixed_precision=fp32", s}, env, probes) ==
        "--mixed_precision: invalid choice 'fp32' (choose from no, fp16, "
        "bf16, fp8)");
  // argparse accepts accelerate's misspelled choice; DynamoBackend does not.
  CHECK(PlanError({"--dynamo_backend=torhchxla_trace_once", s}, env, probes)
            .find("Unknown dynamo backend: TORHCHXLA_TRACE_ONCE.") == 0);
  CHECK(PlanError({"--num_proc=2", s}, env, probes) ==
        "unknown flag --num_proc");  // accelerate: allow_abbrev=False
  CHECK(PlanError({"--use_deepspeed", s}, env, probes) ==
        "--use_deepspeed: accelerate's DeepSpeed (use ddprun-deepspeed) "
        "launch is not supported by ddprun-accelerate");
  CHECK(PlanError({"--tpu", s}, env, probes) ==
        "--tpu: accelerate's TPU launch is not supported by "
        "ddprun-accelerate");
  CHECK(PlanError({"-m", "--no_python", "x"}, env, probes) ==
        "--module and --no_python cannot be used together");
  CHECK(PlanError({"--multi_gpu"}, env, probes).find("missing training") == 0);
  CHECK(PlanError({"--multi_gpu", "--num_processes=2", "/no/such.py"}, env,
                  probes) == "entrypoint script '/no/such.py' not found");
  CHECK(PlanError({"--use_parallelism_config", s}, env, probes)
            .find("You cannot use `--use_parallelism_config`") == 0);
  CHECK(PlanAccelerateLaunch({"--help"}, env, probes.p)->show_help);
}

TEST_CASE("PyValue: Python's str() of launcher values", "[accelerate]") {
  CHECK(PyValue::Bool(true).ToString() == "True");
  CHECK(PyValue::None().ToString() == "None");
  CHECK(PyValue::Int(-3).ToString() == "-3");
  CHECK(PyFloatRepr(0.1) == "0.1");
  CHECK(PyFloatRepr(1e8) == "100000000.0");
  CHECK(PyFloatRepr(1.0) == "1.0");
  CHECK(PyFloatRepr(1e-5) == "1e-05");
  CHECK(PyFloatRepr(1e16) == "1e+16");
  CHECK(PyFloatRepr(123.456) == "123.456");
  CHECK(PyFloatRepr(-0.5) == "-0.5");
  CHECK_FALSE(PyValue::Str("").Truthy());
  CHECK(PyValue::Str("false").Truthy());  // a non-empty string
}
