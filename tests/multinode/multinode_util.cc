#include "tests/multinode/multinode_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <thread>

namespace ddprun::multinode {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  return names;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/ddprun_multinode_XXXXXX";
  path_ = mkdtemp(tmpl);
}

TempDir::~TempDir() {
  // Workers of a kill -9'd agent (or of a failed test) outlive their agent.
  KillRecordedWorkers(path_);
  (void)!system(("rm -rf " + path_).c_str());
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

bool WaitUntil(const std::function<bool()>& done,
               std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  while (true) {
    if (done()) return true;
    if (SteadyClock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

Child::Child(const std::string& dir, const std::string& name,
             std::vector<std::string> argv,
             std::map<std::string, std::string> env)
    : out_(dir + "/" + name + ".out"), err_(dir + "/" + name + ".err") {
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
    int out = open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
}

Child::~Child() {
  if (!reaped_) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

int Child::Wait(std::chrono::milliseconds timeout) {
  if (reaped_) return code_;
  WaitUntil(
      [&] {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
        reaped_ = true;
        code_ =
            WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
        return true;
      },
      timeout);
  return reaped_ ? code_ : -1;
}

bool Child::Running() { return Wait(0ms) == -1; }

void Child::Kill(int sig) { kill(pid_, sig); }

std::string Child::Output() const {
  return "--- stdout\n" + Stdout() + "--- stderr\n" + Stderr();
}

RendezvousServerProcess::RendezvousServerProcess(
    const std::string& dir, int port, const std::vector<std::string>& prefix,
    const std::string& host) {
  std::vector<std::string> argv = prefix;
  argv.insert(argv.end(), {kBinDir + "/ddprun-rendezvous", "--host", host,
                           "--port", std::to_string(port)});
  static int n = 0;
  child_ = std::make_unique<Child>(dir, "server" + std::to_string(n++), argv);
  const std::regex listening("listening on [^ ]*:([0-9]+)");
  WaitUntil(
      [&] {
        std::smatch m;
        std::string err = child_->Stderr();
        if (!std::regex_search(err, m, listening)) return false;
        port_ = std::stoi(m[1]);
        return true;
      },
      10s);
}

std::vector<WorkerStart> ReadWorkerStarts(const std::string& dir) {
  std::vector<WorkerStart> starts;
  for (const std::string& name : ListDir(dir)) {
    if (name.rfind("start_", 0) != 0) continue;
    std::istringstream in(ReadFile(dir + "/" + name));
    WorkerStart s;
    if (in >> s.node >> s.rank >> s.world_size >> s.group_rank >>
        s.group_world_size >> s.restart_count >> s.pid >> s.wall_time >>
        s.master_addr) {
      starts.push_back(s);
    }
  }
  return starts;
}

void KillRecordedWorkers(const std::string& dir) {
  for (const WorkerStart& s : ReadWorkerStarts(dir)) {
    if (s.pid > 0) kill(s.pid, SIGKILL);
  }
}

std::vector<std::string> Ddprun(std::vector<std::string> args) {
  args.insert(args.begin(), kBinDir + "/ddprun");
  return args;
}

}  // namespace ddprun::multinode
