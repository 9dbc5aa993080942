// ddprun-deepspeed's multi-node launch over a real OpenSSH server: two hosts
// in network namespaces of their own (10.231.9.0/24, only inside them);
// host b runs Debian's sshd with keys this test generates, host a runs
// `ddprun-deepspeed -H hostfile` listing both. Node 0 starts on a, node 1
// over ssh on b, as deepspeed's pdsh launcher would start it. Needs root,
// `ip netns` and /usr/sbin/sshd (openssh-server); skipped with a message
// otherwise. Every wait is bounded; sshd, the launcher and the namespaces
// go away on every exit path (Child and NetnsTestbed destructors).

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "tests/multinode/multinode_util.h"
#include "tests/multinode/netns_testbed.h"

namespace ddprun::multinode {
namespace {

const std::string kSshd = "/usr/sbin/sshd";
const std::string kAgentData = DDPRUN_SOURCE_DIR "/tests/agent/data";

bool Run(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
}

std::map<std::string, std::string> ParseEnvFile(const std::string& text) {
  std::map<std::string, std::string> env;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    const auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    start = end + 1;
  }
  return env;
}

// Keys, sshd and ssh configuration in `dir`; sshd on host 2 of `net`.
class SshFixture {
 public:
  SshFixture(const NetnsTestbed& net, const std::string& dir) : dir_(dir) {
    ok_ = Run("mkdir -p /run/sshd") &&
          Run("ssh-keygen -q -t ed25519 -N '' -f " + dir + "/host_key") &&
          Run("ssh-keygen -q -t ed25519 -N '' -f " + dir + "/user_key") &&
          Run("cp " + dir + "/user_key.pub " + dir + "/authorized_keys");
    if (!ok_) return;
    std::ofstream(dir + "/sshd_config")
        << "ListenAddress " << net.Addr(2) << "\n"
        << "Port 22\n"
        << "HostKey " << dir << "/host_key\n"
        << "AuthorizedKeysFile " << dir << "/authorized_keys\n"
        << "PermitRootLogin prohibit-password\n"
        << "PasswordAuthentication no\n"
        << "KbdInteractiveAuthentication no\n"
        << "UsePAM no\n"
        << "StrictModes no\n"
        << "PidFile none\n"
        << "LogLevel ERROR\n";
    std::ofstream(dir + "/ssh_config")
        << "Host *\n"
        << "  User root\n"
        << "  IdentityFile " << dir << "/user_key\n"
        << "  IdentitiesOnly yes\n"
        << "  UserKnownHostsFile /dev/null\n"
        << "  StrictHostKeyChecking no\n"
        << "  ConnectTimeout 5\n"
        << "  LogLevel ERROR\n";
    std::vector<std::string> argv = net.Exec(2);
    for (const std::string& a : {kSshd, std::string("-D"), std::string("-e"),
                                 std::string("-f"), dir + "/sshd_config"}) {
      argv.push_back(a);
    }
    sshd_ = std::make_unique<Child>(dir, "sshd", argv);
    // Ready once host a can log in (each try bounded by `timeout`).
    const std::string probe = "timeout 10 " + net.Exec(1)[0] + " netns exec " +
                              net.Host(1) + " ssh -F " + dir + "/ssh_config " +
                              net.Addr(2) + " true";
    ok_ = WaitUntil([&] { return Run(probe); }, 20s);
  }
  bool ok() const { return ok_; }
  std::string SshdLog() const { return sshd_ ? sshd_->Output() : ""; }
  std::string LauncherArgs() const {
    return "--launcher_args=-F " + dir_ + "/ssh_config";
  }

 private:
  std::string dir_;
  bool ok_ = false;
  std::unique_ptr<Child> sshd_;
};

std::vector<std::string> DeepSpeed(const NetnsTestbed& net,
                                   std::vector<std::string> args) {
  std::vector<std::string> argv = net.Exec(1);
  argv.push_back(kBinDir + "/ddprun-deepspeed");
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// Two hosts (a: 10.231.<subnet>.2, b: .3) with sshd on b, a scratch
// directory with the hostfile (a first: node 0 starts on a; b: node 1 over
// ssh) and the .deepspeed_env that gives every node DDPRUN_TEST_OUT.
// unavailable() says why the machine cannot run it (not root, no sshd, no
// network namespaces); empty when it can.
class SshTestbed {
 public:
  SshTestbed(const std::string& prefix, int subnet) {
    if (geteuid() != 0) {
      unavailable_ = "network namespaces need root";
      return;
    }
    if (access(kSshd.c_str(), X_OK) != 0) {
      unavailable_ = "no " + kSshd + " (Debian package openssh-server)";
      return;
    }
    net_ = std::make_unique<NetnsTestbed>(prefix, subnet);
    if (!net_->ok()) {
      unavailable_ = "`ip netns` / veth / bridge setup failed";
      return;
    }
    ssh_ = std::make_unique<SshFixture>(*net_, dir_.path());
    std::ofstream(dir_.path() + "/hostfile") << net_->Addr(1) << " slots=2\n"
                                             << net_->Addr(2) << " slots=2\n";
    std::ofstream(dir_.path() + "/ds_env")
        << "DDPRUN_TEST_OUT=" << dir_.path() << "\n";
    ready_ = true;
  }
  bool ready() const { return ready_; }
  const std::string& unavailable() const { return unavailable_; }
  const NetnsTestbed& net() const { return *net_; }
  const std::string& dir() const { return dir_.path(); }
  const SshFixture& ssh() const { return *ssh_; }
  // The ddprun-deepspeed command on host a for the hostfile.
  std::vector<std::string> Launch(const std::vector<std::string>& tail) const {
    std::vector<std::string> args = {
        "-H", dir() + "/hostfile", "--master_addr=" + net_->Addr(1),
        "--master_port=29500", ssh_->LauncherArgs()};
    args.insert(args.end(), tail.begin(), tail.end());
    return DeepSpeed(*net_, args);
  }

 private:
  // Destroyed in reverse: sshd, then the directory, then the namespaces.
  std::unique_ptr<NetnsTestbed> net_;
  TempDir dir_;
  std::unique_ptr<SshFixture> ssh_;
  bool ready_ = false;
  std::string unavailable_;
};

TEST_CASE(
    "multinode: ddprun-deepspeed starts the hostfile's other host over ssh",
    "[multinode][netns][ssh]") {
  SshTestbed bed("ddpsh", 9);
  if (!bed.ready()) DDPRUN_SKIP_UNLESS_CI(bed.unavailable());
  const NetnsTestbed& net = bed.net();
  const std::string& dir = bed.dir();
  INFO(bed.ssh().SshdLog());
  REQUIRE(bed.ssh().ok());
  Child launcher(
      dir, "launcher",
      bed.Launch({"--no_python", kAgentData + "/env_dump.sh", "x y", "it's"}),
      {{"DS_ENV_FILE", dir + "/ds_env"},
       {"DDPRUN_NOT_EXPORTED", "1"},
       {"PYTHON_EXEC", "/usr/bin/python3"}});
  const int rc = launcher.Wait(45s);
  INFO(launcher.Output());
  REQUIRE(rc == 0);
  std::set<std::string> ranks;
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    auto e = ParseEnvFile(ReadFile(dir + "/env_" + std::to_string(r)));
    ranks.insert(e["RANK"]);
    const bool here = r < 2;  // hostfile order: a's slots come first
    CHECK(e["WORLD_SIZE"] == "4");
    CHECK(e["CROSS_RANK"] == (here ? "0" : "1"));
    CHECK(e["CROSS_SIZE"] == "2");
    CHECK(e["LOCAL_SIZE"] == "2");
    CHECK(e["LOCAL_RANK"] == std::to_string(r % 2));
    CHECK(e["CUDA_VISIBLE_DEVICES"] == "0,1");
    CHECK(e["MASTER_ADDR"] == net.Addr(1));
    // runner.py's exports reach the remote node (PYTHON*, .deepspeed_env);
    // anything else in the launcher's environment only reaches node 0.
    CHECK(e["PYTHON_EXEC"] == "/usr/bin/python3");
    CHECK(e["DDPRUN_TEST_OUT"] == dir);
    CHECK(e.count("DDPRUN_NOT_EXPORTED") == (here ? 1u : 0u));
    // sshd gave node 1 a login session of its own.
    if (!here) CHECK(e.count("SSH_CONNECTION") == 1);
    CHECK(ReadFile(dir + "/args_" + std::to_string(r % 2))
              .find("args:--local_rank=") == 0);
  }
  CHECK(ranks == std::set<std::string>{"0", "1", "2", "3"});
  // Both ranks with LOCAL_RANK 1 wrote args_1; its content is deepspeed's.
  CHECK(ReadFile(dir + "/args_1") == "args:--local_rank=1 x y it's\n");
}

TEST_CASE("multinode: kill -9 of ddprun-deepspeed leaves no worker on any host",
          "[multinode][netns][ssh]") {
  SshTestbed bed("ddpsk", 10);
  if (!bed.ready()) DDPRUN_SKIP_UNLESS_CI(bed.unavailable());
  const std::string& dir = bed.dir();
  INFO(bed.ssh().SshdLog());
  REQUIRE(bed.ssh().ok());
  Child launcher(dir, "launcher",
                 bed.Launch({"--no_local_rank", "--no_python",
                             kAgentData + "/sleeper.sh"}),
                 {{"DS_ENV_FILE", dir + "/ds_env"}});
  std::vector<std::string> pid_files;
  for (int r = 0; r < 4; ++r) {
    pid_files.push_back(dir + "/pid_" + std::to_string(r));
  }
  INFO(launcher.Output());
  REQUIRE(WaitUntil(
      [&] {
        for (const auto& f : pid_files) {
          if (access(f.c_str(), F_OK) != 0) return false;
        }
        return true;
      },
      45s));
  std::vector<int> pids;
  for (const auto& f : pid_files)
    pids.push_back(std::atoi(ReadFile(f).c_str()));
  // Only the launcher itself: its local node dies with it, and the remote
  // node sees its ssh session (stdin) close.
  const auto killed = SteadyClock::now();
  kill(launcher.pid(), SIGKILL);
  CHECK(launcher.Wait(5s) == 128 + SIGKILL);
  const bool all_gone = WaitUntil(
      [&] {
        for (int pid : pids) {
          const std::string stat =
              ReadFile("/proc/" + std::to_string(pid) + "/stat");
          const auto paren = stat.rfind(')');
          if (!stat.empty() && paren != std::string::npos &&
              stat[paren + 2] != 'Z') {
            return false;
          }
        }
        return true;
      },
      15s);
  std::printf(
      "[multinode] ssh launch: every worker gone %.2f s after kill -9 "
      "of the launcher\n",
      std::chrono::duration<double>(SteadyClock::now() - killed).count());
  CHECK(all_gone);
  if (!all_gone) {
    for (int pid : pids) kill(pid, SIGKILL);
  }
}

}  // namespace
}  // namespace ddprun::multinode
