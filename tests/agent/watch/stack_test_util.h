#pragma once

// Helpers of the stack-dump process tests (stack_dump_process_test,
// stack_multinode_process_test): Debian's python3 with torch running
// data/hang_worker.py under the real ddprun.

#include <dirent.h>

#include <fstream>
#include <string>

#include "tests/agent/process_harness.h"

namespace ddprun::test {

inline const std::string kPython = "/usr/bin/python3";
inline const std::string kHangWorker = kData + "/hang_worker.py";

// Stdout of a shell command, without the trailing newline.
inline std::string Capture(const std::string& command) {
  std::string out = ShellStdout(command);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Whether kPython has torch.distributed.
inline bool HaveTorch() {
  return Capture(kPython + " -c 'import torch.distributed as d; "
                           "print(d.is_available())' 2>/dev/null") == "True";
}

// The 1-based line of hang_worker.py that holds `marker`.
inline int LineOf(const std::string& marker) {
  std::ifstream in(kHangWorker);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find(marker) != std::string::npos) return n;
  }
  return -1;
}

// The only entry of `dir` (the run's <run_id>_XXXX folder), "" if none.
inline std::string OnlyEntry(const std::string& dir) {
  std::string found;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return found;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") found = dir + "/" + name;
  }
  ::closedir(d);
  return found;
}

inline bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

using testing::WaitForText;

}  // namespace ddprun::test
