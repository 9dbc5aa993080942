#include "tests/chaos/chaos_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace ddprun::chaos {
namespace {

using multinode::ReadFile;

// "key=value" fields of one event line after its kind.
std::map<std::string, std::string> Fields(std::istringstream& in) {
  std::map<std::string, std::string> f;
  std::string word;
  while (in >> word) {
    size_t eq = word.find('=');
    if (eq != std::string::npos) f[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return f;
}

long Num(const std::map<std::string, std::string>& f, const char* key) {
  auto it = f.find(key);
  return it == f.end() ? -1 : std::atol(it->second.c_str());
}

std::map<std::string, std::string> EnvironOf(int pid) {
  std::map<std::string, std::string> env;
  std::string raw = ReadFile("/proc/" + std::to_string(pid) + "/environ");
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    std::string kv = raw.substr(start, end - start);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    start = end + 1;
  }
  return env;
}

// State letter and parent of a process from /proc/<pid>/stat ('\0' if gone).
std::pair<char, int> StateAndParent(int pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return {'\0', 0};
  std::istringstream rest(stat.substr(paren + 2));
  char state = '\0';
  int ppid = 0;
  rest >> state >> ppid;
  return {state, ppid};
}

std::vector<int> AllPids() {
  std::vector<int> pids;
  for (const std::string& name : multinode::ListDir("/proc")) {
    if (name.find_first_not_of("0123456789") == std::string::npos) {
      pids.push_back(std::atoi(name.c_str()));
    }
  }
  return pids;
}

// Socket inodes in LISTEN state (st == 0A) in /proc/net/tcp{,6}.
std::set<std::string> ListeningInodes() {
  std::set<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream in(ReadFile(table));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      if (f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >>
              timeout >> inode &&
          st == "0A") {
        inodes.insert(inode);
      }
    }
  }
  return inodes;
}

std::string Slurp(const std::string& path) { return ReadFile(path); }

}  // namespace

double WallNow() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<Event> ReadEvents(const std::string& out_dir) {
  std::vector<Event> events;
  std::istringstream lines(Slurp(out_dir + "/events"));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    Event e;
    in >> e.kind;
    if (e.kind == "saved") in >> e.step;
    auto f = Fields(in);
    if (f.count("t") == 0) continue;  // a line being written
    e.t = std::atof(f["t"].c_str());
    e.pid = static_cast<int>(Num(f, "pid"));
    if (e.kind == "start") {
      e.attempt = static_cast<int>(Num(f, "attempt"));
      e.world = static_cast<int>(Num(f, "world"));
      e.step = Num(f, "resume");
    } else if (e.kind == "fail") {
      e.step = Num(f, "step");
    }
    events.push_back(e);
  }
  return events;
}

std::optional<Result> ReadResult(const std::string& out_dir) {
  std::istringstream in(Slurp(out_dir + "/result"));
  Result r;
  if (!std::getline(in, r.head) || r.head.empty()) return std::nullopt;
  double v;
  while (in >> v) r.params.push_back(v);
  if (r.params.empty()) return std::nullopt;
  return r;
}

double MaxAbsDiff(const Result& a, const Result& b) {
  if (a.params.size() != b.params.size()) {
    return std::numeric_limits<double>::infinity();
  }
  double m = 0;
  for (size_t i = 0; i < a.params.size(); ++i) {
    m = std::max(m, std::fabs(a.params[i] - b.params[i]));
  }
  return m;
}

std::string Fnv(const Result& r) {
  size_t at = r.head.find("fnv=");
  return at == std::string::npos ? "" : r.head.substr(at + 4);
}

std::optional<Result> Baseline(int world, int64_t steps) {
  struct stat st;
  if (::stat(DDPRUN_CHAOS_WORKLOAD, &st) != 0) return std::nullopt;
  const std::string cache = std::string(DDPRUN_BIN_DIR) + "/../chaos_baseline";
  ::mkdir(cache.c_str(), 0755);
  const std::string key = std::to_string(st.st_mtim.tv_sec) + "_" +
                          std::to_string(st.st_size) + "_w" +
                          std::to_string(world) + "_s" + std::to_string(steps) +
                          "_gloo";
  const std::string dir = cache + "/" + key;
  int lock =
      ::open((cache + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock >= 0) ::flock(lock, LOCK_EX);
  std::optional<Result> result = ReadResult(dir);
  if (!result) {
    multinode::TempDir tmp;
    Workload w;
    w.steps = steps;
    w.ckpt_every = 0;
    w.step_ms = 0;
    std::vector<std::string> argv = multinode::Ddprun(
        {"--standalone", "--nproc_per_node=" + std::to_string(world),
         "--no_python", DDPRUN_CHAOS_WORKLOAD, "--out", tmp.path(),
         "--ckpt_dir", tmp.path() + "/ckpt", "--steps", std::to_string(steps),
         "--ckpt_every", "0", "--step_ms", "0"});
    // The scenarios' jobs span two agents, so their gradients go over Gloo
    // (ranks on several "hosts" never share memory); so must the baseline's,
    // whose ranks would otherwise sum through shared memory, in another
    // order (bit-exact comparisons, 4 ranks).
    Child run(tmp.path(), "baseline", argv,
              {{"OMP_NUM_THREADS", "1"}, {"DDPRUN_SHM_ALLREDUCE", "0"}});
    if (run.Wait(120s) == 0) {
      result = ReadResult(tmp.path());
      if (result) {
        (void)!std::system(("mkdir -p " + dir + " && cp " + tmp.path() +
                            "/result " + dir + "/result")
                               .c_str());
      }
    } else {
      std::fprintf(stderr, "chaos baseline run failed:\n%s\n",
                   run.Output().c_str());
    }
  }
  if (lock >= 0) ::close(lock);
  return result;
}

std::vector<MarkedProcess> MarkedProcesses(const std::string& marker) {
  std::vector<MarkedProcess> found;
  const std::string needle = "CHAOS_MARKER=" + marker;
  for (int pid : AllPids()) {
    const std::string raw =
        ReadFile("/proc/" + std::to_string(pid) + "/environ");
    if (raw.find(needle) == std::string::npos) continue;
    auto [state, ppid] = StateAndParent(pid);
    if (state == '\0' || state == 'Z' || state == 'X') continue;
    MarkedProcess p;
    p.pid = pid;
    p.ppid = ppid;
    p.env = EnvironOf(pid);
    if (p.env["CHAOS_MARKER"] != marker) continue;
    p.comm = ReadFile("/proc/" + std::to_string(pid) + "/comm");
    while (!p.comm.empty() && p.comm.back() == '\n') p.comm.pop_back();
    found.push_back(std::move(p));
  }
  return found;
}

ProcessResources ResourcesOf(int pid) {
  ProcessResources r;
  const std::string base = "/proc/" + std::to_string(pid);
  std::set<std::string> listening = ListeningInodes();
  for (const std::string& fd : multinode::ListDir(base + "/fd")) {
    ++r.fds;
    char target[256] = {0};
    ssize_t n =
        ::readlink((base + "/fd/" + fd).c_str(), target, sizeof(target) - 1);
    std::string t(target, n > 0 ? static_cast<size_t>(n) : 0);
    if (t.rfind("socket:[", 0) == 0 &&
        listening.count(t.substr(8, t.size() - 9))) {
      ++r.listening_tcp;
    }
  }
  r.threads = static_cast<int>(multinode::ListDir(base + "/task").size());
  for (int p : AllPids()) {
    auto [state, ppid] = StateAndParent(p);
    if (ppid == pid && state != 'Z' && state != 'X' && state != '\0') {
      ++r.children;
    }
  }
  return r;
}

Scenario::Scenario(const std::string& name) {
  static int n = 0;
  marker_ = "chaos-" + name + "-" + std::to_string(::getpid()) + "-" +
            std::to_string(n++);
  out_ = dir() + "/out";
  ckpt_ = dir() + "/ckpt";
  ::mkdir(out_.c_str(), 0755);
  ::mkdir(ckpt_.c_str(), 0755);
}

Scenario::~Scenario() {
  // Agents first (their workers die with them), then stragglers of any
  // kind (a worker of a kill -9'd agent, a stopped process), then servers.
  agents_.clear();
  multinode::WaitUntil(
      [&] {
        std::vector<MarkedProcess> left = MarkedProcesses(marker_);
        for (const MarkedProcess& p : left) {
          ::kill(p.pid, SIGKILL);
          ::kill(p.pid, SIGCONT);
        }
        return left.empty();
      },
      1s, 20ms);
  servers_.clear();
}

std::map<std::string, std::string> Scenario::Env(
    const std::string& node) const {
  std::map<std::string, std::string> env = {
      {"CHAOS_MARKER", marker_},
      {"CHAOS_NODE", node},
      {"OMP_NUM_THREADS", "1"},
      // A lost peer must surface as an error, never as a long hang.
      {"DDPRUN_COLLECTIVE_TIMEOUT_S", "30"},
      {"DDPRUN_STORE_TIMEOUT_S", "30"}};
  for (const auto& [k, v] : extra_env_) env[k] = v;
  return env;
}

std::vector<std::string> WorkloadArgs(const Scenario& s, const Workload& w) {
  std::vector<std::string> args = {DDPRUN_CHAOS_WORKLOAD,
                                   "--out",
                                   s.out(),
                                   "--ckpt_dir",
                                   s.ckpt(),
                                   "--steps",
                                   std::to_string(w.steps),
                                   "--ckpt_every",
                                   std::to_string(w.ckpt_every),
                                   "--step_ms",
                                   std::to_string(w.step_ms)};
  args.insert(args.end(), w.extra.begin(), w.extra.end());
  return args;
}

Child& Scenario::StartAgent(const std::string& node,
                            const std::vector<std::string>& flags,
                            const Workload& w,
                            const std::vector<std::string>& prefix) {
  std::vector<std::string> argv = prefix;
  std::vector<std::string> ddprun = flags;
  ddprun.push_back("--no_python");
  for (const std::string& a : WorkloadArgs(*this, w)) ddprun.push_back(a);
  for (const std::string& a : multinode::Ddprun(ddprun)) argv.push_back(a);
  agents_.push_back(std::make_unique<Child>(dir(), node, argv, Env(node)));
  log_names_.push_back(node);
  return *agents_.back();
}

multinode::RendezvousServerProcess& Scenario::StartServer(
    int port, const std::vector<std::string>& prefix, const std::string& host) {
  servers_.push_back(std::make_unique<multinode::RendezvousServerProcess>(
      dir(), port, prefix, host));
  return *servers_.back();
}

int Scenario::WorkerPid(const std::string& node, int local_rank,
                        std::chrono::milliseconds timeout) {
  int pid = 0;
  multinode::WaitUntil(
      [&] {
        int best_attempt = -1;
        for (const MarkedProcess& p : MarkedProcesses(marker_)) {
          if (p.comm != "chaos_workload") continue;
          auto get = [&p](const char* k) {
            auto it = p.env.find(k);
            return it == p.env.end() ? std::string() : it->second;
          };
          if (get("CHAOS_NODE") != node ||
              get("LOCAL_RANK") != std::to_string(local_rank)) {
            continue;
          }
          int attempt = std::atoi(get("TORCHELASTIC_RESTART_COUNT").c_str());
          if (attempt > best_attempt) {
            best_attempt = attempt;
            pid = p.pid;
          }
        }
        return pid != 0;
      },
      timeout);
  return pid;
}

bool Scenario::WaitForEvents(
    const std::function<bool(const std::vector<Event>&)>& pred,
    std::chrono::milliseconds timeout) {
  return multinode::WaitUntil([&] { return pred(ReadEvents(out_)); }, timeout);
}

bool Scenario::WaitSaved(int64_t step, std::chrono::milliseconds timeout) {
  return WaitForEvents(
      [step](const std::vector<Event>& events) {
        for (const Event& e : events) {
          if (e.kind == "saved" && e.step >= step) return true;
        }
        return false;
      },
      timeout);
}

int64_t Scenario::LastSaved() const {
  int64_t last = 0;
  for (const Event& e : ReadEvents(out_)) {
    if (e.kind == "saved") last = std::max(last, e.step);
  }
  return last;
}

std::optional<Event> Scenario::StartAfter(double t0) const {
  for (const Event& e : ReadEvents(out_)) {
    if (e.kind == "start" && e.t > t0) return e;
  }
  return std::nullopt;
}

std::optional<double> Scenario::RestartedAfter(double t0) const {
  std::optional<Event> e = StartAfter(t0);
  if (!e) return std::nullopt;
  return e->t - t0;
}

bool Scenario::NoOrphans(std::chrono::milliseconds timeout) const {
  return multinode::WaitUntil([&] { return MarkedProcesses(marker_).empty(); },
                              timeout);
}

std::string Scenario::Logs() const {
  std::string logs = "--- events\n" + Slurp(out_ + "/events");
  for (size_t i = 0; i < agents_.size(); ++i) {
    logs += "--- agent " + log_names_[i] + "\n" + agents_[i]->Output();
  }
  for (const auto& s : servers_) logs += "--- server\n" + s->child().Output();
  return logs;
}

void PrintRecovery(const std::string& what, double seconds) {
  std::printf("chaos: %s recovered in %.2f s\n", what.c_str(), seconds);
  std::fflush(stdout);
}

}  // namespace ddprun::chaos
