#include "tests/multinode/multinode_util.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <regex>
#include <sstream>
#include <utility>

namespace ddprun::multinode {

TempDir::~TempDir() {
  // Workers of a kill -9'd agent (or of a failed test) outlive their agent.
  KillRecordedWorkers(path());
}

namespace {
testing::ProcessOptions ChildOptions(const std::string& dir,
                                     const std::string& name,
                                     std::vector<std::string> argv,
                                     std::map<std::string, std::string> env) {
  testing::ProcessOptions o;
  o.argv = std::move(argv);
  o.env = std::move(env);
  o.output_dir = dir;
  o.name = name;
  return o;
}
}  // namespace

Child::Child(const std::string& dir, const std::string& name,
             std::vector<std::string> argv,
             std::map<std::string, std::string> env)
    : testing::Process(
          ChildOptions(dir, name, std::move(argv), std::move(env))) {}

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

bool HaveTorch() {
  return access("/usr/bin/python3", X_OK) == 0 &&
         std::system(
             "/usr/bin/python3 -c 'import importlib.util as u, sys; "
             "sys.exit(u.find_spec(\"torch\") is None)' "
             ">/dev/null 2>&1") == 0;
}

}  // namespace ddprun::multinode
