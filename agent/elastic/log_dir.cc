#include "agent/elastic/log_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <vector>

namespace ddprun::agent {
namespace fs = std::filesystem;

namespace {

StatusOr<std::string> MakeTempDir(const std::string& parent,
                                  const std::string& prefix) {
  std::string templ = parent + "/" + prefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    return ErrnoStatus("cannot create a directory in " + parent, errno);
  }
  return std::string(buf.data());
}

}  // namespace

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) {
    return InternalError("cannot create directory " + path + ": " +
                         ec.message());
  }
  return Status::Ok();
}

StatusOr<RunLogDir> MakeRunLogDir(const std::string& log_dir,
                                  const std::string& run_id) {
  RunLogDir dir;
  if (log_dir == "/dev/null") return dir;
  if (log_dir.empty()) {
    const char* tmp = ::getenv("TMPDIR");
    DDP_ASSIGN_OR_RETURN(
        dir.temp_root,
        MakeTempDir(tmp != nullptr && *tmp ? tmp : "/tmp", "torchelastic_"));
    StatusOr<std::string> run = MakeTempDir(dir.temp_root, run_id + "_");
    if (!run.ok()) RemoveTree(dir.temp_root);
    DDP_ASSIGN_OR_RETURN(dir.path, std::move(run));
    return dir;
  }
  std::error_code ec;
  if (fs::exists(log_dir, ec) && !fs::is_directory(log_dir, ec)) {
    return InvalidArgumentError("--log_dir " + log_dir +
                                ": exists and is not a directory");
  }
  Status made = MakeDirs(log_dir);
  if (!made.ok()) return InvalidArgumentError("--log_dir: " + made.message());
  StatusOr<std::string> run = MakeTempDir(log_dir, run_id + "_");
  if (!run.ok()) {
    return InvalidArgumentError("--log_dir: " + run.status().message());
  }
  dir.path = *run;
  return dir;
}

bool HasErrorFile(const std::string& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().filename() == "error.json") return true;
  }
  return false;
}

void RemoveTree(const std::string& path) {
  std::error_code ignored;
  fs::remove_all(path, ignored);
}

Status RecreateDir(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return InternalError("cannot remove " + path + ": " + ec.message());
  return MakeDirs(path);
}

}  // namespace ddprun::agent
