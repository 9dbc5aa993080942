#include "tests/support/process.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace ddprun::testing {

using std::chrono::milliseconds;

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

bool WaitUntil(const std::function<bool()>& done, milliseconds timeout,
               milliseconds poll) {
  const auto deadline = SteadyClock::now() + timeout;
  while (true) {
    if (done()) return true;
    if (SteadyClock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
}

bool FileExists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

bool WaitForFiles(const std::vector<std::string>& paths,
                  milliseconds timeout) {
  return WaitUntil(
      [&] {
        for (const auto& p : paths) {
          if (!FileExists(p)) return false;
        }
        return true;
      },
      timeout, milliseconds(5));
}

bool WaitForText(const std::string& path, const std::string& part,
                 milliseconds timeout) {
  return WaitUntil(
      [&] { return ReadFile(path).find(part) != std::string::npos; }, timeout,
      milliseconds(20));
}

bool WaitForPort(int port, milliseconds timeout) {
  return WaitUntil(
      [port] {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return false;
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<uint16_t>(port));
        const bool open =
            ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
        ::close(fd);
        return open;
      },
      timeout, milliseconds(20));
}

bool IsDead(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return true;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X');
}

bool WaitDead(const std::vector<pid_t>& pids, milliseconds timeout) {
  return WaitUntil(
      [&] {
        for (pid_t p : pids) {
          if (!IsDead(p)) return false;
        }
        return true;
      },
      timeout, milliseconds(5));
}

TempDir::TempDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("mkdtemp " + tmpl + " failed");
  }
  path_ = tmpl;
}

TempDir::~TempDir() { (void)!std::system(("rm -rf '" + path_ + "'").c_str()); }

namespace {

// The test's environment with `changes` applied ("-NAME" removes NAME).
std::vector<std::string> ChildEnvironment(
    const std::map<std::string, std::string>& changes) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : changes) {
    if (!k.empty() && k[0] == '-') {
      env.erase(k.substr(1));
    } else {
      env[k] = v;
    }
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

int OpenOutput(const std::string& path) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path);
  return fd;
}

int ExitCodeOf(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

}  // namespace

Process::Process(ProcessOptions options) : options_(std::move(options)) {
  if (options_.argv.empty()) throw std::runtime_error("Process: empty argv");
  std::string dir = options_.output_dir;
  if (dir.empty()) {
    char tmpl[] = "/tmp/ddprun_process_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      throw std::runtime_error("Process: mkdtemp failed");
    }
    private_dir_ = dir = tmpl;
  }
  out_ = dir + "/" + options_.name + ".out";
  err_ = options_.merge_stderr ? "" : dir + "/" + options_.name + ".err";
  const int out_fd = OpenOutput(out_);
  const int err_fd = options_.merge_stderr ? out_fd : OpenOutput(err_);

  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls.
  std::vector<std::string> env = ChildEnvironment(options_.env);
  std::vector<char*> envp;
  for (auto& kv : env) envp.push_back(kv.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (auto& a : options_.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  const char* cwd = options_.cwd.empty() ? nullptr : options_.cwd.c_str();
  const bool own_group = options_.own_process_group;

  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("Process: fork failed");
  if (pid_ == 0) {
    if (own_group) ::setpgid(0, 0);
    if (cwd != nullptr && ::chdir(cwd) != 0) _exit(126);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::execvpe(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  // Also from the parent, so that SignalGroup right after the constructor
  // cannot race the child's own setpgid.
  if (own_group) ::setpgid(pid_, pid_);
  ::close(out_fd);
  if (err_fd != out_fd) ::close(err_fd);
}

Process::~Process() {
  if (pid_ > 0 && exit_code_ < 0) {
    if (options_.own_process_group) ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (!private_dir_.empty()) {
    (void)!std::system(("rm -rf '" + private_dir_ + "'").c_str());
  }
}

int Process::Wait(milliseconds timeout) {
  if (exit_code_ >= 0) return exit_code_;
  WaitUntil(
      [&] {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
        exit_code_ = ExitCodeOf(status);
        signaled_ = WIFSIGNALED(status);
        return true;
      },
      timeout, milliseconds(5));
  return exit_code_;
}

void Process::Signal(int sig) {
  if (exit_code_ < 0) ::kill(pid_, sig);
}

void Process::SignalGroup(int sig) {
  if (options_.own_process_group) {
    ::kill(-pid_, sig);
  } else {
    Signal(sig);
  }
}

int Process::Stop(milliseconds grace) {
  SignalGroup(SIGTERM);
  if (Wait(grace) >= 0) return exit_code_;
  SignalGroup(SIGKILL);
  Signal(SIGKILL);
  return Wait(milliseconds(10000));
}

std::string Process::Stdout() const { return ReadFile(out_); }

std::string Process::Stderr() const {
  return err_.empty() ? "" : ReadFile(err_);
}

std::string Process::Output() const {
  if (err_.empty()) return "--- output\n" + Stdout();
  return "--- stdout\n" + Stdout() + "--- stderr\n" + Stderr();
}

bool Process::WaitForOutput(const std::string& part, milliseconds timeout) {
  bool seen = false;
  WaitUntil(
      [&] {
        seen = Stdout().find(part) != std::string::npos ||
               Stderr().find(part) != std::string::npos;
        return seen || !Running();
      },
      timeout, milliseconds(20));
  // One more look: the child may have printed it just before it exited.
  return seen || Stdout().find(part) != std::string::npos ||
         Stderr().find(part) != std::string::npos;
}

CommandResult RunProcess(ProcessOptions options, milliseconds timeout) {
  Process p(std::move(options));
  CommandResult r;
  r.exit_code = p.Wait(timeout);
  if (r.exit_code < 0) {
    p.Stop(milliseconds(5000));
    r.exit_code = 124;
  }
  r.output = p.Stdout();
  r.error = p.Stderr();
  return r;
}

CommandResult RunShell(const std::string& command, milliseconds timeout,
                       const std::map<std::string, std::string>& env,
                       bool merge_stderr) {
  ProcessOptions o;
  o.argv = {"/bin/sh", "-c", command};
  o.env = env;
  o.name = "shell";
  o.merge_stderr = merge_stderr;
  return RunProcess(std::move(o), timeout);
}

}  // namespace ddprun::testing
