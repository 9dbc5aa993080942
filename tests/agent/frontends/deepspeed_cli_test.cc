// ddprun-deepspeed's command line, resource selection and node launch,
// against deepspeed 0.16.5's deepspeed/launcher/runner.py and launch.py
// (expected values computed by running runner.py's functions on the same
// input, except where a comment says the two differ on purpose).

#include "ddprun_catch.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "agent/frontends/accelerate/accelerate_cli.h"
#include "agent/frontends/deepspeed/deepspeed_cli.h"
#include "agent/frontends/deepspeed/deepspeed_hosts.h"
#include "agent/frontends/deepspeed/deepspeed_main.h"
#include "agent/frontends/deepspeed/deepspeed_remote.h"

using namespace ddprun::agent;  // NOLINT

namespace {

using Active = ActiveResources;

DeepSpeedArgs Args(std::vector<std::string> argv) {
  argv.push_back("/bin/true");  // an existing entrypoint (CheckEntrypoint)
  auto a = ParseDeepSpeedArgs(argv);
  REQUIRE(a.ok());
  return *a;
}

std::string ParseError(std::vector<std::string> argv) {
  auto a = ParseDeepSpeedArgs(argv);
  REQUIRE_FALSE(a.ok());
  return a.status().message();
}

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/ddprun_ds_XXXXXX";
    const int fd = mkstemp(tmpl);
    close(fd);
    path_ = tmpl;
    std::ofstream(path_) << text;
  }
  ~TempFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

TEST_CASE("ParseHostfile: deepspeed's `host slots=N` lines", "[deepspeed]") {
  auto pool =
      ParseHostfile("hf",
                    "worker-0 slots=4\n# a comment\n\nworker-1 slots=4  # x\n"
                    "  worker-2\tslots=2\n");
  REQUIRE(pool.ok());
  CHECK(*pool ==
        ResourcePool{{"worker-0", 4}, {"worker-1", 4}, {"worker-2", 2}});
  CHECK(ParseHostfile("hf", "worker-0 slots=4\nworker-0 slots=2\n")
            .status()
            .message() ==
        "hf:2: host 'worker-0' listed twice in 'worker-0 slots=2'");
  CHECK(ParseHostfile("hf", "worker-0\n").status().message() ==
        "hf:1: expected 'HOST slots=N' in 'worker-0'");
  CHECK(ParseHostfile("hf", "w slots=x\n").status().message() ==
        "hf:1: bad slot count in 'w slots=x'");
  CHECK(ParseHostfile("hf", "# only\n\n").status().message() ==
        "hf: no 'HOST slots=N' line");
}

TEST_CASE("ParseHostfile: a host that ssh would read as an option is refused",
          "[deepspeed]") {
  // Issue 39: `-oProxyCommand=CMD` as a host ran CMD on the launching host.
  auto pool = ParseHostfile(
      "hf", "worker-0 slots=1\n-oProxyCommand=touch${IFS}/tmp/p slots=1\n");
  CHECK(pool.status().code() == ddprun::StatusCode::kInvalidArgument);
  CHECK(pool.status().message() ==
        "hf:2: host '-oProxyCommand=touch${IFS}/tmp/p' starts with '-' in "
        "'-oProxyCommand=touch${IFS}/tmp/p slots=1'");
  DeepSpeedArgs args;
  CHECK(SshArgv(args, "-oProxyCommand=x", "true").status().code() ==
        ddprun::StatusCode::kInvalidArgument);
  CHECK(SshArgv(args, "worker-0", "true").ok());
}

TEST_CASE("FilterResources: --include and --exclude as runner.py",
          "[deepspeed]") {
  const ResourcePool pool = {{"worker-0", 4}, {"worker-1", 4}, {"worker-2", 2}};
  auto f = [&](const std::string& inc, const std::string& exc) {
    auto r = FilterResources(pool, inc, exc);
    REQUIRE(r.ok());
    return *r;
  };
  CHECK(f("", "") == Active{{"worker-0", {0, 1, 2, 3}},
                            {"worker-1", {0, 1, 2, 3}},
                            {"worker-2", {0, 1}}});
  CHECK(f("", "worker-1:0") == Active{{"worker-0", {0, 1, 2, 3}},
                                      {"worker-1", {1, 2, 3}},
                                      {"worker-2", {0, 1}}});
  CHECK(f("", "worker-1") ==
        Active{{"worker-0", {0, 1, 2, 3}}, {"worker-2", {0, 1}}});
  CHECK(f("", "worker-0:1@worker-2") ==
        Active{{"worker-0", {0, 2, 3}}, {"worker-1", {0, 1, 2, 3}}});
  // Listed slots are merged, sorted and deduplicated; hostfile order wins.
  CHECK(f("worker-1:3,1@worker-1:0", "") == Active{{"worker-1", {0, 1, 3}}});
  // Slots after --include are checked against the hostfile, as
  // deepspeed's tests expect (test_parser_errors: 'worker-1:4').
  // Differs on purpose: deepspeed 0.16.5 drops a host named without slots
  // (parse_inclusion_exclusion gives it an empty list), against its own
  // --help ("-i worker-0@worker-1:0,2 will use all slots on worker-0").
  CHECK(f("worker-0@worker-1:0,2", "") ==
        Active{{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 2}}});
  CHECK(f("worker-2", "") == Active{{"worker-2", {0, 1}}});
  auto err = [&](const std::string& inc, const std::string& exc) {
    auto r = FilterResources(pool, inc, exc);
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK(err("worker-0", "worker-1") ==
        "--include and --exclude are mutually exclusive");
  CHECK(err("", "worker-1:7") ==
        "--exclude worker-1:7: host 'worker-1' has no slot 7 (its slots: "
        "0,1,2,3)");
  CHECK(err("worker-2:5", "") ==
        "--include worker-2:5: host 'worker-2' has no slot 5 (its slots: "
        "0,1)");
  CHECK(err("worker-0:0,4", "").find("has no slot 4") != std::string::npos);
  CHECK(err("nohost", "") ==
        "--include nohost: host 'nohost' is not in the hostfile");
  CHECK(err("worker-0:x", "") ==
        "invalid slot 'x' in 'worker-0:x' (expected NAME[:SLOT[,SLOT...]])");
  CHECK(err("a:1:2", "").find("invalid node 'a:1:2'") == 0);
}

// tests/unit/launcher/test_run.py of DeepSpeed 0.19.6, case by case
// (parse_resource_filter on the hostfile's slots).
TEST_CASE("FilterResources: deepspeed's test_run.py parser cases",
          "[deepspeed]") {
  auto f = [](const ResourcePool& pool, const std::string& inc,
              const std::string& exc) {
    auto r = FilterResources(pool, inc, exc);
    INFO(inc << " / " << exc);
    REQUIRE(r.ok());
    return *r;
  };
  auto fails = [](const ResourcePool& pool, const std::string& inc,
                  const std::string& exc) {
    return !FilterResources(pool, inc, exc).ok();
  };
  CHECK(fails({}, "A", "B"));  // test_parser_mutual_exclusive
  // test_parser_local
  const ResourcePool one = {{"worker-0", 4}};
  CHECK(f(one, "", "") == Active{{"worker-0", {0, 1, 2, 3}}});
  CHECK(f(one, "", "worker-0:1") == Active{{"worker-0", {0, 2, 3}}});
  CHECK(f(one, "", "worker-0:1,2") == Active{{"worker-0", {0, 3}}});
  CHECK(f(one, "worker-0:1", "") == Active{{"worker-0", {1}}});
  CHECK(f(one, "worker-0:1,1", "") == Active{{"worker-0", {1}}});
  CHECK(f(one, "worker-0:1@worker-0:0,1", "") == Active{{"worker-0", {0, 1}}});
  CHECK(f(one, "worker-0", "") == Active{{"worker-0", {0, 1, 2, 3}}});
  CHECK(f(one, "", "worker-0").empty());
  CHECK(f(one, "", "worker-0:0,1,2,3").empty());
  // test_parser_multinode
  const ResourcePool two = {{"worker-0", 4}, {"worker-1", 4}};
  CHECK(f(two, "worker-1:0,3", "") == Active{{"worker-1", {0, 3}}});
  CHECK(f(two, "", "worker-1") == Active{{"worker-0", {0, 1, 2, 3}}});
  CHECK(f(two, "", "worker-0:0,1@worker-1:3") ==
        Active{{"worker-0", {2, 3}}, {"worker-1", {0, 1, 2}}});
  // test_parser_errors
  CHECK(fails(two, "jeff", ""));
  CHECK(fails(two, "", "jeff"));
  CHECK(fails(two, "worker-1:4", ""));
  CHECK(fails(two, "", "worker-1:4"));
  CHECK(fails(two, "", "worker-1@worker-0:1@5"));
}

TEST_CASE("World info: the same base64 string deepspeed passes",
          "[deepspeed]") {
  // base64.urlsafe_b64encode(json.dumps(world_info).encode())
  const Active local = {{"localhost", {0, 1}}};
  CHECK(EncodeWorldInfo(local) == "eyJsb2NhbGhvc3QiOiBbMCwgMV19");
  const Active two = {{"worker-1", {0, 2}}, {"worker-0", {1}}};
  CHECK(EncodeWorldInfo(two) ==
        "eyJ3b3JrZXItMSI6IFswLCAyXSwgIndvcmtlci0wIjogWzFdfQ==");
  CHECK(EncodeWorldInfo({{"a", {0}}}) == "eyJhIjogWzBdfQ==");
  auto back = DecodeWorldInfo(EncodeWorldInfo(two));
  REQUIRE(back.ok());
  CHECK(*back == two);  // order kept
  CHECK_FALSE(DecodeWorldInfo("not base64!").ok());
  CHECK_FALSE(DecodeWorldInfo("eyJhIjogW119").ok());  // {"a": []}
}

TEST_CASE("ParseDeepSpeedArgs: deepspeed's flags, prefixes, user args",
          "[deepspeed]") {
  DeepSpeedArgs a = Args({"--num_gpus=2", "-H", "hf", "--master_port", "29600",
                          "--no_local_rank", "--launcher", "PDSH",
                          "--ssh_port=2222", "--launcher_args", "-F cfg"});
  CHECK(a.num_gpus == 2);
  CHECK(a.hostfile == "hf");
  CHECK(a.hostfile_given);
  CHECK(a.master_port == 29600);
  CHECK(a.no_local_rank);
  CHECK(a.launcher == "pdsh");
  CHECK(a.ssh_port == 2222);
  CHECK(a.launcher_args == "-F cfg");
  CHECK(a.user_script == "/bin/true");
  // --num_accelerators is --num_gpus; argparse prefixes; everything after
  // the script is the script's.
  auto b = ParseDeepSpeedArgs(
      {"--num_acc", "3", "--num_n=1", "train.py", "--num_gpus", "9", "-x"});
  REQUIRE(b.ok());
  CHECK(b->num_gpus == 3);
  CHECK(b->num_nodes == 1);
  CHECK(b->user_args == std::vector<std::string>{"--num_gpus", "9", "-x"});
  CHECK(ParseError({"--num_gpus", "x", "t.py"}) ==
        "--num_gpus: invalid value 'x' (not an integer)");
  CHECK(ParseError({"--num", "2", "t.py"}).find("ambiguous flag --num") == 0);
  CHECK(ParseError({"--save_pid", "t.py"}) ==
        "--save_pid is not supported by ddprun-deepspeed");
  CHECK(ParseError({"--launcher=slurm", "t.py"}).find("--launcher=slurm") == 0);
  CHECK(ParseError({"--launcher=mpi", "t.py"}) ==
        "--launcher: unknown launcher 'mpi' (choose from pdsh, openmpi, "
        "mpich, impi, mvapich)");
  CHECK(ParseError({"--module", "--no_python", "t.py"}) ==
        "--no_python and --module cannot be used together");
  CHECK(ParseError({"--elastic_training", "--no_local_rank", "t.py"}) ==
        "--no_local_rank is not supported with --elastic_training");
  CHECK(ParseError({"--num_gpus=2"}).find("missing user script") == 0);
  CHECK(ParseError({"--master_port=0", "t.py"}) ==
        "--master_port: invalid value '0' (must be 1..65535)");
  CHECK(ParseDeepSpeedArgs({"-h"})->help);
}

TEST_CASE("ParseDeepSpeedArgs: 0.19.6's --log_level, -q and --venv_script",
          "[deepspeed]") {
  // runner.py parse_args: --log_level choices, -q/--quiet "aliases to
  // --log_level error", --venv_script a path.
  CHECK(Args({}).log_level.empty());
  CHECK(Args({"--log_level=debug"}).log_level == "debug");
  CHECK(Args({"--log_level", "critical"}).log_level == "critical");
  DeepSpeedArgs q = Args({"-q", "--log_level=debug"});
  CHECK(q.quiet);
  CHECK(q.log_level == "error");
  CHECK(Args({"--quiet"}).log_level == "error");
  CHECK(Args({"--venv_script", "/opt/venv/bin/activate"}).venv_script ==
        "/opt/venv/bin/activate");
  CHECK(ParseError({"--log_level=verbose", "t.py"}) ==
        "--log_level: invalid choice 'verbose' (choose from debug, info, "
        "warning, error, critical)");
  // Passed on to each node's launch, as runner.py passes them to launch.py.
  DeepSpeedArgs a = Args({"-q"});
  auto node = DeepSpeedNodeArgs(a, "W", 0, "10.0.0.1", /*remote=*/false);
  CHECK(std::find(node.begin(), node.end(), "--quiet") != node.end());
  CHECK(std::find(node.begin(), node.end(), "--log_level=error") != node.end());
  auto back = ParseDeepSpeedArgs(node);
  REQUIRE(back.ok());
  CHECK(back->quiet);
  CHECK(back->log_level == "error");
  // Sourced first on a node started over ssh (pdsh's `source VENV;`).
  CHECK(RemoteShellCommand("/w", {}, {"/opt/ddprun-deepspeed"},
                           "/opt/my venv/bin/activate") ==
        ". '/opt/my venv/bin/activate' && cd /w && exec "
        "/opt/ddprun-deepspeed");
}

TEST_CASE("PlanDeepSpeedLaunch: MPI launchers' --launcher_args never reach ssh",
          "[deepspeed]") {
  TempFile hostfile("w0 slots=1\nw1 slots=1\n");
  const std::map<std::string, std::string> env;
  for (const char* launcher : {"openmpi", "mpich", "mvapich", "impi"}) {
    INFO(launcher);
    auto p = PlanDeepSpeedLaunch(
        Args({"-H", hostfile.path(), "--launcher", launcher,
              "--launcher_args=--mca btl_tcp_if_include eth0"}),
        env, 1);
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().message() ==
          std::string("--launcher_args '--mca btl_tcp_if_include eth0': with "
                      "--launcher=") +
              launcher +
              " they are that MPI launcher's arguments, but "
              "ddprun-deepspeed starts every node over OpenSSH, not with " +
              launcher +
              "; drop --launcher_args (with --launcher=pdsh they are given "
              "to ssh)");
    // Without --launcher_args the nodes start over ssh as before.
    CHECK(PlanDeepSpeedLaunch(Args({"-H", hostfile.path(), "--launcher",
                                    launcher, "--master_addr=10.0.0.1"}),
                              env, 1)
              ->multi_node);
    // One node here: no launcher runs, the arguments are unused (deepspeed
    // ignores them there too).
    CHECK(PlanDeepSpeedLaunch(
              Args({"-H", hostfile.path(), "-i", "w1", "--launcher", launcher,
                    "--launcher_args=-np 2"}),
              env, 1)
              .ok());
  }
  CHECK(PlanDeepSpeedLaunch(Args({"-H", hostfile.path(), "--launcher_args=-F c",
                                  "--master_addr=10.0.0.1"}),
                            env, 1)
            ->multi_node);
}

TEST_CASE("PlanDeepSpeedLaunch: runner.py's choice of hosts and slots",
          "[deepspeed]") {
  std::map<std::string, std::string> env;
  // No hostfile: this host with its devices, master 127.0.0.1.
  auto p = PlanDeepSpeedLaunch(Args({"-H", "/nonexistent"}), env, 4);
  REQUIRE(p.ok());
  CHECK(p->resources == Active{{"localhost", {0, 1, 2, 3}}});
  CHECK_FALSE(p->multi_node);
  CHECK(p->master_addr == "127.0.0.1");
  CHECK(p->warnings.size() == 1);  // "Unable to find hostfile"
  // The default /job/hostfile missing is silent.
  CHECK(PlanDeepSpeedLaunch(Args({}), env, 1)->warnings.empty());
  CHECK(PlanDeepSpeedLaunch(Args({"--num_gpus=2"}), env, 1)->resources ==
        Active{{"localhost", {0, 1}}});
  // CUDA_VISIBLE_DEVICES becomes --include (and leaves the environment).
  env["CUDA_VISIBLE_DEVICES"] = "2,3";
  auto v = PlanDeepSpeedLaunch(Args({}), env, 2);
  REQUIRE(v.ok());
  CHECK(v->resources == Active{{"localhost", {2, 3}}});
  CHECK(v->drop_visible_devices);
  CHECK(v->warnings ==
        std::vector<std::string>{
            "Detected VISIBLE_DEVICES=2,3: setting --include=localhost:2,3"});
  // ... unless a resource flag was given.
  auto g = PlanDeepSpeedLaunch(Args({"--num_gpus=1"}), env, 4);
  CHECK(g->resources == Active{{"localhost", {0}}});
  CHECK(g->drop_visible_devices);
  env.clear();

  TempFile hostfile("w0 slots=2\nw1 slots=2\nw2 slots=1\n");
  auto m = PlanDeepSpeedLaunch(Args({"-H", hostfile.path()}), env, 0);
  REQUIRE(m.ok());
  CHECK(m->multi_node);
  CHECK(m->master_addr.empty());  // found later with `hostname -I`
  CHECK(m->resources.size() == 3);
  auto n = PlanDeepSpeedLaunch(Args({"-H", hostfile.path(), "--num_nodes=2",
                                     "--num_gpus=1", "--master_addr=10.0.0.1"}),
                               env, 0);
  CHECK(n->resources == Active{{"w0", {0}}, {"w1", {0}}});
  CHECK(n->master_addr == "10.0.0.1");
  auto one =
      PlanDeepSpeedLaunch(Args({"-H", hostfile.path(), "-i", "w2"}), env, 0);
  CHECK_FALSE(one->multi_node);  // one host: run it here
  CHECK(PlanDeepSpeedLaunch(
            Args({"-H", hostfile.path(), "-i", "w2", "--force_multi"}), env, 0)
            ->multi_node);
  auto no_ssh =
      PlanDeepSpeedLaunch(Args({"-H", hostfile.path(), "--no_ssh",
                                "--node_rank=1", "--master_addr=10.0.0.1"}),
                          env, 0);
  REQUIRE(no_ssh.ok());
  CHECK_FALSE(no_ssh->multi_node);
  CHECK(no_ssh->node_rank == 1);
  auto err = [&](std::vector<std::string> argv) {
    auto r = PlanDeepSpeedLaunch(Args(argv), env, 2);
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK(err({"--num_gpus=1", "-i", "localhost:0"}) ==
        "Cannot specify --num_nodes/--num_gpus with --include/--exclude");
  // A slot this host does not have (2 devices here).
  CHECK(err({"-i", "localhost:99"}) ==
        "--include localhost:99: host 'localhost' has no slot 99 (its "
        "slots: 0,1)");
  CHECK(err({"-i", "localhost:0,4"}).find("has no slot 4") !=
        std::string::npos);
  CHECK(err({"-H", hostfile.path(), "-i", "w2:1"}) ==
        "--include w2:1: host 'w2' has no slot 1 (its slots: 0)");
  // -i/-e/--num_gpus: CUDA_VISIBLE_DEVICES is ignored and deleted, and the
  // slots are the host's devices without the mask (runner.py counts after
  // deleting it): -i localhost:2 with the mask 0,1 runs on GPU 2.
  env["CUDA_VISIBLE_DEVICES"] = "0,1";
  auto past_mask = PlanDeepSpeedLaunch(Args({"-i", "localhost:2"}), env, 4);
  REQUIRE(past_mask.ok());
  CHECK(past_mask->resources == Active{{"localhost", {2}}});
  CHECK(past_mask->drop_visible_devices);
  CHECK(past_mask->warnings.size() == 1);  // "... but ignoring it ..."
  CHECK(past_mask->warnings[0].find("but ignoring it") != std::string::npos);
  auto excluded = PlanDeepSpeedLaunch(Args({"-e", "localhost:0"}), env, 4);
  REQUIRE(excluded.ok());
  CHECK(excluded->resources == Active{{"localhost", {1, 2, 3}}});
  // A slot beyond the host's devices is still an error.
  CHECK(err({"-i", "localhost:3"}) ==
        "--include localhost:3: host 'localhost' has no slot 3 (its "
        "slots: 0,1)");
  env.clear();
  CHECK(err({"--num_nodes=2"}).find("--num_nodes is greater than 1") == 0);
  CHECK(err({"-H", hostfile.path(), "--no_ssh", "--node_rank=3"}) ==
        "--no_ssh needs --node_rank between 0 and 2 (got 3)");
  CHECK(err({"--elastic_training"}) ==
        "--master_addr is required with --elastic_training");
}

TEST_CASE("DeepSpeedNodeCommandLine: launch.py's node as a ddprun launch",
          "[deepspeed]") {
  const Active world = {{"w0", {0, 1}}, {"w1", {1, 3, 5}}};
  auto cl = DeepSpeedNodeCommandLine(Args({"--master_port=29601"}), world, 1,
                                     "10.0.0.1", {});
  REQUIRE(cl.ok());
  const LaunchOptions& o = cl->options;
  CHECK(o.contract == WorkerContract::kDeepSpeed);
  CHECK(o.deepspeed_local_rank_arg);
  CHECK(o.nproc_per_node == 3);
  CHECK(o.min_nodes == 2);
  CHECK(o.max_nodes == 2);
  CHECK(o.node_rank == 1);
  CHECK(o.rdzv_backend == "static");
  CHECK(o.master_addr == "10.0.0.1");
  CHECK(o.master_port == 29601);
  CHECK(cl->env_overrides ==
        std::map<std::string, std::string>{{"CUDA_VISIBLE_DEVICES", "1,3,5"}});
  auto no_rank = DeepSpeedNodeCommandLine(Args({"--no_local_rank"}), world, 0,
                                          "10.0.0.1", {});
  CHECK_FALSE(no_rank->options.deepspeed_local_rank_arg);
  // Elastic: deepspeed's DSElasticAgent settings on torch elastic.
  auto el = DeepSpeedNodeCommandLine(
      Args({"--elastic_training", "--master_addr=10.0.0.1",
            "--max_elastic_nodes=4"}),
      world, 0, "10.0.0.1", {{"ELASTIC_RUN_ID", "job9"}});
  REQUIRE(el.ok());
  CHECK(el->options.contract == WorkerContract::kTorchrun);
  CHECK(el->options.min_nodes == 1);
  CHECK(el->options.max_nodes == 4);
  CHECK(el->options.rdzv_endpoint == "10.0.0.1:29500");
  CHECK(el->options.rdzv_id == "job9");
  CHECK(el->options.role == "trainer");
  CHECK(el->options.max_restarts == 100);
  CHECK_FALSE(el->options.omp_default);
  CHECK(el->env_overrides.at("CROSS_RANK") == "0");
  CHECK(el->env_overrides.at("CROSS_SIZE") == "2");
  CHECK(el->env_overrides.at("LOCAL_SIZE") == "2");
  CHECK(DeepSpeedNodeCommandLine(Args({}), world, 2, "x", {})
            .status()
            .message() == "--node_rank 2 is not a node of the world (2 nodes)");
  DeepSpeedArgs missing = Args({});
  missing.user_script = "/nonexistent/train.py";
  CHECK(
      DeepSpeedNodeCommandLine(missing, world, 0, "x", {}).status().message() ==
      "entrypoint script '/nonexistent/train.py' not found");
}

TEST_CASE("Remote node launch: exports, quoting, ssh command", "[deepspeed]") {
  TempFile ds_env("FOO=bar baz\n\n  SPACED = 1 \n");
  const std::string dir = ds_env.path().substr(0, ds_env.path().rfind('/'));
  const std::string name = ds_env.path().substr(dir.size() + 1);
  auto exports = DeepSpeedExports({{"PYTHONPATH", "/lib"},
                                   {"PYTHON_EXEC", "/usr/bin/python3"},
                                   {"NCCL_DEBUG", "INFO"},
                                   {"UCX_TLS", "tcp"},
                                   {"HOME", "/root"},
                                   {"PATH", "/bin"},
                                   {"DS_ENV_FILE", name}},
                                  dir, "/nonexistent-home");
  REQUIRE(exports.ok());
  CHECK(*exports ==
        std::map<std::string, std::string>{{"FOO", "bar baz"},
                                           {"NCCL_DEBUG", "INFO"},
                                           {"PYTHONPATH", dir + ":/lib"},
                                           {"PYTHON_EXEC", "/usr/bin/python3"},
                                           {"SPACED", "1"},
                                           {"UCX_TLS", "tcp"}});
  TempFile bad("NOEQUALS\n");
  const std::string bad_name = bad.path().substr(dir.size() + 1);
  CHECK(DeepSpeedExports({{"DS_ENV_FILE", bad_name}}, dir, "")
            .status()
            .message() ==
        bad.path() + ":1: expected KEY=VALUE, got 'NOEQUALS'");

  CHECK(ShellQuote("plain-word_1.py") == "plain-word_1.py");
  CHECK(ShellQuote("it's a b") == "'it'\\''s a b'");
  CHECK(ShellQuote("") == "''");
  CHECK(*ShellSplit("-F 'my cfg' -o \"A=b c\" x\\ y") ==
        std::vector<std::string>{"-F", "my cfg", "-o", "A=b c", "x y"});
  CHECK_FALSE(ShellSplit("'open").ok());

  DeepSpeedArgs a = Args({"--master_port=29601", "--no_python"});
  a.user_args = {"--lr", "1 e"};
  auto node = DeepSpeedNodeArgs(a, "W", 1, "10.0.0.1", /*remote=*/true);
  CHECK(node == std::vector<std::string>{
                    "--world_info=W", "--node_rank=1", "--master_addr=10.0.0.1",
                    "--master_port=29601", "--no_python", "--stop_on_stdin_eof",
                    "--", "/bin/true", "--lr", "1 e"});
  // What the node parses back.
  auto back = ParseDeepSpeedArgs(node);
  REQUIRE(back.ok());
  CHECK(back->world_info == "W");
  CHECK(back->node_rank == 1);
  CHECK(back->stop_on_stdin_eof);
  CHECK(back->user_args == a.user_args);
  const std::string cmd = RemoteShellCommand(
      "/work dir", {{"A", "x y"}}, {"/opt/ddprun-deepspeed", "--node_rank=1"});
  CHECK(cmd ==
        "cd '/work dir' && export 'A=x y' && exec /opt/ddprun-deepspeed "
        "--node_rank=1");
  DeepSpeedArgs s = Args({"--ssh_port=2222", "--launcher_args=-F cfg"});
  CHECK(*SshArgv(s, "w1", "cmd") ==
        std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "-F", "cfg",
                                 "-p", "2222", "w1", "cmd"});
}

TEST_CASE("DeepSpeedDeviceCount: GPUs, else the CPU accelerator's count",
          "[deepspeed]") {
  CHECK(DeepSpeedDeviceCount(4, {}) == 4);
  CHECK(DeepSpeedDeviceCount(0, {{"LOCAL_SIZE", "3"}}) == 3);
  CHECK(DeepSpeedDeviceCount(0, {}, "/nonexistent") == 1);
}

TEST_CASE("Front end help texts fit 80 columns", "[deepspeed][accelerate]") {
  for (const std::string& help : {DeepSpeedHelpText(), AccelerateHelpText()}) {
    std::size_t start = 0;
    while (start < help.size()) {
      std::size_t end = help.find('\n', start);
      if (end == std::string::npos) end = help.size();
      INFO(help.substr(start, end - start));
      CHECK(end - start <= 80);
      start = end + 1;
    }
  }
  CHECK(DeepSpeedHelpText().find("DeepSpeed 0.19.6") != std::string::npos);
}
