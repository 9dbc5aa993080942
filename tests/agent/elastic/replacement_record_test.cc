// ReplacementRecord (agent/elastic/replacement_record.h) alone, on a real
// temporary directory: what it writes, where it moves the error file, and
// that its errors are Status values. The agent's use of it is in
// restart_scope_test.cc.

#include "ddprun_catch.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/elastic/replacement_record.h"

namespace ddprun::agent {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ddprun_rr_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { (void)!system(("rm -rf " + path_).c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

ProcessFailure Failure(const std::string& error_json) {
  ProcessFailure f;
  f.local_rank = 1;
  f.global_rank = 5;
  f.pid = 4242;
  f.exitcode = -SIGSEGV;
  f.error_json = error_json;
  f.timestamp = 1700000000;
  return f;
}

}  // namespace

TEST_CASE("ReplacementRecord: file names by generation",
          "[agent][replacement_record]") {
  CHECK(ReplacementRecord::FileName(3) == "replaced_g3.json");
  CHECK(ReplacementRecord::MovedErrorFileName(3) == "error.replaced_g3.json");
}

TEST_CASE("ReplacementRecord: begins with heal null, then healed",
          "[agent][replacement_record]") {
  TempDir dir;
  const std::string error =
      R"({"message": {"message": "E", "extraInfo": {"py_callstack": "tb", )"
      R"("timestamp": "1700000000"}}})";
  std::ofstream(dir.path() + "/error.json") << error;
  ReplacementRecord record(dir.path(), Failure(error), 3, "local rank 1 ...");
  CHECK(record.path() == dir.path() + "/replaced_g3.json");
  CHECK_FALSE(Exists(record.path()));  // the constructor writes nothing
  REQUIRE(record.Begin().ok());
  CHECK(record.moved_error_file() == dir.path() + "/error.replaced_g3.json");
  CHECK_FALSE(Exists(dir.path() + "/error.json"));
  CHECK(Slurp(record.moved_error_file()) == error);

  nlohmann::json j = nlohmann::json::parse(Slurp(record.path()));
  CHECK(j == nlohmann::json{{"rank", 5},
                            {"local_rank", 1},
                            {"generation", 3},
                            {"reason", "local rank 1 ..."},
                            {"pid", 4242},
                            {"exitcode", -SIGSEGV},
                            {"failed_at", 1700000000},
                            {"error", nlohmann::json::parse(error)},
                            {"heal", nullptr}});
  CHECK_FALSE(record.decided());

  REQUIRE(record.Healed(0, 1.25).ok());
  CHECK(record.decided());
  j = nlohmann::json::parse(Slurp(record.path()));
  CHECK(j["heal"] == nlohmann::json{{"source", 0}, {"seconds", 1.25}});
  CHECK(j["rank"] == 5);
  // No temporary file is left beside it.
  CHECK_FALSE(Exists(record.path() + ".tmp." + std::to_string(getpid())));
}

TEST_CASE("ReplacementRecord: without an error file, heal failed",
          "[agent][replacement_record]") {
  TempDir dir;
  ReplacementRecord record(dir.path(), Failure(""), 1, "r\xff");
  REQUIRE(record.Begin().ok());
  CHECK(record.moved_error_file().empty());
  nlohmann::json j = nlohmann::json::parse(Slurp(record.path()));
  CHECK_FALSE(j.contains("error"));
  CHECK(j["reason"] == "r\xef\xbf\xbd");  // not UTF-8: replaced, not thrown
  REQUIRE(record.HealFailed("did not heal").ok());
  j = nlohmann::json::parse(Slurp(record.path()));
  CHECK(j["heal"] == nlohmann::json{{"failed", "did not heal"}});
}

TEST_CASE("ReplacementRecord: errors are Status values",
          "[agent][replacement_record]") {
  ReplacementRecord record("/nonexistent/ddprun_rr", Failure(""), 1, "r");
  Status s = record.Begin();
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("/nonexistent/ddprun_rr/replaced_g1.json") !=
        std::string::npos);
  CHECK_FALSE(record.HealFailed("x").ok());
}

}  // namespace ddprun::agent
