#include "ddprun/worker/shared_memory_group.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>
#include <thread>
#include <utility>

namespace ddprun::worker {

// Why alternating halves are enough (no third barrier per chunk): rank A
// fills its slot of half h for chunk j+2 right after it copied chunk j+1 out.
// Another rank B last touches half h when it copies chunk j out, before it
// arrives at chunk j+1's first barrier, which A has passed. So B is done
// with half h before A writes it. A broadcast chunk has one barrier, after
// root's write, and the same argument holds for it.
//
// Barrier k (counted from 1 by every rank) is complete when the shared
// counter reaches size * k. The counter is 32 bits and compared modulo 2^32,
// so it may wrap. A waiter that sleeps announces itself in `sleepers` before
// it reads the counter, and the last arriver reads `sleepers` after its
// increment (both sequentially consistent), so one of them sees the other:
// no lost wake-up.

namespace {

constexpr uint64_t kMagic = 0x6464707275'6e5348ull;  // "ddprunSH"
constexpr size_t kHeaderBytes = 4096;
constexpr int kMaxRanks = 256;
constexpr size_t kAlign = 64;  // parts of a chunk start on cache lines
// A sleeping waiter looks at the clock and at its peers this often.
constexpr auto kSleepSlice = std::chrono::milliseconds(50);
constexpr auto kDefaultPoll = std::chrono::microseconds(2000);

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

int AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

std::string ErrnoText(int err) { return std::strerror(err); }

// Gone, or a zombie its parent has not reaped yet (the launcher reaps a
// dead rank only when it next polls).
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // "pid (comm) S ...": the state follows the last ')' (comm may hold ')').
  const char* close_paren = std::strrchr(buf, ')');
  return close_paren != nullptr && close_paren[1] == ' ' &&
         (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

std::string RandomName() {
  std::random_device rd;
  uint64_t r = (uint64_t{rd()} << 32) ^ rd();
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/ddprun-shm-%d-%016llx",
                static_cast<int>(getpid()), static_cast<unsigned long long>(r));
  return buf;
}

}  // namespace

struct SharedMemoryGroup::Header {
  uint64_t magic;
  uint32_t size;
  // 0, or 1 + the rank that called Abort().
  std::atomic<uint32_t> aborted;
  uint64_t slot_bytes;
  alignas(kAlign) std::atomic<uint32_t> arrived;
  alignas(kAlign) std::atomic<uint32_t> sleepers;
  // Per rank: its pid (0 until it mapped the segment) and the number of
  // barriers it has arrived at (to name the ranks that are late).
  alignas(kAlign) std::atomic<int32_t> pid[kMaxRanks];
  std::atomic<uint32_t> arrivals[kMaxRanks];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "cross-process atomics must be lock-free");

size_t SharedMemoryGroup::SegmentBytes(int size, size_t slot_bytes) {
  static_assert(sizeof(Header) <= kHeaderBytes, "header must fit its page");
  return kHeaderBytes + 2 * static_cast<size_t>(size) * slot_bytes;
}

StatusOr<std::unique_ptr<SharedMemoryGroup>> SharedMemoryGroup::Create(
    int size, Options options) {
  if (size < 1 || size > kMaxRanks) {
    return InvalidArgumentError("shared memory group: size " +
                                std::to_string(size) + " not in [1, " +
                                std::to_string(kMaxRanks) + "]");
  }
  if (options.slot_bytes < kAlign || options.slot_bytes % kAlign != 0) {
    return InvalidArgumentError(
        "shared memory group: slot_bytes must be a positive multiple of 64");
  }
  const std::string name = RandomName();
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    return UnavailableError("shm_open " + name + ": " + ErrnoText(errno));
  }
  const size_t bytes = SegmentBytes(size, options.slot_bytes);
  // posix_fallocate, not just ftruncate: a tmpfs too small for the segment
  // (Docker's 64 MB /dev/shm) must fail here, not with SIGBUS on first use.
  int err = ftruncate(fd, static_cast<off_t>(bytes)) == 0
                ? posix_fallocate(fd, 0, static_cast<off_t>(bytes))
                : errno;
  void* base = MAP_FAILED;
  if (err == 0) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) err = errno;
  }
  close(fd);
  if (err != 0) {
    shm_unlink(name.c_str());
    return UnavailableError("shared memory segment of " +
                            std::to_string(bytes >> 10) + " KiB in /dev/shm: " +
                            ErrnoText(err));
  }
  auto* h = new (base) Header();
  h->size = static_cast<uint32_t>(size);
  h->slot_bytes = options.slot_bytes;
  h->pid[0].store(static_cast<int32_t>(getpid()));
  std::atomic_thread_fence(std::memory_order_seq_cst);
  h->magic = kMagic;
  return std::unique_ptr<SharedMemoryGroup>(new SharedMemoryGroup(
      name, 0, size, options, base, bytes, /*owner=*/true));
}

StatusOr<std::unique_ptr<SharedMemoryGroup>> SharedMemoryGroup::Open(
    const std::string& name, int rank, int size, Options options) {
  if (size < 1 || size > kMaxRanks || rank < 1 || rank >= size) {
    return InvalidArgumentError("shared memory group: rank " +
                                std::to_string(rank) + " of " +
                                std::to_string(size) + " cannot open");
  }
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) {
      return NotFoundError("no shared memory segment " + name +
                           " on this host");
    }
    return UnavailableError("shm_open " + name + ": " + ErrnoText(err));
  }
  const size_t bytes = SegmentBytes(size, options.slot_bytes);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    return FailedPreconditionError("shared memory segment " + name +
                                   " has the wrong size for " +
                                   std::to_string(size) + " ranks");
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return UnavailableError("mmap " + name + ": " + ErrnoText(err));
  }
  auto* h = static_cast<Header*>(base);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h->magic != kMagic || h->size != static_cast<uint32_t>(size) ||
      h->slot_bytes != options.slot_bytes) {
    munmap(base, bytes);
    return FailedPreconditionError("shared memory segment " + name +
                                   " is not a group of " +
                                   std::to_string(size) + " ranks");
  }
  if (h->pid[rank].exchange(static_cast<int32_t>(getpid())) != 0) {
    munmap(base, bytes);
    return FailedPreconditionError("shared memory segment " + name +
                                   ": rank " + std::to_string(rank) +
                                   " opened it twice");
  }
  return std::unique_ptr<SharedMemoryGroup>(new SharedMemoryGroup(
      name, rank, size, options, base, bytes, /*owner=*/false));
}

SharedMemoryGroup::SharedMemoryGroup(std::string name, int rank, int size,
                                     Options options, void* base, size_t bytes,
                                     bool owner)
    : name_(std::move(name)),
      rank_(rank),
      size_(size),
      options_(options),
      base_(base),
      bytes_(bytes),
      owner_(owner),
      header_(static_cast<Header*>(base)) {
  if (options_.poll.count() < 0) {
    options_.poll = AvailableCpus() >= size_ ? kDefaultPoll
                                             : std::chrono::microseconds(0);
  }
}

SharedMemoryGroup::~SharedMemoryGroup() {
  if (owner_) Unlink();
  munmap(base_, bytes_);
}

void SharedMemoryGroup::Unlink() {
  if (!owner_) return;
  shm_unlink(name_.c_str());
  owner_ = false;
}

unsigned char* SharedMemoryGroup::Slot(int half, int rank) const {
  return static_cast<unsigned char*>(base_) + kHeaderBytes +
         (static_cast<size_t>(half) * size_ + rank) * options_.slot_bytes;
}

int SharedMemoryGroup::DeadPeer() const {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (static_cast<int32_t>(header_->arrivals[r].load() - barriers_) >= 0) {
      continue;  // r has arrived
    }
    pid_t pid = header_->pid[r].load();
    // pid 0: r never mapped the segment (cannot happen once the group is
    // agreed on).
    if (pid > 0 && ProcessGone(pid)) return r;
  }
  return -1;
}

void SharedMemoryGroup::Abort() {
  uint32_t expected = 0;
  header_->aborted.compare_exchange_strong(expected,
                                           static_cast<uint32_t>(rank_) + 1);
  syscall(SYS_futex, &header_->arrived, FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

Status SharedMemoryGroup::Aborted() {
  const uint32_t by = header_->aborted.load();
  if (by == 0) return Status::Ok();
  broken_ = true;
  return FailedPreconditionError(
      "shared memory collective: rank " + std::to_string(by - 1) +
      " left the group (it re-forms after a failure)");
}

Status SharedMemoryGroup::Barrier() {
  if (Status s = Aborted(); !s.ok()) return s;
  ++barriers_;
  const uint32_t target = barriers_ * static_cast<uint32_t>(size_);
  auto reached = [target](uint32_t v) {
    return static_cast<int32_t>(v - target) >= 0;
  };
  header_->arrivals[rank_].store(barriers_);
  const uint32_t now = header_->arrived.fetch_add(1) + 1;
  if (now == target) {
    if (header_->sleepers.load() > 0) {
      syscall(SYS_futex, &header_->arrived, FUTEX_WAKE, INT_MAX, nullptr,
              nullptr, 0);
    }
    return Status::Ok();
  }
  if (reached(now)) return Status::Ok();

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto poll_end = start + options_.poll;
  do {
    if (reached(header_->arrived.load(std::memory_order_acquire))) {
      return Status::Ok();
    }
    CpuRelax();
  } while (options_.poll.count() > 0 && Clock::now() < poll_end);

  const auto deadline = start + options_.timeout;
  while (true) {
    header_->sleepers.fetch_add(1);
    uint32_t v = header_->arrived.load();
    if (!reached(v)) {
      auto left = std::min<Clock::duration>(kSleepSlice, deadline - Clock::now());
      if (left.count() > 0) {
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left);
        timespec ts{static_cast<time_t>(ns.count() / 1000000000),
                    static_cast<long>(ns.count() % 1000000000)};
        syscall(SYS_futex, &header_->arrived, FUTEX_WAIT, v, &ts, nullptr, 0);
      }
    }
    header_->sleepers.fetch_sub(1);
    if (reached(header_->arrived.load())) return Status::Ok();
    if (Status s = Aborted(); !s.ok()) return s;
    int dead = DeadPeer();
    if (dead >= 0) {
      broken_ = true;
      return UnavailableError(
          "shared memory collective: rank " + std::to_string(dead) + " (pid " +
          std::to_string(header_->pid[dead].load()) +
          ") exited before it reached the collective");
    }
    if (Clock::now() >= deadline) {
      broken_ = true;
      std::string late;
      for (int r = 0; r < size_; ++r) {
        if (static_cast<int32_t>(header_->arrivals[r].load() - barriers_) < 0)
          late += (late.empty() ? "" : ", ") + std::to_string(r);
      }
      return DeadlineExceededError(
          "shared memory collective: rank(s) " + late + " did not arrive within " +
          std::to_string(options_.timeout.count() / 1000) + " s");
    }
  }
}

Status SharedMemoryGroup::Usable() const {
  if (broken_) {
    return FailedPreconditionError(
        "shared memory collective after an earlier failure");
  }
  return Status::Ok();
}

template <typename T>
Status SharedMemoryGroup::AllReduceSumImpl(T* data, size_t n, T scale) {
  if (Status s = Usable(); !s.ok()) return s;
  const size_t chunk = options_.slot_bytes / sizeof(T);
  const size_t align = kAlign / sizeof(T);
  for (size_t off = 0; off < n; off += chunk) {
    const size_t m = std::min(chunk, n - off);
    const int half = static_cast<int>(chunks_++ & 1);
    std::memcpy(Slot(half, rank_), data + off, m * sizeof(T));
    if (Status s = Barrier(); !s.ok()) return s;
    size_t per = (m + size_ - 1) / size_;
    per = (per + align - 1) / align * align;
    const size_t lo = std::min(m, per * rank_);
    const size_t hi = std::min(m, lo + per);
    T* out = reinterpret_cast<T*>(Slot(half, rank_));
    // Rank order, one rank per element: the same bits everywhere.
    const T* first = reinterpret_cast<const T*>(Slot(half, 0));
    if (rank_ != 0) {
      for (size_t i = lo; i < hi; ++i) out[i] = first[i];
    }
    for (int r = 1; r < size_; ++r) {
      const T* in = reinterpret_cast<const T*>(Slot(half, r));
      if (r == rank_ && rank_ != 0) {
        // out already holds rank 0's values; add ours from the caller's copy
        const T* mine = data + off;
        for (size_t i = lo; i < hi; ++i) out[i] += mine[i];
      } else {
        for (size_t i = lo; i < hi; ++i) out[i] += in[i];
      }
    }
    if (scale != T(1)) {
      for (size_t i = lo; i < hi; ++i) out[i] *= scale;
    }
    if (Status s = Barrier(); !s.ok()) return s;
    for (int r = 0; r < size_; ++r) {
      const size_t rlo = std::min(m, per * r);
      const size_t rhi = std::min(m, rlo + per);
      if (rhi > rlo) {
        std::memcpy(data + off + rlo,
                    reinterpret_cast<const T*>(Slot(half, r)) + rlo,
                    (rhi - rlo) * sizeof(T));
      }
    }
  }
  ++completed_;
  return Status::Ok();
}

Status SharedMemoryGroup::AllReduceSum(float* data, size_t n, float scale) {
  return AllReduceSumImpl(data, n, scale);
}

Status SharedMemoryGroup::AllReduceSum(double* data, size_t n, double scale) {
  return AllReduceSumImpl(data, n, scale);
}

Status SharedMemoryGroup::Broadcast(const std::vector<Buffer>& buffers,
                                    int root) {
  if (Status s = Usable(); !s.ok()) return s;
  if (root < 0 || root >= size_) {
    return InvalidArgumentError("broadcast root " + std::to_string(root) +
                                " not a rank of " + std::to_string(size_));
  }
  size_t total = 0;
  for (const Buffer& b : buffers) total += b.bytes;
  size_t buffer = 0, within = 0;  // stream position
  for (size_t off = 0; off < total; off += options_.slot_bytes) {
    const size_t m = std::min(options_.slot_bytes, total - off);
    const int half = static_cast<int>(chunks_++ & 1);
    unsigned char* slot = Slot(half, root);
    // Moves the next m bytes of the buffers' stream to or from the slot.
    auto stream = [&](bool to_slot) {
      size_t done = 0;
      while (done < m) {
        const Buffer& b = buffers[buffer];
        size_t take = std::min(b.bytes - within, m - done);
        auto* p = static_cast<unsigned char*>(b.data) + within;
        if (to_slot) {
          std::memcpy(slot + done, p, take);
        } else {
          std::memcpy(p, slot + done, take);
        }
        done += take;
        within += take;
        if (within == b.bytes) {
          ++buffer;
          within = 0;
        }
      }
    };
    if (rank_ == root) stream(true);
    if (Status s = Barrier(); !s.ok()) return s;
    if (rank_ != root) stream(false);
  }
  ++completed_;
  return Status::Ok();
}

// Like Broadcast with every rank a root at once: a chunk of each rank's part
// goes into the rank's own slot, and after the barrier every rank copies all
// slots out. A rank fills the same half again two chunks later, after the
// next chunk's barrier, which every rank reaches only once it has copied
// this chunk out.
Status SharedMemoryGroup::AllGather(const void* in, size_t bytes, void* out) {
  if (Status s = Usable(); !s.ok()) return s;
  const auto* mine = static_cast<const unsigned char*>(in);
  auto* all = static_cast<unsigned char*>(out);
  for (size_t off = 0; off < bytes; off += options_.slot_bytes) {
    const size_t m = std::min(options_.slot_bytes, bytes - off);
    const int half = static_cast<int>(chunks_++ & 1);
    std::memcpy(Slot(half, rank_), mine + off, m);
    if (Status s = Barrier(); !s.ok()) return s;
    for (int r = 0; r < size_; ++r) {
      std::memcpy(all + r * bytes + off, Slot(half, r), m);
    }
  }
  ++completed_;
  return Status::Ok();
}

}  // namespace ddprun::worker
