#include "ddprun_catch.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/elastic/failure_report.h"

using ddprun::agent::DumpRootCauseErrorFile;
using ddprun::agent::FormatFailureTable;
using ddprun::agent::MakeProcessFailure;
using ddprun::agent::ProcessFailure;
using ddprun::agent::RootCauseIndex;

namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ddprun_fr_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { (void)!system(("rm -rf " + path_).c_str()); }
  std::string Write(const std::string& name, const std::string& content) {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << content;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A minimal torchrun-schema error file written at 1700000000.
const char kSmallErrorFile[] =
    R"({"message": {"message": "E", "extraInfo": {"py_callstack": "tb", )"
    R"("timestamp": "1700000000"}}})";

void UseUtc() {
  setenv("TZ", "UTC", 1);
  tzset();
}

}  // namespace

TEST_CASE("MakeProcessFailure: reads torchrun's error-file schema", "[agent]") {
  TempDir dir;
  std::string file =
      dir.Write("error.json",
                R"({"message": {"message": "ValueError: bad", "extraInfo": )"
                R"({"py_callstack": "Traceback:\n  f()\nValueError: bad", )"
                R"("timestamp": "1700000000"}}})");
  ProcessFailure f = MakeProcessFailure(1, 5, 4242, 1, file, 1.8e9);
  CHECK(f.error_file == file);
  CHECK(f.timestamp == 1700000000);
  CHECK(f.traceback == "Traceback:\n    f()\n  ValueError: bad");
  CHECK(f.global_rank == 5);
  CHECK(f.local_rank == 1);
}

TEST_CASE("MakeProcessFailure: message without py_callstack", "[agent]") {
  TempDir dir;
  std::string file = dir.Write(
      "e.json", R"({"message": {"message": "RuntimeError: x", "extraInfo": )"
                R"({"timestamp": 1700000001}}})");
  ProcessFailure f = MakeProcessFailure(0, 0, 1, 1, file, 1.8e9);
  CHECK(f.traceback == "RuntimeError: x");
  CHECK(f.timestamp == 1700000001);
}

TEST_CASE("MakeProcessFailure: tolerates the plain-string form", "[agent]") {
  TempDir dir;
  std::string file =
      dir.Write("e.json", R"({"message": "boom", "timestamp": 1600000000})");
  ProcessFailure f = MakeProcessFailure(0, 0, 1, 3, file, 1.8e9);
  CHECK(f.traceback == "boom");
  CHECK(f.timestamp == 1600000000);
  CHECK(f.error_file == file);
}

TEST_CASE("MakeProcessFailure: no file names the signal", "[agent]") {
  ProcessFailure killed =
      MakeProcessFailure(2, 2, 777, -9, "/nonexistent/error.json", 1.8e9);
  CHECK(killed.error_file == "<N/A>");
  CHECK(killed.traceback == "Signal 9 (SIGKILL) received by PID 777");
  CHECK(killed.timestamp == 1800000000);
  ProcessFailure exited =
      MakeProcessFailure(2, 2, 777, 3, "/nonexistent/error.json", 1.8e9);
  CHECK(exited.traceback ==
        "To enable traceback see: "
        "https://pytorch.org/docs/stable/elastic/errors.html");
}

TEST_CASE("MakeProcessFailure: malformed file is treated as missing",
          "[agent]") {
  TempDir dir;
  std::string file = dir.Write("e.json", "{not json");
  ProcessFailure f = MakeProcessFailure(0, 0, 9, -15, file, 1.8e9);
  CHECK(f.error_file == "<N/A>");
  CHECK(f.traceback == "Signal 15 (SIGTERM) received by PID 9");
}

TEST_CASE("RootCauseIndex: earliest timestamp, first on ties", "[agent]") {
  std::vector<ProcessFailure> f(3);
  f[0].timestamp = 30;
  f[1].timestamp = 10;
  f[2].timestamp = 10;
  CHECK(RootCauseIndex(f) == 1);
}

TEST_CASE("FormatFailureTable: torchrun's layout, one failure", "[agent]") {
  UseUtc();
  ProcessFailure f =
      MakeProcessFailure(1, 1, 12126, -9, "/nonexistent", 1795305688.0);
  std::string table = FormatFailureTable("sh", {f}, "vm");
  std::string border(54, '=');
  std::string section(54, '-');
  CHECK(table ==
        "\n" + border + "\nsh FAILED\n" + section +
            "\nFailures:\n  <NO_OTHER_FAILURES>\n" + section +
            "\nRoot Cause (first observed failure):\n"
            "[0]:\n"
            "  time      : 2026-11-22_00:01:28\n"
            "  host      : vm\n"
            "  rank      : 1 (local_rank: 1)\n"
            "  exitcode  : -9 (pid: 12126)\n"
            "  error_file: <N/A>\n"
            "  traceback : Signal 9 (SIGKILL) received by PID 12126\n" +
            border);
}

TEST_CASE("FormatFailureTable: root cause and other failures", "[agent]") {
  UseUtc();
  TempDir dir;
  std::string file = dir.Write("error.json", kSmallErrorFile);
  ProcessFailure early = MakeProcessFailure(1, 1, 20, 1, file, 0);
  ProcessFailure late = MakeProcessFailure(0, 0, 10, -15, "", 1700000005.0);
  std::string table = FormatFailureTable("train.py", {late, early}, "node-a");
  // Width is capped at 60 ('=' border) when the error-file path is long.
  std::string fail0 =
      "[0]:\n  time      : 2023-11-14_22:13:25\n  host      : node-a\n"
      "  rank      : 0 (local_rank: 0)\n  exitcode  : -15 (pid: 10)\n"
      "  error_file: <N/A>\n"
      "  traceback : Signal 15 (SIGTERM) received by PID 10";
  std::string fail1 =
      "[1]:\n  time      : 2023-11-14_22:13:20\n  host      : node-a\n"
      "  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 20)\n"
      "  error_file: " +
      file + "\n  traceback : tb";
  size_t width = 0;
  for (const std::string& block : {fail0, fail1}) {
    std::stringstream lines(block);
    for (std::string line; std::getline(lines, line);) {
      width = std::max(width, line.size());
    }
  }
  width = std::min<size_t>(width, 60);
  std::string border(width, '=');
  std::string section(width, '-');
  CHECK(table == "\n" + border + "\ntrain.py FAILED\n" + section +
                     "\nFailures:\n" + fail0 + "\n" + section +
                     "\nRoot Cause (first observed failure):\n" + fail1 + "\n" +
                     border);
}

TEST_CASE("DumpRootCauseErrorFile: adds errorCode like torchrun", "[agent]") {
  TempDir dir;
  std::string file = dir.Write("error.json", kSmallErrorFile);
  ProcessFailure f = MakeProcessFailure(0, 0, 20, 7, file, 0);
  std::string dest = dir.path() + "/agent_error.json";
  REQUIRE(DumpRootCauseErrorFile(f, dest).ok());
  auto j = nlohmann::json::parse(ReadFile(dest));
  CHECK(j["message"]["errorCode"] == 7);
  CHECK(j["message"]["message"] == "E");
  CHECK(j["message"]["extraInfo"]["py_callstack"] == "tb");
  // No child file: nothing is written.
  ProcessFailure none = MakeProcessFailure(0, 0, 20, -9, "", 0);
  std::string dest2 = dir.path() + "/none.json";
  REQUIRE(DumpRootCauseErrorFile(none, dest2).ok());
  CHECK(access(dest2.c_str(), F_OK) != 0);
}
