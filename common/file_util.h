#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/common/status.h"

// Files and paths, shared by the launcher and the worker runtime. Pure
// functions of the filesystem; thread-safe. Errors name the step and the
// file ("write /x/y.tmp.42: No space left on device").
namespace ddprun {

// Writes all of `data` to `fd`, retrying short writes and EINTR. Errors:
// the errno of the failed write(2) (ErrnoStatus, "write: ...").
Status WriteFully(int fd, std::string_view data);

// fsync(2) of a directory, so that a rename or create in it survives a
// crash.
Status FsyncDir(const std::string& dir);

struct AtomicWriteOptions {
  int mode = 0644;
  // false: no fsync of the file or the directory. Readers still see the old
  // file or the whole new one, but a crash of the machine may lose the
  // write: for files that are made again anyway (pictures of a run).
  bool durable = true;
  // Test hook: runs once the temporary file is complete, synced and
  // closed, before it is renamed over the target.
  std::function<void(const std::string& tmp_path)> before_rename;
};

// Replaces `path` with the concatenation of `pieces` so that a reader, or a
// crash at any point, sees either the old file or the whole new one: writes
// `<path>.tmp.<pid>` in the same directory, fsyncs and closes it (NFS
// reports write errors only at close), renames it over `path` and fsyncs
// the directory. On error the temporary file is removed (a full disk keeps
// no partial file) and `path` is untouched, unless only the final
// directory fsync failed.
Status WriteFileAtomically(const std::string& path,
                           const std::vector<std::string_view>& pieces,
                           const AtomicWriteOptions& options = {});

// "a/b/c" -> "a/b"; "c" -> "."; "/c" -> "/".
std::string Dirname(const std::string& path);
// "a/b/c" -> "c".
std::string Basename(const std::string& path);
// The canonical absolute path (symlinks resolved), "" when it does not exist.
std::string RealPath(const std::string& path);
// The current directory, "." when it cannot be read.
std::string CurrentDir();
// A regular file this process may execute.
bool IsExecutableFile(const std::string& path);
// The executable `name` would run as: `name` itself when it contains '/',
// else the first executable regular file `dir/name` for dir in `path`
// (colon-separated, empty entries = "."). "" when none.
std::string FindOnPath(const std::string& name, const std::string& path);

}  // namespace ddprun
