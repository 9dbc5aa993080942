#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"

// Files and paths, shared by the launcher and the worker runtime. Pure
// functions of the filesystem; thread-safe. Errors name the step and the
// file ("write /x/y.tmp.42: No space left on device").
namespace ddprun {

// Writes all of `data` to `fd`, retrying short writes and EINTR. Errors:
// the errno of the failed write(2) (ErrnoStatus, "write: ...").
Status WriteFully(int fd, std::string_view data);
// The same, returning 0 or that errno (for WriteFileAtomicallyWith's
// writers).
int WriteFullyErrno(int fd, std::string_view data);

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
// a temporary file `<path>.tmp.<pid>` in the same directory (created new,
// O_EXCL|O_NOFOLLOW: a file or symlink already at that name is never
// written through; the next free `<path>.tmp.<pid>.<n>` is used), fsyncs
// and closes it (NFS reports write errors only at close), renames it over
// `path` and fsyncs the directory. The temporary file is flock'ed from its
// creation until the rename, so RemoveAbandonedTempFile() tells it from a
// crashed writer's. On error the temporary file is removed (a full disk
// keeps no partial file) and `path` is untouched, unless only the final
// directory fsync failed.
Status WriteFileAtomically(const std::string& path,
                           const std::vector<std::string_view>& pieces,
                           const AtomicWriteOptions& options = {});

// WriteFileAtomically with the content streamed by `write`, which writes
// to the temporary file's descriptor (e.g. a serializer's output) and
// returns 0 or the errno of its failure (reported as "write <tmp>: ...").
// `write` must not throw.
Status WriteFileAtomicallyWith(const std::string& path,
                               const std::function<int(int fd)>& write,
                               const AtomicWriteOptions& options = {});

// Removes `tmp_path`, a temporary file WriteFileAtomically() left behind
// when its writer died before the rename: a regular file whose lock no
// process holds. A write in flight (another job writing into the same
// folder, on this host or, where the file system has flock, another one)
// and anything that is not a regular file (a symlink) stay. True when it
// removed the file. Never blocks.
bool RemoveAbandonedTempFile(const std::string& tmp_path);

// The content of the regular file `path`, read without blocking on what is
// not one: a FIFO, a socket or a device planted at the path is refused
// before any read (opened O_NONBLOCK, checked with fstat). Symlinks are
// followed. Errors, each naming the path: NOT_FOUND (missing),
// FAILED_PRECONDITION ("not a regular file"), RESOURCE_EXHAUSTED (more than
// `max_bytes`; nothing beyond max_bytes + 1 is read), or the errno of the
// failed open/read.
StatusOr<std::string> ReadRegularFile(const std::string& path,
                                      size_t max_bytes);

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
