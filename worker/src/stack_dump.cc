#include "ddprun/worker/stack_dump.h"

#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ddprun::worker {
namespace {

constexpr int kMaxFrames = 64;
constexpr int kAnswerWaitMs = 200;

std::atomic<const char*> g_activity{nullptr};
std::atomic<int64_t> g_steps{0};
int g_fd = -1;
// The thread asked to write its stack now (0: none), and whether a dump
// runs (a second request while one does is ignored).
std::atomic<long> g_asked_tid{0};
std::atomic<bool> g_dumping{false};

long Tid() { return static_cast<long>(::syscall(SYS_gettid)); }

void Put(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    ssize_t w = ::write(g_fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

// Decimal without printf (not async-signal-safe).
void PutInt(int64_t v) {
  char buf[24];
  char* p = buf + sizeof(buf);
  *--p = '\0';
  const bool neg = v < 0;
  uint64_t u = neg ? static_cast<uint64_t>(-(v + 1)) + 1 : v;
  do {
    *--p = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (neg) *--p = '-';
  Put(p);
}

void WriteOwnStack(bool current) {
  Put("Thread ");
  PutInt(Tid());
  Put(current ? " (current):\n" : ":\n");
  void* frames[kMaxFrames];
  int n = ::backtrace(frames, kMaxFrames);
  // Frame 0 is this function, 1 the handler, 2 the signal trampoline.
  backtrace_symbols_fd(frames, n, g_fd);
  Put("\n");
}

void SleepMs(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  ::nanosleep(&ts, nullptr);
}

// Asks every other thread of the process for its stack, one at a time.
void AskOtherThreads(int sig) {
  const long self = Tid();
  const int pid = ::getpid();
  int dir = ::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  char buf[4096];
  for (;;) {
    long n = ::syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<struct dirent64*>(buf + off);
      off += d->d_reclen;
      long tid = std::strtol(d->d_name, nullptr, 10);
      if (tid <= 0 || tid == self) continue;
      g_asked_tid.store(tid);
      if (::syscall(SYS_tgkill, pid, tid, sig) != 0) {
        g_asked_tid.store(0);
        continue;  // exited meanwhile
      }
      int waited = 0;
      while (g_asked_tid.load() == tid && waited < kAnswerWaitMs) {
        SleepMs(1);
        ++waited;
      }
      if (g_asked_tid.exchange(0) == tid) {
        Put("Thread ");
        PutInt(tid);
        Put(": did not answer (the signal is blocked there)\n\n");
      }
    }
  }
  ::close(dir);
}

int g_signal = 0;

void OnSignal(int sig) {
  const int saved_errno = errno;
  if (g_asked_tid.load() == Tid()) {
    WriteOwnStack(false);
    g_asked_tid.store(0);
  } else if (!g_dumping.exchange(true)) {
    Put("# ddprun native stacks: pid ");
    PutInt(::getpid());
    Put(", doing ");
    const char* what = g_activity.load();
    Put(what != nullptr ? what : "no collective");
    Put(", step ");
    PutInt(g_steps.load());
    Put("\n");
    WriteOwnStack(true);
    AskOtherThreads(sig);
    Put("# end of native stacks\n");
    g_dumping.store(false);
  }
  errno = saved_errno;
}

bool Install() {
  const char* file = std::getenv("DDPRUN_STACKS_FILE");
  const char* sig = std::getenv("DDPRUN_STACKS_SIGNAL");
  if (file == nullptr || *file == '\0' || sig == nullptr) return false;
  const int signum = std::atoi(sig);
  if (signum <= 0 || signum >= NSIG) return false;
  g_fd = ::open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (g_fd < 0) return false;
  // backtrace() loads libgcc_s on its first call (malloc, dlopen): never in
  // the handler.
  void* warm[2];
  (void)::backtrace(warm, 2);
  g_signal = signum;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(signum, &sa, nullptr) != 0) {
    ::close(g_fd);
    g_fd = -1;
    return false;
  }
  return true;
}

}  // namespace

bool InstallStackDumpHandler() {
  static const bool installed = Install();
  return installed;
}

void SetActivity(const char* what) { g_activity.store(what); }
void NoteStep() { g_steps.fetch_add(1, std::memory_order_relaxed); }
int64_t Steps() { return g_steps.load(std::memory_order_relaxed); }

ActivityScope::ActivityScope(const char* what)
    : previous_(g_activity.exchange(what)) {}
ActivityScope::~ActivityScope() { g_activity.store(previous_); }

}  // namespace ddprun::worker
