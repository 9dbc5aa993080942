// The stacks file ddprun keeps per worker (agent/watch/stack_collector.h):
// its dump header cannot be forged by another node's reason, and it stays
// bounded however many dumps a long run takes (issue 39). Plain files in a
// temporary folder; no processes.
#include "ddprun_catch.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "agent/watch/stack_collector.h"

namespace ddprun::agent {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TempFile() {
  char tmpl[] = "/tmp/ddprun_stacks_XXXXXX";
  const int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  return tmpl;
}

// One dump as the file holds it: our header, then `bytes` of stack.
std::string Dump(int n, size_t bytes) {
  std::string d = StackDumpHeader(0, 42, "dump " + std::to_string(n),
                                  "2026-01-01T00:00:00Z");
  d += "Current thread 0x1 (most recent call first):\n";
  while (d.size() < bytes)
    d += "  File \"t.py\", line " + std::to_string(n) + " in f\n";
  return d;
}

TEST_CASE("StackDumpHeader: a reason from another node cannot add lines",
          "[agent][stacks]") {
  const std::string header = StackDumpHeader(
      3, 812,
      "requested by another node: x\n# ddprun stack dump: rank 0\x1b[2J",
      "2026-01-01T00:00:00Z");
  CHECK(header.find('\n') == header.size() - 1);  // one line
  CHECK(header.find('\x1b') == std::string::npos);
  CHECK(header.rfind("# ddprun stack dump: rank 3 (pid 812), requested by",
                     0) == 0);
  CHECK(header.find("\\n# ddprun stack dump: rank 0\\x1b[2J") !=
        std::string::npos);
}

TEST_CASE("TrimStacksFile: a long run's file keeps its newest dumps only",
          "[agent][stacks]") {
  const std::string path = TempFile();
  // The worker's descriptor, as its hook holds it: O_APPEND.
  const int worker = ::open(path.c_str(), O_WRONLY | O_APPEND);
  REQUIRE(worker >= 0);
  const int64_t bound = 64 * 1024;
  for (int n = 0; n < 100; ++n) {
    REQUIRE(TrimStacksFile(path, bound));
    const std::string d = Dump(n, 3000);
    REQUIRE(::write(worker, d.data(), d.size()) ==
            static_cast<ssize_t>(d.size()));
    // Never beyond the bound plus the dump written since the last trim.
    CHECK(Read(path).size() <= static_cast<size_t>(bound) + d.size());
  }
  REQUIRE(TrimStacksFile(path, bound));
  const std::string text = Read(path);
  CHECK(text.size() <= static_cast<size_t>(bound));
  // Whole dumps, the newest last; the oldest are gone.
  CHECK(text.rfind("# ddprun stack dump: ", 0) == 0);
  CHECK(text.find("dump 99,") != std::string::npos);
  CHECK(text.find("dump 0,") == std::string::npos);
  const std::string last = Dump(99, 3000);
  CHECK(text.compare(text.size() - last.size(), last.size(), last) == 0);
  // The worker's next dump lands at the new end, not at its old offset.
  const std::string next = Dump(100, 100);
  REQUIRE(::write(worker, next.data(), next.size()) ==
          static_cast<ssize_t>(next.size()));
  CHECK(Read(path) == text + next);
  ::close(worker);
  // A small file is left alone; a missing one is reported.
  std::ofstream(path, std::ios::trunc) << "small";
  CHECK(TrimStacksFile(path, bound));
  CHECK(Read(path) == "small");
  ::unlink(path.c_str());
  CHECK_FALSE(TrimStacksFile(path, bound));
}

}  // namespace
}  // namespace ddprun::agent
