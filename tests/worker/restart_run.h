// Runs tests/worker/restart_agent.cc (the agent half of restart scope
// "failed" as a stand-in) and reads back what it says: which process ran
// each rank first and last, how each ended, how long each heal took. Shared
// by the worker's and the trainers' restart scope tests. Torch-free.
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace ddprun::testing {

struct RestartRun {
  CommandResult result;  // the stand-in's exit code and lines
  std::string out;       // its --out folder (the workers' logs)
  std::map<int, int> first_pid, final_pid, final_exit, final_generation;
  std::vector<double> heal_seconds;  // per healed generation
  int killed = 0;                    // "killed rank" lines

  // Every worker's log, labelled, for failure messages.
  std::string Logs() const {
    std::string text = result.output;
    for (const std::string& name : ListDir(out)) {
      if (name.size() > 4 && name.substr(name.size() - 4) == ".out") {
        text += "\n--- " + name + "\n" + ReadFile(out + "/" + name);
      }
    }
    return text;
  }
};

// `agent` --out OUT `args` under a deadline of `timeout_s` (its own
// --timeout should be shorter).
inline RestartRun RunRestartAgent(const std::string& agent,
                                  const std::string& out,
                                  const std::string& args, int timeout_s) {
  RestartRun run;
  run.out = out;
  run.result = RunShell(agent + " --out " + out + " " + args,
                        std::chrono::seconds(timeout_s));
  std::istringstream lines(run.result.output);
  std::string line;
  while (std::getline(lines, line)) {
    int rank = 0, pid = 0, generation = 0, code = 0;
    double seconds = 0;
    if (std::sscanf(line.c_str(),
                    "agent: final rank %d pid %d generation %d exit %d", &rank,
                    &pid, &generation, &code) == 4) {
      run.final_pid[rank] = pid;
      run.final_exit[rank] = code;
      run.final_generation[rank] = generation;
    } else if (std::sscanf(line.c_str(), "agent: rank %d pid %d generation %d",
                           &rank, &pid, &generation) == 3 &&
               generation == 0) {
      run.first_pid[rank] = pid;
    } else if (std::sscanf(line.c_str(), "agent: generation %d healed in %lf s",
                           &generation, &seconds) == 2) {
      run.heal_seconds.push_back(seconds);
    } else if (line.rfind("agent: killed rank", 0) == 0) {
      ++run.killed;
    }
  }
  return run;
}

}  // namespace ddprun::testing
