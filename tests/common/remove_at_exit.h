// Scratch files and directories of a test process, removed when it exits.
//
// A test run leaves nothing under /tmp: every test binary together made
// about 40 MB per run of trainer outputs, and a CI machine ran out of disk
// with the leftovers of earlier runs. Set DDPRUN_KEEP_TEST_DIRS=1 to keep
// them for a post-mortem (their paths are printed at exit then).
//
// Removal happens in a static destructor, i.e. at a normal exit (Catch2's
// main returning, std::exit); a test binary killed by a signal leaves its
// paths behind. Thread-safe; header-only so Torch-free and Torch tests share
// it.
#ifndef DDPRUN_TESTS_COMMON_REMOVE_AT_EXIT_H_
#define DDPRUN_TESTS_COMMON_REMOVE_AT_EXIT_H_

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>

namespace ddprun::testing {

class ScratchPaths {
 public:
  static ScratchPaths& Get() {
    static ScratchPaths paths;
    return paths;
  }

  void Add(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    paths_.insert(path);
  }

  ~ScratchPaths() {
    const char* keep = std::getenv("DDPRUN_KEEP_TEST_DIRS");
    const bool keep_all =
        keep != nullptr && *keep != '\0' && std::string(keep) != "0";
    for (const std::string& path : paths_) {
      if (keep_all) {
        std::fprintf(stderr, "kept test scratch: %s\n", path.c_str());
        continue;
      }
      std::error_code ignored;  // already gone is fine
      std::filesystem::remove_all(path, ignored);
    }
  }

 private:
  ScratchPaths() = default;
  std::mutex mu_;
  std::set<std::string> paths_;
};

// Registers `path` (a file or a directory tree) for removal at exit and
// returns it, so a helper can end with `return RemoveAtExit(dir);`.
inline const std::string& RemoveAtExit(const std::string& path) {
  ScratchPaths::Get().Add(path);
  return path;
}

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_COMMON_REMOVE_AT_EXIT_H_
