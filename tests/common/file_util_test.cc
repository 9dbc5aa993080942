// common/file_util.h on real files in a temporary directory.
#include "ddprun_catch.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_util.h"

namespace ddprun {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ddprun_file_util_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { (void)!system(("rm -rf " + path_).c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
  }
  return names;
}

}  // namespace

TEST_CASE("WriteFully: writes everything, reports a closed pipe",
          "[common][file]") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const std::string text(1000, 'x');
  REQUIRE(WriteFully(fds[1], text).ok());
  std::string got(text.size(), '\0');
  REQUIRE(read(fds[0], got.data(), got.size()) ==
          static_cast<ssize_t>(text.size()));
  CHECK(got == text);
  close(fds[0]);
  signal(SIGPIPE, SIG_IGN);
  Status broken = WriteFully(fds[1], "more");
  CHECK_FALSE(broken.ok());
  CHECK(broken.message().find("write") != std::string::npos);
  close(fds[1]);
}

TEST_CASE("WriteFileAtomically: writes, replaces, leaves no temporary file",
          "[common][file]") {
  TempDir dir;
  const std::string path = dir.path() + "/state.json";
  REQUIRE(WriteFileAtomically(path, {"{\"a\":", "1}"}).ok());
  CHECK(Read(path) == "{\"a\":1}");
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);
  REQUIRE(WriteFileAtomically(path, {"second"}).ok());
  CHECK(Read(path) == "second");
  CHECK(Names(dir.path()) == std::vector<std::string>{"state.json"});
  // Without the fsyncs (run pictures): the same replacement, nothing left.
  AtomicWriteOptions not_durable;
  not_durable.durable = false;
  REQUIRE(WriteFileAtomically(path, {"third"}, not_durable).ok());
  CHECK(Read(path) == "third");
  CHECK(Names(dir.path()) == std::vector<std::string>{"state.json"});
}

TEST_CASE("WriteFileAtomically: the hook sees the whole file before rename",
          "[common][file]") {
  TempDir dir;
  const std::string path = dir.path() + "/ckpt.pt";
  REQUIRE(WriteFileAtomically(path, {"old"}).ok());
  AtomicWriteOptions options;
  std::string seen_tmp;
  std::string seen_text;
  std::string target_then;
  options.before_rename = [&](const std::string& tmp) {
    seen_tmp = tmp;
    seen_text = Read(tmp);
    target_then = Read(path);
  };
  REQUIRE(WriteFileAtomically(path, {"new ", "payload"}, options).ok());
  CHECK(seen_tmp.rfind(path + ".tmp.", 0) == 0);
  CHECK(seen_text == "new payload");
  CHECK(target_then == "old");  // untouched until the rename
  CHECK(Read(path) == "new payload");
}

TEST_CASE("WriteFileAtomically: an error names the step and keeps the target",
          "[common][file]") {
  TempDir dir;
  const std::string missing = dir.path() + "/no/such/dir/file";
  Status s = WriteFileAtomically(missing, {"x"});
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == StatusCode::kNotFound);
  CHECK(s.message().rfind("create " + missing + ".tmp.", 0) == 0);
  // A directory in the way of the rename: the temporary file is removed.
  const std::string blocked = dir.path() + "/blocked";
  REQUIRE(mkdir(blocked.c_str(), 0755) == 0);
  REQUIRE(mkdir((blocked + "/x").c_str(), 0755) == 0);
  Status r = WriteFileAtomically(blocked, {"x"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().rfind("rename " + blocked + ".tmp.", 0) == 0);
  CHECK(Names(dir.path()) == std::vector<std::string>{"blocked"});
}

TEST_CASE(
    "WriteFileAtomically: a symlink planted at the temporary name is not "
    "written through",
    "[common][file]") {
  TempDir dir;
  const std::string path = dir.path() + "/ckpt.pt";
  const std::string victim = dir.path() + "/victim";
  std::ofstream(victim) << "precious";
  const std::string planted = path + ".tmp." + std::to_string(getpid());
  REQUIRE(symlink(victim.c_str(), planted.c_str()) == 0);
  std::string used;
  AtomicWriteOptions options;
  options.before_rename = [&](const std::string& tmp) { used = tmp; };
  REQUIRE(WriteFileAtomically(path, {"new"}, options).ok());
  CHECK(Read(victim) == "precious");
  CHECK(used == planted + ".1");
  struct stat st {};
  REQUIRE(lstat(path.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK(Read(path) == "new");
  REQUIRE(lstat(planted.c_str(), &st) == 0);  // not ours: left alone
  CHECK(S_ISLNK(st.st_mode));
}

TEST_CASE(
    "RemoveAbandonedTempFile: a crashed writer's file goes, a write in "
    "flight and a symlink stay",
    "[common][file]") {
  TempDir dir;
  const std::string crashed = dir.path() + "/a.pt.tmp.99999999";
  std::ofstream(crashed) << "torn";
  CHECK(RemoveAbandonedTempFile(crashed));
  CHECK(access(crashed.c_str(), F_OK) != 0);
  const std::string link = dir.path() + "/b.pt.tmp.1";
  REQUIRE(symlink("/etc/hostname", link.c_str()) == 0);
  CHECK_FALSE(RemoveAbandonedTempFile(link));
  CHECK_FALSE(RemoveAbandonedTempFile(dir.path() + "/missing.tmp.1"));
  // Another writer between its fsync and its rename (another job sharing
  // the folder): its file stays and its rename succeeds.
  const std::string path = dir.path() + "/c.pt";
  bool kept = false;
  AtomicWriteOptions options;
  options.before_rename = [&](const std::string& tmp) {
    kept = !RemoveAbandonedTempFile(tmp) && access(tmp.c_str(), F_OK) == 0;
  };
  REQUIRE(WriteFileAtomically(path, {"in flight"}, options).ok());
  CHECK(kept);
  CHECK(Read(path) == "in flight");
  CHECK(Names(dir.path()).size() == 2);  // c.pt and the symlink
}

TEST_CASE(
    "ReadRegularFile: reads a file, refuses a FIFO without blocking and a "
    "file over the limit",
    "[common][file]") {
  TempDir dir;
  const std::string plain = dir.path() + "/plain";
  std::ofstream(plain) << "12 steps";
  StatusOr<std::string> text = ReadRegularFile(plain, 100);
  REQUIRE(text.ok());
  CHECK(*text == "12 steps");
  CHECK(ReadRegularFile(plain, 8).ok());
  StatusOr<std::string> big = ReadRegularFile(plain, 7);
  REQUIRE_FALSE(big.ok());
  CHECK(big.status().code() == StatusCode::kResourceExhausted);
  CHECK(big.status().message() == plain + ": 8 bytes, over the limit of 7");
  const std::string fifo = dir.path() + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  StatusOr<std::string> blocked = ReadRegularFile(fifo, 100);
  REQUIRE_FALSE(blocked.ok());
  CHECK(blocked.status().message() == fifo + ": not a regular file");
  CHECK_FALSE(ReadRegularFile(dir.path(), 100).ok());
  StatusOr<std::string> missing = ReadRegularFile(dir.path() + "/no", 100);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
  // /dev/zero never ends: refused as a device, not read.
  CHECK_FALSE(ReadRegularFile("/dev/zero", 100).ok());
}

TEST_CASE("Path helpers: Dirname, Basename, FindOnPath", "[common][file]") {
  CHECK(Dirname("a/b/c") == "a/b");
  CHECK(Dirname("c") == ".");
  CHECK(Dirname("/c") == "/");
  CHECK(Basename("a/b/c") == "c");
  CHECK(Basename("c") == "c");
  CHECK(FindOnPath("sh", "/nonexistent:/bin") == "/bin/sh");
  CHECK(FindOnPath("sh", "/nonexistent") == "");
  CHECK(FindOnPath("/bin/sh", "") == "/bin/sh");
  CHECK(IsExecutableFile("/bin/sh"));
  TempDir dir;
  const std::string plain = dir.path() + "/plain";
  std::ofstream(plain) << "x";
  CHECK_FALSE(IsExecutableFile(plain));
  CHECK_FALSE(IsExecutableFile(dir.path()));
}

}  // namespace ddprun
