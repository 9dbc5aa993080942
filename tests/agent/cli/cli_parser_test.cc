#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include "ddprun_catch.h"

#include "agent/cli/cli_parser.h"
#include "agent/cli/cli_values.h"
#include "agent/cli/nproc_resolver.h"

namespace ddprun::agent {
namespace {

using Env = std::map<std::string, std::string>;
using Args = std::vector<std::string>;

// A temp dir holding a Python script, an executable and a non-executable
// file, so entrypoint checks see real files.
class Scratch {
 public:
  Scratch() {
    char tmpl[] = "/tmp/cli_parser_test_XXXXXX";
    dir_ = mkdtemp(tmpl);
    Write("train.py", "print('hi')\n", 0644);
    Write("prog", "#!/bin/sh\nexit 0\n", 0755);
    Write("noexec", "#!/bin/sh\nexit 0\n", 0644);
    Write("token", "t0ken\n", 0600);
  }
  ~Scratch() {
    for (const char* f : {"train.py", "prog", "noexec", "token"}) {
      unlink(Path(f).c_str());
    }
    rmdir(dir_.c_str());
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& dir() const { return dir_; }

 private:
  void Write(const std::string& name, const std::string& text, mode_t mode) {
    std::ofstream(Path(name)) << text;
    chmod(Path(name).c_str(), mode);
  }
  std::string dir_;
};

const Scratch& S() {
  static Scratch* s = new Scratch();
  return *s;
}

std::string Script() { return S().Path("train.py"); }

LaunchOptions ParseOk(Args args, const Env& env = {}, bool legacy = false) {
  auto r = ParseCommandLine(args, env, legacy);
  INFO("args error: " << r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE_FALSE(r->show_help);
  return r->options;
}

// Parses `args` (a script entrypoint appended) and returns the error line.
std::string ParseErr(Args args, const Env& env = {}, bool legacy = false) {
  auto r = ParseCommandLine(args, env, legacy);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  const std::string& msg = r.status().message();
  CHECK(msg.find('\n') == std::string::npos);
  return msg;
}

Args With(Args flags) {
  flags.push_back(Script());
  return flags;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_CASE("CliParser: defaults are torchrun's", "[cli]") {
  LaunchOptions o = ParseOk({Script()});
  CHECK(o.min_nodes == 1);
  CHECK(o.max_nodes == 1);
  CHECK(o.nproc_per_node == 1);
  CHECK(o.nproc_per_node_spec == "1");
  CHECK(o.rdzv_backend == "static");
  CHECK(o.rdzv_endpoint.empty());
  CHECK(o.rdzv_id == "none");
  CHECK(o.rendezvous.join_timeout == std::chrono::seconds(600));
  CHECK_FALSE(o.rendezvous.is_host.has_value());
  CHECK(o.rendezvous.token.empty());
  CHECK_FALSE(o.standalone);
  CHECK(o.max_restarts == 0);
  CHECK(o.monitor_interval_s == Approx(0.1));
  CHECK(o.start_method == "spawn");
  CHECK(o.role == "default");
  CHECK_FALSE(o.module);
  CHECK_FALSE(o.no_python);
  CHECK_FALSE(o.run_path);
  CHECK(o.log_dir.empty());
  CHECK(o.redirects.ForRank(0) == StdStreams::kNone);
  CHECK(o.tee.ForRank(0) == StdStreams::kNone);
  CHECK_FALSE(o.local_ranks_filter.has_value());
  CHECK(o.node_rank == 0);
  CHECK_FALSE(o.node_rank_given);
  CHECK(o.master_addr == "127.0.0.1");
  CHECK_FALSE(o.master_port.has_value());  // one node: a free port
  CHECK(o.local_addr.empty());
  CHECK(o.signals_to_handle ==
        std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(o.shutdown_timeout_s == Approx(30.0));
  CHECK(o.exit_barrier_timeout_s == Approx(300.0));
  CHECK_FALSE(o.virtual_local_rank);
  CHECK_FALSE(o.legacy_launch);
  CHECK_FALSE(o.use_env);
  CHECK(o.entrypoint == Script());
  CHECK(o.entrypoint_args.empty());
}

TEST_CASE("CliParser: the live view's flags, PET_* and DDPRUN_HTTP_*",
          "[cli]") {
  LaunchOptions off = ParseOk({Script()});
  CHECK(off.http_port == -1);
  CHECK(off.http_host == "127.0.0.1");
  CHECK(off.http_token.empty());
  LaunchOptions on =
      ParseOk(With({"--http-port=0", "--http_host", "10.0.0.5",
                    "--http_token", "r"}),
              {{"DDPRUN_HTTP_ADMIN_TOKEN", "a"}});
  CHECK(on.http_port == 0);
  CHECK(on.http_host == "10.0.0.5");
  CHECK(on.http_token == "r");
  CHECK(on.http_admin_token == "a");
  LaunchOptions pet = ParseOk(
      {Script()}, {{"PET_HTTP_PORT", "8080"}, {"DDPRUN_HTTP_TOKEN", "t"}});
  CHECK(pet.http_port == 8080);
  CHECK(pet.http_token == "t");
  CHECK(Contains(ParseErr(With({"--http_port", "70000"})), "--http_port"));
  CHECK(Contains(ParseErr(With({"--http_token="})), "--http_token: empty"));
  CHECK(Contains(ParseErr({Script()}, {{"DDPRUN_HTTP_ADMIN_TOKEN", ""}}),
                 "DDPRUN_HTTP_ADMIN_TOKEN: empty token"));
}

TEST_CASE("CliParser: every value flag in both spellings and = form", "[cli]") {
  struct Case {
    std::string underscore;
    std::string value;
  };
  const std::vector<Case> cases = {
      {"--nnodes", "2:4"},
      {"--nproc_per_node", "3"},
      {"--rdzv_backend", "grpc"},
      {"--rdzv_endpoint", "host1:29400"},
      {"--rdzv_id", "job7"},
      {"--rdzv_conf", "join_timeout=10"},
      {"--max_restarts", "2"},
      {"--monitor_interval", "0.5"},
      {"--start_method", "fork"},
      {"--role", "trainer"},
      {"--log_dir", "/tmp/logs"},
      {"--redirects", "3"},
      {"--tee", "2"},
      {"--local_ranks_filter", "0,2"},
      {"--node_rank", "1"},
      {"--master_addr", "10.0.0.1"},
      {"--master_port", "1234"},
      {"--local_addr", "10.0.0.2"},
      {"--signals_to_handle", "SIGUSR1"},
      {"--shutdown_timeout", "5"},
      {"--exit_barrier_timeout", "7"},
      {"--watchdog_timeout", "2.5"},
  };
  auto check = [](const LaunchOptions& o, const std::string& flag) {
    if (flag == "--nnodes") {
      CHECK(o.min_nodes == 2);
      CHECK(o.max_nodes == 4);
    }
    if (flag == "--nproc_per_node") CHECK(o.nproc_per_node == 3);
    if (flag == "--rdzv_backend") CHECK(o.rdzv_backend == "grpc");
    if (flag == "--rdzv_endpoint") CHECK(o.rdzv_endpoint == "host1:29400");
    if (flag == "--rdzv_id") CHECK(o.rdzv_id == "job7");
    if (flag == "--rdzv_conf") {
      CHECK(o.rendezvous.join_timeout == std::chrono::seconds(10));
    }
    if (flag == "--max_restarts") CHECK(o.max_restarts == 2);
    if (flag == "--monitor_interval") CHECK(o.monitor_interval_s == 0.5);
    if (flag == "--start_method") CHECK(o.start_method == "fork");
    if (flag == "--role") CHECK(o.role == "trainer");
    if (flag == "--log_dir") CHECK(o.log_dir == "/tmp/logs");
    if (flag == "--redirects")
      CHECK(o.redirects.ForRank(5) == StdStreams::kAll);
    if (flag == "--tee") CHECK(o.tee.ForRank(0) == StdStreams::kErr);
    if (flag == "--local_ranks_filter") {
      CHECK(o.local_ranks_filter == std::set<int>{0, 2});
    }
    if (flag == "--node_rank") {
      CHECK(o.node_rank == 1);
      CHECK(o.node_rank_given);
    }
    if (flag == "--master_addr") CHECK(o.master_addr == "10.0.0.1");
    if (flag == "--master_port") CHECK(o.master_port == 1234);
    if (flag == "--local_addr") CHECK(o.local_addr == "10.0.0.2");
    if (flag == "--signals_to_handle") {
      CHECK(o.signals_to_handle == std::vector<int>{SIGUSR1});
    }
    if (flag == "--shutdown_timeout") CHECK(o.shutdown_timeout_s == 5.0);
    if (flag == "--exit_barrier_timeout") {
      CHECK(o.exit_barrier_timeout_s == 7.0);
    }
    if (flag == "--watchdog_timeout") CHECK(o.watchdog_timeout_s == 2.5);
  };
  for (const Case& c : cases) {
    std::string dashed = c.underscore;
    for (std::size_t i = 2; i < dashed.size(); ++i) {
      if (dashed[i] == '_') dashed[i] = '-';
    }
    // --node_rank 1 needs two static nodes.
    Args extra;
    if (c.underscore == "--node_rank") extra = {"--nnodes", "2"};
    for (const Args& spelled :
         {Args{c.underscore, c.value}, Args{dashed, c.value},
          Args{c.underscore + "=" + c.value}, Args{dashed + "=" + c.value}}) {
      INFO(spelled[0]);
      Args args = extra;
      args.insert(args.end(), spelled.begin(), spelled.end());
      check(ParseOk(With(args)), c.underscore);
    }
  }
}

TEST_CASE("CliParser: boolean flags in both spellings", "[cli]") {
  CHECK(ParseOk(With({"--standalone"})).standalone);
  CHECK(ParseOk(With({"--virtual-local-rank"})).virtual_local_rank);
  CHECK(ParseOk(With({"--virtual_local_rank"})).virtual_local_rank);
  CHECK(ParseOk(With({"--run-path"})).run_path);
  CHECK(ParseOk(With({"--run_path"})).run_path);
  CHECK(ParseOk({"--no-python", S().Path("prog")}).no_python);
  CHECK(ParseOk({"--no_python", S().Path("prog")}).no_python);
  CHECK(ParseOk({"-m", "pkg.mod"}).module);
  CHECK(ParseOk({"--module", "pkg.mod"}).module);
  CHECK(ParseOk(With({"--legacy-launch"})).legacy_launch);
  CHECK(Contains(ParseErr(With({"--standalone=1"})), "takes no value"));
}

TEST_CASE("CliParser: short flags -r -t -m -h", "[cli]") {
  LaunchOptions o = ParseOk(With({"-r", "1", "-t3"}));
  CHECK(o.redirects.ForRank(0) == StdStreams::kOut);
  CHECK(o.tee.ForRank(0) == StdStreams::kAll);
  o = ParseOk(With({"-r=2", "-t=0:1,1:2"}));
  CHECK(o.redirects.ForRank(3) == StdStreams::kErr);
  CHECK(o.tee.is_map);
  CHECK(o.tee.ForRank(0) == StdStreams::kOut);
  CHECK(o.tee.ForRank(1) == StdStreams::kErr);
  CHECK(o.tee.ForRank(2) == StdStreams::kNone);
  for (const char* h : {"-h", "--help"}) {
    auto r = ParseCommandLine({"--nnodes", "2", h}, {}, false);
    REQUIRE(r.ok());
    CHECK(r->show_help);
  }
  // Help wins even without an entrypoint or with later bad flags.
  auto r = ParseCommandLine({"--help", "--bogus"}, {}, false);
  REQUIRE(r.ok());
  CHECK(r->show_help);
}

TEST_CASE("CliParser: --version before the entrypoint asks for the version",
          "[cli]") {
  for (const bool legacy : {false, true}) {
    auto r = ParseCommandLine({"--nnodes", "2", "--version"}, {}, legacy);
    REQUIRE(r.ok());
    CHECK(r->show_version);
    CHECK_FALSE(r->show_help);
  }
  // Help wins; after the entrypoint it is the script's; PET_VERSION is not
  // a flag's environment default.
  auto both = ParseCommandLine({"--version", "--help"}, {}, false);
  REQUIRE(both.ok());
  CHECK(both->show_help);
  auto script = ParseCommandLine({Script(), "--version"}, {}, false);
  REQUIRE(script.ok());
  CHECK_FALSE(script->show_version);
  CHECK(script->options.entrypoint_args == Args{"--version"});
  auto env = ParseCommandLine({Script()}, {{"PET_VERSION", "1"}}, false);
  REQUIRE(env.ok());
  CHECK_FALSE(env->show_version);
  CHECK(Contains(ParseErr({"--version=1"}), "--version takes no value"));
}

TEST_CASE("CliParser: unambiguous prefixes work as in argparse", "[cli]") {
  CHECK(ParseOk(With({"--nproc", "2"})).nproc_per_node == 2);
  CHECK(ParseOk(With({"--nproc-per", "3"})).nproc_per_node == 3);
  const std::string err = ParseErr(With({"--master", "x"}));
  CHECK(Contains(err, "ambiguous flag --master"));
  CHECK(Contains(err, "--master_addr"));
  CHECK(Contains(err, "--master_port"));
}

TEST_CASE("CliParser: arguments after the entrypoint pass through untouched",
          "[cli]") {
  LaunchOptions o = ParseOk({"--nproc_per_node=2", Script(), "--help", "-m",
                             "--nnodes", "9", "--", "x y", ""});
  CHECK(o.nproc_per_node == 2);
  CHECK(o.min_nodes == 1);
  CHECK(o.entrypoint == Script());
  CHECK(o.entrypoint_args ==
        Args{"--help", "-m", "--nnodes", "9", "--", "x y", ""});
}

TEST_CASE("CliParser: -- ends the flags before the entrypoint", "[cli]") {
  LaunchOptions o = ParseOk({"--nproc_per_node", "2", "--", Script(), "-h"});
  CHECK(o.entrypoint == Script());
  CHECK(o.entrypoint_args == Args{"-h"});
  // A module name that looks like a flag after --.
  o = ParseOk({"-m", "--", "-weird"});
  CHECK(o.entrypoint == "-weird");
}

TEST_CASE("CliParser: PET_* environment provides defaults", "[cli]") {
  const Env env = {{"PET_NNODES", "1:3"},
                   {"PET_NPROC_PER_NODE", "4"},
                   {"PET_RDZV_BACKEND", "grpc"},
                   {"PET_RDZV_ENDPOINT", "[::1]:29400"},
                   {"PET_RDZV_ID", "k8s-job"},
                   {"PET_RDZV_CONF", "join_timeout=1,last_call_timeout=2"},
                   {"PET_MAX_RESTARTS", "3"},
                   {"PET_ROLE", "r"},
                   {"PET_TEE", "3"},
                   {"PET_NODE_RANK", "2"},
                   {"PET_SIGNALS_TO_HANDLE", "SIGTERM,SIGUSR2"},
                   {"PET_SHUTDOWN_TIMEOUT", "9"},
                   {"PET_VIRTUAL_LOCAL_RANK", "1"},
                   {"PET_MONITOR_INTERVAL", "1"}};
  LaunchOptions o = ParseOk({Script()}, env);
  CHECK(o.min_nodes == 1);
  CHECK(o.max_nodes == 3);
  CHECK(o.nproc_per_node == 4);
  CHECK(o.rdzv_backend == "grpc");
  CHECK(o.rdzv_endpoint == "[::1]:29400");
  CHECK(o.rdzv_id == "k8s-job");
  CHECK(o.rendezvous.join_timeout == std::chrono::seconds(1));
  CHECK(o.rendezvous.last_call_timeout == std::chrono::seconds(2));
  CHECK(o.max_restarts == 3);
  CHECK(o.role == "r");
  CHECK(o.tee.ForRank(1) == StdStreams::kAll);
  CHECK(o.node_rank == 2);
  CHECK(o.node_rank_given);
  CHECK(o.signals_to_handle == std::vector<int>{SIGTERM, SIGUSR2});
  CHECK(o.shutdown_timeout_s == 9.0);
  CHECK(o.virtual_local_rank);
  CHECK(o.monitor_interval_s == 1.0);
}

TEST_CASE("CliParser: PET_ booleans follow torchrun's bool(int(x))", "[cli]") {
  CHECK(ParseOk({Script()}, {{"PET_STANDALONE", "1"}}).standalone);
  CHECK_FALSE(ParseOk({Script()}, {{"PET_STANDALONE", "0"}}).standalone);
  CHECK(ParseOk({"pkg.mod"}, {{"PET_MODULE", "1"}}).module);
  CHECK(ParseOk({"prog"}, {{"PET_NO_PYTHON", "1"}, {"PATH", S().dir()}})
            .no_python);
  CHECK(Contains(ParseErr({Script()}, {{"PET_STANDALONE", "maybe"}}),
                 "PET_STANDALONE: invalid value 'maybe'"));
}

TEST_CASE("CliParser: the command line beats PET_* env", "[cli]") {
  const Env env = {{"PET_NNODES", "5"},
                   {"PET_NPROC_PER_NODE", "4"},
                   {"PET_MASTER_PORT", "1111"}};
  LaunchOptions o = ParseOk(
      With({"--nnodes=2", "--nproc-per-node", "2", "--master_port", "2222"}),
      env);
  CHECK(o.max_nodes == 2);
  CHECK(o.nproc_per_node == 2);
  CHECK(o.master_port == 2222);
  // A bad env value is not even looked at when the flag is given.
  o = ParseOk(With({"--nnodes", "1"}), {{"PET_NNODES", "junk"}});
  CHECK(o.max_nodes == 1);
  // ...but is an error naming the variable when it is used.
  CHECK(Contains(ParseErr({Script()}, {{"PET_NNODES", "junk"}}),
                 "PET_NNODES: invalid value 'junk'"));
  // Empty PET values count as unset.
  CHECK(ParseOk({Script()}, {{"PET_NNODES", ""}}).max_nodes == 1);
}

TEST_CASE(
    "CliParser: SLURM and Kubernetes defaults sit below the PET_* variables",
    "[cli]") {
  const Env srun = {{"SLURM_STEP_ID", "0"},
                    {"SLURM_NNODES", "2"},
                    {"SLURM_NTASKS", "2"},
                    {"SLURM_NODEID", "1"},
                    {"SLURM_JOB_ID", "4242"}};
  LaunchOptions o = ParseOk({Script()}, srun);
  CHECK(o.max_nodes == 2);
  CHECK(o.node_rank == 1);
  CHECK(o.node_rank_given);
  CHECK(o.rdzv_id == "4242");
  Env pet = srun;
  pet["PET_NODE_RANK"] = "0";
  CHECK(ParseOk({Script()}, pet).node_rank == 0);
  // The command line wins; the SLURM node id then no longer fits.
  CHECK(Contains(ParseErr(With({"--nnodes", "1"}), srun),
                 "SLURM_NODEID: invalid value '1'"));
  // One task per GPU (not per node), a batch script, or --standalone: the
  // SLURM layout does not describe ddprun's nodes.
  Env per_gpu = srun;
  per_gpu["SLURM_NTASKS"] = "8";
  CHECK(ParseOk({Script()}, per_gpu).max_nodes == 1);
  Env batch = srun;
  batch.erase("SLURM_STEP_ID");
  CHECK(ParseOk({Script()}, batch).max_nodes == 1);
  CHECK(ParseOk(With({"--standalone"}), srun).max_nodes == 1);
  Env standalone_env = srun;
  standalone_env["PET_STANDALONE"] = "true";
  CHECK(ParseOk({Script()}, standalone_env).max_nodes == 1);
  standalone_env["PET_STANDALONE"] = "false";
  CHECK(ParseOk({Script()}, standalone_env).max_nodes == 2);
  o = ParseOk(With({"--nnodes", "4"}), {{"JOB_COMPLETION_INDEX", "3"}});
  CHECK(o.node_rank == 3);
  CHECK(o.node_rank_given);
  CHECK(Contains(ParseErr({Script()}, {{"JOB_COMPLETION_INDEX", "3"}}),
                 "JOB_COMPLETION_INDEX"));  // 3 >= --nnodes=1
}

TEST_CASE("CliParser: --standalone forces an embedded c10d rendezvous",
          "[cli]") {
  LaunchOptions a =
      ParseOk(With({"--standalone", "--rdzv_backend", "static",
                    "--rdzv_endpoint", "h:1", "--rdzv_id", "mine"}));
  CHECK(a.standalone);
  CHECK(a.rdzv_backend == "c10d");
  CHECK(a.rdzv_endpoint == "localhost:0");
  CHECK(a.rdzv_id != "mine");
  // uuid4 shape: 8-4-4-4-12, version 4, RFC 4122 variant.
  REQUIRE(a.rdzv_id.size() == 36);
  CHECK(a.rdzv_id[8] == '-');
  CHECK(a.rdzv_id[14] == '4');
  CHECK(std::string("89ab").find(a.rdzv_id[19]) != std::string::npos);
  LaunchOptions b = ParseOk(With({"--standalone"}));
  CHECK(b.rdzv_id != a.rdzv_id);  // fresh per launch
  CHECK(Contains(ParseErr(With({"--standalone", "--nnodes", "2"})),
                 "--standalone"));
}

TEST_CASE("CliParser: rendezvous backends", "[cli]") {
  for (const char* b : {"static", "c10d", "grpc"}) {
    CHECK(ParseOk(With({"--rdzv_backend", b})).rdzv_backend == b);
  }
  for (const char* b : {"etcd", "etcd-v2"}) {
    const std::string err = ParseErr(With({"--rdzv_backend", b}));
    CHECK(Contains(err, "not supported by ddprun, use grpc"));
    CHECK(Contains(err, b));
  }
  CHECK(
      Contains(ParseErr(With({"--rdzv_backend", "zookeeper"})), "'zookeeper'"));
}

TEST_CASE("CliParser: rendezvous endpoints and conf", "[cli]") {
  CHECK(ParseOk(With({"--rdzv_endpoint", "node1"})).rdzv_endpoint == "node1");
  CHECK(ParseOk(With({"--rdzv_endpoint", "[fe80::1]:29400"})).rdzv_endpoint ==
        "[fe80::1]:29400");
  CHECK(Contains(ParseErr(With({"--rdzv_endpoint", "::1:29400"})),
                 "[addr]:port"));
  CHECK(Contains(ParseErr(With({"--rdzv_endpoint", "h:99999"})), "65535"));
  CHECK(Contains(ParseErr(With({"--rdzv_endpoint", "h:x"})), "'h:x'"));
  CHECK(Contains(ParseErr(With({"--rdzv_endpoint", ":29400"})), "empty host"));
  CHECK(Contains(ParseErr(With({"--rdzv_endpoint", "[::1"})), "']'"));
  CHECK(Contains(ParseErr(With({"--rdzv_conf", "join_timeout=1,b"})),
                 "'b' is not"));
  CHECK(Contains(ParseErr(With({"--rdzv_conf", "=1"})), "empty key"));
  CHECK(Contains(ParseErr(With({"--rdzv_conf", "a="})), "has no value"));
  // torch's test_launch_elastic passes the shell quotes inside the value.
  CHECK(ParseOk(With({"--rdzv-conf='join_timeout=5,last_call_timeout=1,"
                      "timeout=5'"}))
            .rendezvous.join_timeout == std::chrono::seconds(5));
  CHECK(ParseOk(With({"--rdzv_conf", "\"is_host=true\""})).rendezvous.is_host ==
        std::optional<bool>(true));
  CHECK(Contains(ParseErr(With({"--rdzv_conf", "'join_timout=5'"})),
                 "unknown key 'join_timout'"));
  CHECK(Contains(ParseErr(With({"--rdzv_conf", "'is_host=true\""})),
                 "unknown key ''is_host'"));
  // timeout: a torchrun key without effect here (a warning, not an error).
  CHECK(ParseOk(With({"--rdzv_conf", "timeout=900,is_host=true"}))
            .rendezvous.is_host == std::optional<bool>(true));
}

TEST_CASE("CliParser: --nnodes validation", "[cli]") {
  CHECK(ParseOk(With({"--nnodes", "3"})).min_nodes == 3);
  for (const char* bad : {"3:2", "0", "0:2", "-1", "a", "1:2:3", ""}) {
    INFO(bad);
    const std::string err = ParseErr(With({"--nnodes=" + std::string(bad)}));
    CHECK(Contains(err, "--nnodes: invalid value '" + std::string(bad) + "'"));
  }
}

TEST_CASE("CliParser: --nproc_per_node validation", "[cli]") {
  for (const char* bad : {"0", "-1", "abc", "2.5"}) {
    INFO(bad);
    CHECK(Contains(ParseErr(With({"--nproc_per_node", bad})),
                   "--nproc_per_node: invalid value '" + std::string(bad)));
  }
  LaunchOptions o = ParseOk(With({"--nproc_per_node", "cpu"}));
  CHECK(o.nproc_per_node == static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  CHECK(o.nproc_per_node_spec == "cpu");
  // auto is GPUs when there are any, else CPUs; never below 1.
  CHECK(ParseOk(With({"--nproc_per_node", "auto"})).nproc_per_node >= 1);
}

TEST_CASE("NprocResolver: GPUs counted from a /proc and /dev tree", "[cli]") {
  char tmpl[] = "/tmp/nproc_root_XXXXXX";
  const std::string root = mkdtemp(tmpl);
  auto mk = [&](const std::string& p) { mkdir((root + p).c_str(), 0755); };
  auto touch = [&](const std::string& p) { std::ofstream(root + p) << ""; };
  mk("/dev");
  HostDevices none = ProbeHostDevices(root);
  CHECK(none.nvidia_gpus == 0);
  CHECK(none.online_cpus >= 1);
  // Device nodes only (no /proc/driver/nvidia): nvidia<N>, not nvidiactl.
  for (const char* f :
       {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"}) {
    touch(f);
  }
  CHECK(ProbeHostDevices(root).nvidia_gpus == 2);
  // The driver's /proc listing wins when present.
  for (const char* d :
       {"/proc", "/proc/driver", "/proc/driver/nvidia",
        "/proc/driver/nvidia/gpus", "/proc/driver/nvidia/gpus/0000:01:00.0",
        "/proc/driver/nvidia/gpus/0000:02:00.0",
        "/proc/driver/nvidia/gpus/0000:03:00.0"}) {
    mk(d);
  }
  HostDevices host = ProbeHostDevices(root);
  CHECK(host.nvidia_gpus == 3);
  CHECK(system(("rm -rf " + root).c_str()) == 0);

  CHECK(*ResolveNprocPerNode("--nproc_per_node", "gpu", host, {}) == 3);
  CHECK(*ResolveNprocPerNode("--nproc_per_node", "auto", host, {}) == 3);
  CHECK(*ResolveNprocPerNode("--nproc_per_node", "gpu", host,
                             {{"CUDA_VISIBLE_DEVICES", "2,0"}}) == 2);
  // CUDA stops at the first invalid entry.
  CHECK(*ResolveNprocPerNode("--nproc_per_node", "gpu", host,
                             {{"CUDA_VISIBLE_DEVICES", "0,-1,1"}}) == 1);
  CHECK(*ResolveNprocPerNode("--nproc_per_node", "gpu", host,
                             {{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4"}}) == 3);
  HostDevices cpu_only{6, 0};
  CHECK(*ResolveNprocPerNode("--nproc_per_node", "auto", cpu_only, {}) == 6);
  CHECK(*ResolveNprocPerNode("--nproc_per_node", "cpu", host, {}) ==
        host.online_cpus);
  auto no_gpu = ResolveNprocPerNode("--nproc_per_node", "gpu", cpu_only, {});
  REQUIRE_FALSE(no_gpu.ok());
  CHECK(Contains(no_gpu.status().message(), "no NVIDIA GPU"));
  auto hidden = ResolveNprocPerNode("--nproc_per_node", "gpu", host,
                                    {{"CUDA_VISIBLE_DEVICES", ""}});
  REQUIRE_FALSE(hidden.ok());
  CHECK(Contains(hidden.status().message(), "CUDA_VISIBLE_DEVICES"));
  // auto with every GPU hidden falls back to CPUs.
  CHECK(*ResolveNprocPerNode("--nproc_per_node", "auto", host,
                             {{"CUDA_VISIBLE_DEVICES", "-1"}}) ==
        host.online_cpus);
}

TEST_CASE("CliParser: numeric flags reject bad values", "[cli]") {
  CHECK(Contains(ParseErr(With({"--max_restarts", "-1"})),
                 "--max_restarts: invalid value '-1' (must be at least 0)"));
  CHECK(Contains(ParseErr(With({"--monitor_interval", "0"})),
                 "--monitor_interval: invalid value '0' (must be greater"));
  CHECK(Contains(ParseErr(With({"--monitor_interval", "fast"})), "'fast'"));
  CHECK(Contains(ParseErr(With({"--shutdown_timeout", "-2"})),
                 "--shutdown_timeout"));
  CHECK(Contains(ParseErr(With({"--exit_barrier_timeout", "x"})),
                 "--exit_barrier_timeout"));
  CHECK(Contains(ParseErr(With({"--node_rank", "-1"})), "--node_rank"));
  CHECK(Contains(ParseErr(With({"--max_restarts", "99999999999"})),
                 "--max_restarts: invalid value '99999999999' (must be "
                 "smaller)"));
  CHECK(Contains(ParseErr(With({"--start_method", "thread"})),
                 "choose from spawn, fork, forkserver"));
  CHECK(Contains(ParseErr(With({"--role", ""})), "--role"));
}

TEST_CASE("CliParser: ports", "[cli]") {
  for (const char* bad : {"65536", "-5", "http", "1.5"}) {
    INFO(bad);
    CHECK(Contains(ParseErr(With({"--master_port", bad})),
                   "--master_port: invalid value '" + std::string(bad)));
  }
  // 0 = pick a free port, fine on one node, an error on several.
  CHECK_FALSE(ParseOk(With({"--master_port", "0"})).master_port.has_value());
  CHECK(Contains(ParseErr(With({"--nnodes", "2", "--master_port", "0"})),
                 "needs --nnodes=1"));
  // Several static nodes must agree on a port: torchrun's documented 29500.
  CHECK(ParseOk(With({"--nnodes", "2"})).master_port == 29500);
  CHECK(
      ParseOk(With({"--nnodes", "2", "--rdzv_backend", "grpc"})).master_port ==
      std::nullopt);
}

TEST_CASE("CliParser: static node rank must fit --nnodes", "[cli]") {
  CHECK(ParseOk(With({"--nnodes", "3", "--node_rank", "2"})).node_rank == 2);
  CHECK(Contains(ParseErr(With({"--nnodes", "2", "--node_rank", "2"})),
                 "must be below --nnodes=2"));
  // grpc treats it as a hint; any value >= 0 is fine.
  CHECK(
      ParseOk(With({"--rdzv_backend", "grpc", "--node_rank", "7"})).node_rank ==
      7);
}

TEST_CASE("CliParser: static --rdzv_endpoint names the master", "[cli]") {
  LaunchOptions o = ParseOk(With({"--rdzv_endpoint", "10.1.2.3:4567"}));
  CHECK(o.master_addr == "10.1.2.3");
  CHECK(o.master_port == 4567);
  o = ParseOk(With({"--rdzv_endpoint", "[::1]:4567"}));
  CHECK(o.master_addr == "[::1]");
  // Explicit master flags win.
  o = ParseOk(
      With({"--rdzv_endpoint", "10.1.2.3:4567", "--master_addr", "10.9.9.9"}));
  CHECK(o.master_addr == "10.9.9.9");
}

TEST_CASE("CliParser: -r/-t maps and errors", "[cli]") {
  LaunchOptions o = ParseOk(With({"--redirects", "0:3,2:1"}));
  CHECK(o.redirects.is_map);
  CHECK(o.redirects.ForRank(0) == StdStreams::kAll);
  CHECK(o.redirects.ForRank(1) == StdStreams::kNone);
  CHECK(o.redirects.ForRank(2) == StdStreams::kOut);
  for (const char* bad : {"4", "0:4", "0:1,", "a:1", "0=1", "0:1,0:2", "-1"}) {
    INFO(bad);
    CHECK(Contains(ParseErr(With({"-r", bad})), "--redirects: invalid value"));
    CHECK(Contains(ParseErr(With({"--tee=" + std::string(bad)})),
                   "--tee: invalid value"));
  }
}

TEST_CASE("CliParser: --local_ranks_filter", "[cli]") {
  CHECK(ParseOk(With({"--local_ranks_filter", "1"})).local_ranks_filter ==
        std::set<int>{1});
  CHECK_FALSE(
      ParseOk(With({"--local_ranks_filter="})).local_ranks_filter.has_value());
  CHECK(Contains(ParseErr(With({"--local_ranks_filter", "0,x"})),
                 "--local_ranks_filter"));
}

TEST_CASE("CliParser: --signals_to_handle names", "[cli]") {
  CHECK(ParseOk(With({"--signals_to_handle", "SIGUSR1, SIGUSR2,SIGUSR1"}))
            .signals_to_handle == std::vector<int>{SIGUSR1, SIGUSR2});
  CHECK(Contains(ParseErr(With({"--signals_to_handle", "SIGTERM,SIGFOO"})),
                 "unknown signal 'SIGFOO'"));
  CHECK(Contains(ParseErr(With({"--signals_to_handle", "SIGKILL"})),
                 "cannot be caught"));
}

TEST_CASE("CliParser: shutdown timeout from TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
          "[cli]") {
  const Env env = {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "12"}};
  CHECK(ParseOk({Script()}, env).shutdown_timeout_s == 12.0);
  CHECK(ParseOk(With({"--shutdown-timeout", "3"}), env).shutdown_timeout_s ==
        3.0);
  CHECK(Contains(
      ParseErr({Script()}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon"}}),
      "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"));
}

TEST_CASE("CliParser: no-effect flags are validated and accepted", "[cli]") {
  auto cl = ParseCommandLine(
      With({"--logs_specs", "default", "--event-log-handler", "console",
            "--numa_binding", "socket", "--duplicate_stdout_filters",
            "loss,,x,acc", "--duplicate-stderr-filters", "Error"}),
      {}, false);
  REQUIRE(cl.ok());
  CHECK(cl->options.entrypoint == Script());
  // Only --event_log_handler is left without effect (one warning);
  // --logs_specs=default is torchrun's own default: no warning.
  REQUIRE(cl->warnings.size() == 1);
  CHECK(cl->warnings[0] ==
        "--event_log_handler=console is accepted for torchrun compatibility "
        "but has no effect in ddprun");
  // --numa_binding and the filters act now: parsed, not warned about.
  CHECK(cl->options.numa_binding == "socket");
  CHECK(cl->options.duplicate_stdout_filters ==
        std::vector<std::string>{"loss,x", "acc"});
  CHECK(cl->options.duplicate_stderr_filters ==
        std::vector<std::string>{"Error"});
  // torchrun's _get_logs_specs_class: a name that is not a registered
  // torchrun.logs_specs entry point is a ValueError.
  CHECK(ParseErr(With({"--logs_specs", "my_plugin"})) ==
        "--logs_specs: unknown logs spec 'my_plugin' (torchrun: could not "
        "find entrypoint under 'torchrun.logs_specs[my_plugin]'); only "
        "'default' exists");
  CHECK(Contains(ParseErr(With({"--logs-specs=Default"})),
                 "unknown logs spec 'Default'"));
  CHECK(Contains(ParseErr({Script()}, {{"PET_LOGS_SPECS", "x"}}),
                 "PET_LOGS_SPECS: unknown logs spec 'x'"));
  CHECK(Contains(ParseErr(With({"--numa_binding", "everywhere"})),
                 "--numa_binding: invalid value 'everywhere'"));
  CHECK(Contains(ParseErr(With({"--event_log_handler", "kafka"})),
                 "--event_log_handler"));
  CHECK(Contains(ParseErr(With({"--duplicate_stdout_filters", "a,"})),
                 "empty filter"));
  // torch: "An empty filters list won't duplicate any lines".
  CHECK(ParseOk(With({"--duplicate_stdout_filters="}))
            .duplicate_stdout_filters.empty());
  CHECK(ParseOk({Script()}, {{"PET_NUMA_BINDING", "core-complex"}})
            .numa_binding == "core-complex");
  CHECK(ParseOk({Script()}).numa_binding.empty());
}

TEST_CASE("CliParser: flag syntax errors name the flag", "[cli]") {
  CHECK(ParseErr(With({"--bogus"})) == "unknown flag --bogus");
  CHECK(ParseErr(With({"-x"})) == "unknown flag -x");
  CHECK(Contains(ParseErr({"--nnodes"}), "--nnodes expects a value"));
  CHECK(Contains(ParseErr({"--nnodes", "--standalone", Script()}),
                 "--nnodes expects a value"));
  CHECK(
      Contains(ParseErr({"--role", "--", Script()}), "--role expects a value"));
  CHECK(Contains(ParseErr({"-m"}), "missing entrypoint"));
  CHECK(Contains(ParseErr({}), "missing entrypoint"));
  CHECK(Contains(ParseErr({"--nnodes", "1", "--"}), "missing entrypoint"));
}

TEST_CASE("CliParser: entrypoint checks", "[cli]") {
  CHECK(ParseErr({"/nonexistent/train.py"}) ==
        "entrypoint script '/nonexistent/train.py' not found");
  CHECK(Contains(ParseErr({"--run_path", "/nonexistent/x.py"}), "not found"));
  CHECK(Contains(ParseErr({S().dir()}), "not found"));  // a directory
  // -m: Python resolves the module; nothing to check here.
  CHECK(ParseOk({"-m", "no.such.module"}).entrypoint == "no.such.module");
  // --no_python: absolute or relative paths must be executable files.
  CHECK(ParseOk({"--no_python", S().Path("prog"), "a"}).entrypoint_args ==
        Args{"a"});
  CHECK(Contains(ParseErr({"--no_python", S().Path("noexec")}),
                 "is not an executable file"));
  CHECK(Contains(ParseErr({"--no_python", S().Path("missing")}), "not found"));
  // Bare names are looked up on the given PATH.
  const Env path = {{"PATH", "/nonexistent:" + S().dir()}};
  CHECK(ParseOk({"--no_python", "prog"}, path).entrypoint == "prog");
  CHECK(ParseErr({"--no_python", "nope"}, path) ==
        "--no_python entrypoint 'nope' not found on PATH");
  CHECK(Contains(ParseErr({"--no_python", "noexec"}, path),
                 "on PATH but not executable"));
  CHECK(ParseErr({"--no_python", "-m", "prog"}, path) ==
        "--no_python and -m/--module cannot be used together");
  // --run_path takes precedence over --no_python (a script is enough).
  CHECK(ParseOk({"--run_path", "--no_python", Script()}).run_path);
  CHECK(Contains(ParseErr({"--run_path", "-m", "pkg.mod"}), "not found"));
}

TEST_CASE(
    "CliParser: --standby_workers needs --restart_scope failed and a "
    "program on the C++ runtime",
    "[cli]") {
  const std::string prog = S().Path("prog");
  CHECK_FALSE(ParseOk({"--no_python", prog}).standby_workers);
  CHECK(ParseOk({"--restart_scope", "failed", "--standby_workers",
                 "--no_python", prog})
            .standby_workers);
  CHECK(ParseOk({"--restart_scope", "failed", "--no_python", prog},
                {{"PET_STANDBY_WORKERS", "1"}})
            .standby_workers);
  CHECK(ParseErr({"--standby_workers", "--no_python", prog}) ==
        "--standby_workers needs --restart_scope failed (a standby takes "
        "over a rank replaced alone; under --restart_scope group every "
        "worker restarts)");
  CHECK(
      Contains(ParseErr({"--no_python", prog}, {{"PET_STANDBY_WORKERS", "1"}}),
               "PET_STANDBY_WORKERS needs --restart_scope failed"));
  for (const Args& python : {Args{Script()}, Args{"-m", "pkg.train"}}) {
    Args args = {"--restart_scope", "failed", "--standby_workers"};
    args.insert(args.end(), python.begin(), python.end());
    CHECK(ParseErr(args) ==
          "--standby_workers: Python entrypoints are not supported (a "
          "standby waits in ddprun::worker::RunMain, the C++ worker "
          "runtime)");
  }
}

TEST_CASE("CliParser: legacy torch.distributed.launch mode", "[cli]") {
  LaunchOptions o = ParseOk({Script()}, {}, true);
  CHECK(o.legacy_launch);
  CHECK_FALSE(o.use_env);
  CHECK(o.master_port == 29500);
  o = ParseOk(With({"--use_env"}), {}, true);
  CHECK(o.use_env);
  o = ParseOk(With({"--use-env", "--legacy_launch"}));
  CHECK(o.legacy_launch);
  CHECK(o.use_env);
  CHECK(ParseOk({Script()}, {{"PET_USE_ENV", "1"}}, true).use_env);
  CHECK(Contains(ParseErr(With({"--use_env"})), "unknown flag --use_env"));
  // torch.distributed.launch's launch() refuses --no-python without
  // --use-env (the program would get --local-rank=N as its argument).
  const char* kNoPythonNeedsUseEnv =
      "When using the '--no-python' flag, you must also set the "
      "'--use-env' flag.";
  CHECK(ParseErr({"--no_python", "/bin/true"}, {}, true) ==
        kNoPythonNeedsUseEnv);
  CHECK(ParseErr({"--no-python", "--legacy_launch", "/bin/true"}) ==
        kNoPythonNeedsUseEnv);
  CHECK(ParseOk({"--no_python", "--use_env", "/bin/true"}, {}, true).no_python);
  CHECK(ParseOk({"--no_python", "/bin/true"}).no_python);  // torchrun
  // Outside legacy mode a stray PET_USE_ENV is ignored, as torchrun would.
  CHECK_FALSE(ParseOk({Script()}, {{"PET_USE_ENV", "1"}}).use_env);
}

TEST_CASE("CliParser: help lists every torchrun flag with defaults", "[cli]") {
  const std::string help = HelpText(false);
  for (const char* flag : {"--nnodes",
                           "--nproc_per_node",
                           "--rdzv_backend",
                           "--rdzv_endpoint",
                           "--rdzv_id",
                           "--rdzv_conf",
                           "--standalone",
                           "--max_restarts",
                           "--monitor_interval",
                           "--start_method",
                           "--role",
                           "-m, --module",
                           "--no_python",
                           "--run_path",
                           "--log_dir",
                           "-r, --redirects",
                           "-t, --tee",
                           "--local_ranks_filter",
                           "--node_rank",
                           "--master_addr",
                           "--master_port",
                           "--local_addr",
                           "--signals_to_handle",
                           "--shutdown_timeout",
                           "--virtual_local_rank",
                           "--exit_barrier_timeout",
                           "--logs_specs",
                           "--event_log_handler",
                           "--numa_binding",
                           "--duplicate_stdout_filters",
                           "--duplicate_stderr_filters",
                           "--legacy_launch",
                           "-h, --help"}) {
    INFO(flag);
    CHECK(Contains(help, flag));
  }
  CHECK(Contains(help, "(default: 1:1; env PET_NNODES)"));
  CHECK(Contains(help, "SIGTERM,SIGINT,SIGHUP,SIGQUIT"));
  CHECK(Contains(help, "usage: ddprun"));
  CHECK_FALSE(Contains(help, "--use_env"));
  const std::string legacy = HelpText(true);
  CHECK(Contains(legacy, "--use_env"));
  CHECK(Contains(legacy, "usage: ddprun-launch"));
  // No line runs past 80 columns.
  std::size_t start = 0;
  while (start < help.size()) {
    auto end = help.find('\n', start);
    if (end == std::string::npos) end = help.size();
    INFO(help.substr(start, end - start));
    CHECK(end - start <= 80);
    start = end + 1;
  }
}

}  // namespace
}  // namespace ddprun::agent

namespace ddprun::agent {
namespace {

TEST_CASE("CliParser: --watchdog_timeout (off by default, PET_, checked)",
          "[cli]") {
  CHECK(ParseOk({Script()}).watchdog_timeout_s == 0.0);
  CHECK(
      ParseOk({Script()}, {{"PET_WATCHDOG_TIMEOUT", "4"}}).watchdog_timeout_s ==
      4.0);
  CHECK(ParseOk(With({"--watchdog-timeout=1"}), {{"PET_WATCHDOG_TIMEOUT", "4"}})
            .watchdog_timeout_s == 1.0);
  const std::string neg = ParseErr(With({"--watchdog_timeout", "-1"}));
  CHECK(Contains(neg, "--watchdog_timeout"));
  CHECK(Contains(neg, "at least 0"));
  CHECK(Contains(ParseErr({Script()}, {{"PET_WATCHDOG_TIMEOUT", "soon"}}),
                 "PET_WATCHDOG_TIMEOUT"));
  const std::string help = HelpText(false);
  CHECK(Contains(help, "--watchdog_timeout SECONDS"));
  CHECK(Contains(help, "PET_WATCHDOG_TIMEOUT"));
}

}  // namespace
}  // namespace ddprun::agent

namespace ddprun::agent {
namespace {

TEST_CASE("CliParser: warnings are returned, never printed before an error",
          "[cli]") {
  auto ok =
      ParseCommandLine(With({"--standalone", "--rdzv_id=job7"}), {}, false);
  REQUIRE(ok.ok());
  CHECK(ok->warnings ==
        std::vector<std::string>{"--standalone ignores --rdzv_id=job7"});
  CHECK(ParseCommandLine(With({}), {}, false)->warnings.empty());
  // The same warning-worthy flag with a later error: only the error.
  auto bad =
      ParseCommandLine(With({"--standalone", "--rdzv_id=job7",
                             "--numa_binding=node", "--shutdown_timeout=-1"}),
                       {}, false);
  REQUIRE_FALSE(bad.ok());
  CHECK(Contains(bad.status().message(), "--shutdown_timeout"));
}

TEST_CASE("CliParser: --rdzv_conf keys are checked on every backend", "[cli]") {
  const std::vector<Args> backends = {
      {"--standalone"},
      {},                                     // static, one node
      {"--nnodes=2", "--master_port=29500"},  // static, several nodes
      {"--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1"},
      {"--nnodes=2", "--rdzv_backend=grpc", "--rdzv_endpoint=h:1"},
  };
  for (const Args& backend : backends) {
    Args flags = backend;
    const std::string name = flags.empty() ? "static" : flags[0];
    INFO(name);
    flags.push_back("--rdzv_conf=join_timout=5");
    const std::string unknown = ParseErr(With(flags));
    CHECK(Contains(unknown, "--rdzv_conf: unknown key 'join_timout'"));
    CHECK(Contains(unknown, "known keys: join_timeout, last_call_timeout,"));
    CHECK(Contains(unknown, "is_host"));
    flags.back() = "--rdzv_conf=is_host=1,join_timeout=abc";
    CHECK(Contains(ParseErr(With(flags)),
                   "--rdzv_conf join_timeout=abc: expected a number of "
                   "seconds in 0.001..1000000"));
  }
  CHECK(Contains(ParseErr({Script()}, {{"PET_RDZV_CONF", "bogus=1"}}),
                 "PET_RDZV_CONF: unknown key 'bogus'"));
  CHECK(Contains(ParseErr(With({"--rdzv_conf=is_host=maybe"})),
                 "is_host=maybe: expected true or false"));
  CHECK(Contains(ParseErr(With({"--rdzv_conf=bad_host_failures=-1"})),
                 "bad_host_failures=-1: expected a count"));
  CHECK(Contains(ParseErr(With({"--rdzv_conf=last_call_timeout=0"})),
                 "last_call_timeout=0"));
  CHECK(Contains(ParseErr(With({"--rdzv_conf=tls_ca=/no/such/ca.pem"})),
                 "tls_ca=/no/such/ca.pem: expected a readable file"));
  // Every consumed key parses; torchrun's own keys are accepted with a
  // warning that they do nothing here.
  auto cl = ParseCommandLine(
      With({"--rdzv_conf",
            "join_timeout=1.5,last_call_timeout=2,heartbeat_interval=0.5,"
            "heartbeat_timeout=3,connection_lost_timeout=9,"
            "bad_host_failures=0,bad_host_window=60,bad_host_cooldown=30,"
            "is_host=false,token=t,token_file=" +
                S().Path("token") + ",close_timeout=30,read_timeout=60"}),
      {}, false);
  INFO(cl.status().ToString());
  REQUIRE(cl.ok());
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  const rendezvous::RendezvousOptions& r = cl->options.rendezvous;
  CHECK(r.join_timeout == milliseconds(1500));
  CHECK(r.last_call_timeout == seconds(2));
  CHECK(r.heartbeat_interval == milliseconds(500));
  CHECK(r.heartbeat_timeout == seconds(3));
  CHECK(r.connection_lost_timeout == seconds(9));
  CHECK(r.bad_host_failures == 0);
  CHECK(r.bad_host_window == seconds(60));
  CHECK(r.bad_host_cooldown == seconds(30));
  CHECK(r.is_host == std::optional<bool>(false));
  CHECK(r.token == "t0ken");  // token_file's content wins over token=
  REQUIRE(cl->warnings.size() == 2);
  CHECK(cl->warnings[0] ==
        "--rdzv_conf close_timeout=30 is accepted for torchrun compatibility "
        "but has no effect in ddprun");
}

TEST_CASE("CliParser: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE is checked",
          "[cli]") {
  const char* kVar = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE";
  // ddprun's extensions pass (pytorch#75087: the host in the prefix).
  CHECK(ParseOk({Script()}, {{kVar,
                              "[${hostname}:${node_rank}/"
                              "${local_world_size}:${rank}]:"}})
            .log_line_prefix_template ==
        "[${hostname}:${node_rank}/${local_world_size}:${rank}]:");
  CHECK(ParseOk({Script()}).log_line_prefix_template.empty());
  CHECK(ParseOk({Script()}, {{kVar, "[${rank}]: "}}).log_line_prefix_template ==
        "[${rank}]: ");
  const std::string err = ParseErr({Script()}, {{kVar, "[${node}]:"}});
  CHECK(Contains(err, kVar));
  CHECK(Contains(err, "unknown placeholder 'node'"));
}

}  // namespace
}  // namespace ddprun::agent

namespace ddprun::agent {
namespace {

TEST_CASE("CliParser: --straggler_factor and --straggler_time (defaults, "
          "checked)",
          "[cli][stragglers]") {
  const LaunchOptions def = ParseOk({Script()});
  CHECK(def.straggler_factor == 2.0);
  CHECK(def.straggler_time_s == 30.0);
  const LaunchOptions set =
      ParseOk(With({"--straggler-factor=3", "--straggler_time", "5"}));
  CHECK(set.straggler_factor == 3.0);
  CHECK(set.straggler_time_s == 5.0);
  CHECK(ParseOk(With({"--straggler_factor=0"})).straggler_factor == 0.0);
  const std::string one = ParseErr(With({"--straggler_factor", "1"}));
  CHECK(Contains(one, "--straggler_factor: invalid value '1'"));
  CHECK(Contains(one, "more than 1, or 0"));
  CHECK(Contains(ParseErr(With({"--straggler_time", "0"})),
                 "greater than 0"));
  const std::string help = HelpText(false);
  CHECK(Contains(help, "--straggler_factor FACTOR"));
  CHECK(Contains(help, "ddprun_steps.step()"));
}

}  // namespace
}  // namespace ddprun::agent

namespace ddprun::agent {
namespace {

TEST_CASE("CliParser: --health_check* and --max_restarts_without_progress",
          "[cli][health]") {
  const LaunchOptions def = ParseOk({Script()});
  CHECK_FALSE(def.health_check);
  CHECK(def.health_check_cmd.empty());
  CHECK(def.health_check_gpu_mem_mb == 1024);
  CHECK(def.health_check_shm_mb == 256);
  CHECK(def.health_check_timeout_s == 30);
  CHECK(def.max_restarts_without_progress == 0);
  const LaunchOptions o = ParseOk(
      With({"--health-check", "--health_check_cmd", "nvidia-smi -q",
            "--health-check-paths=/data,/ckpt", "--health_check_gpu_mem_mb=512",
            "--health_check_shm_mb", "1024", "--health-check-timeout=5",
            "--max_restarts_without_progress=3"}));
  CHECK(o.health_check);
  CHECK(o.health_check_cmd == "nvidia-smi -q");
  CHECK(o.health_check_paths == std::vector<std::string>{"/data", "/ckpt"});
  CHECK(o.health_check_gpu_mem_mb == 512);
  CHECK(o.health_check_shm_mb == 1024);
  CHECK(o.health_check_timeout_s == 5);
  CHECK(o.max_restarts_without_progress == 3);
  // PET_* forms.
  const LaunchOptions env = ParseOk(
      {Script()},
      {{"PET_HEALTH_CHECK", "1"}, {"PET_MAX_RESTARTS_WITHOUT_PROGRESS", "2"}});
  CHECK(env.health_check);
  CHECK(env.max_restarts_without_progress == 2);
  // Bad values name the flag.
  CHECK(Contains(ParseErr(With({"--max_restarts_without_progress=-1"})),
                 "--max_restarts_without_progress: invalid value '-1'"));
  CHECK(Contains(ParseErr(With({"--health_check_timeout=0"})),
                 "--health_check_timeout: invalid value '0'"));
  CHECK(Contains(ParseErr(With({"--health_check_paths=/a,,/b"})),
                 "an empty path"));
}

TEST_CASE("NprocResolver: xpu and privateuse1 names ask the workers' torch",
          "[cli]") {
  std::vector<std::string> asked;
  AcceleratorCounter count = [&](const std::string& source,
                                 const std::string& name) -> StatusOr<int> {
    asked.push_back(source + "=" + name);
    if (name == "npu") return 4;
    return InvalidArgumentError(source + "=" + name + ": no such device");
  };
  HostDevices host{6, 0};
  CHECK(*ResolveNprocPerNode("--nproc_per_node", "npu", host, {}, count) == 4);
  CHECK_FALSE(
      ResolveNprocPerNode("--nproc_per_node", "xpu", host, {}, count).ok());
  // Ints, cpu, gpu, auto and what no device module can be named are
  // answered here, without the interpreter.
  CHECK(*ResolveNprocPerNode("--nproc_per_node", "3", host, {}, count) == 3);
  CHECK(*ResolveNprocPerNode("--nproc_per_node", "cpu", host, {}, count) == 6);
  CHECK_FALSE(
      ResolveNprocPerNode("--nproc_per_node", "2.5", host, {}, count).ok());
  CHECK_FALSE(
      ResolveNprocPerNode("--nproc_per_node", "-1", host, {}, count).ok());
  CHECK(asked == std::vector<std::string>{"--nproc_per_node=npu",
                                          "--nproc_per_node=xpu"});
  // Without a counter (a front end that has none), names are errors.
  auto none = ResolveNprocPerNode("--nproc_per_node", "xpu", host, {});
  REQUIRE_FALSE(none.ok());
  CHECK(Contains(none.status().message(), "xpu or a privateuse1 backend"));
  // Through the parser: PET_NPROC_PER_NODE too.
  auto cl = ParseCommandLine({Script()}, {{"PET_NPROC_PER_NODE", "npu"}}, false,
                             count);
  REQUIRE(cl.ok());
  CHECK(cl->options.nproc_per_node == 4);
  CHECK(asked.back() == "PET_NPROC_PER_NODE=npu");
}

}  // namespace
}  // namespace ddprun::agent
