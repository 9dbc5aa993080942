#include "ddprun/worker/world.h"

#include <signal.h>
#include <string.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if DDPRUN_WORKER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "common/logging.h"
#include "common/net.h"
#include "ddprun/worker/backend_choice.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/host_allocator.h"
#include "ddprun/worker/shared_memory_group.h"
#include "ddprun/worker/shared_memory_join.h"
#include "ddprun/worker/stack_dump.h"
#include "torch_compat.h"

namespace ddprun::worker {

struct World::Impl {
  WorkerEnv env;
  InitOptions options;
  std::string backend = "none";
  c10::Device device = c10::Device(c10::kCPU);
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  std::chrono::milliseconds collective_timeout = std::chrono::seconds(1800);
  std::shared_ptr<SharedMemoryGroup> shm;  // World::AttachSharedMemory
  std::string backend_note;                // BackendChoice::why
  // A collective failed: the process group is left to its destructor
  // (NCCL's aborts) instead of a clean shutdown that may wait on a dead peer.
  mutable bool failed = false;
  // Restart scope "failed" (World::reforms()): the TCPStore client without
  // any prefix (the agent's generation keys), the generation formed and
  // its record. `store` is then the generation's prefix over a client of
  // its own (a broken client is left behind at the next generation).
  bool reforms = false;
  c10::intrusive_ptr<c10d::Store> raw;
  GenerationRecord record;

  ~Impl() {
    // Also not while an exception unwinds (a peer may still be mid-step).
    if (pg && !failed && std::uncaught_exceptions() == 0) {
      torch_compat::ShutdownProcessGroup(pg);
    }
  }
};

namespace {

void OnGenerationSignal(int) {}

// Sets `handler` for `sig` unless the program already handles it (a
// disposition other than the default is the program's choice).
void SetUnlessHandled(int sig, void (*handler)(int), int flags) {
  struct sigaction old {};
  if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL ||
      (old.sa_flags & SA_SIGINFO) != 0) {
    return;
  }
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = flags;
  (void)sigaction(sig, &sa, nullptr);
}

// DDPRUN_GENERATION_SIGNAL (docs/restart_scope.md): the agents send it to
// their running workers when a new generation shows in the store. This
// runtime reads the generation there at every step's agreement and has no
// use for the notice, but the signal must not end the process (the default
// action of SIGUSR1 and most others): an empty handler, unless the
// program installed its own.
void AcceptGenerationSignal() {
  const char* name = std::getenv("DDPRUN_GENERATION_SIGNAL");
  if (name == nullptr || *name == '\0') return;
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* abbrev = sigabbrev_np(sig);
    if (abbrev == nullptr || std::string("SIG") + abbrev != name) continue;
    SetUnlessHandled(sig, OnGenerationSignal, SA_RESTART);
    return;
  }
  DDP_LOG(WARNING) << "DDPRUN_GENERATION_SIGNAL=" << name
                   << " names no signal: not handled";
}

// Gloo writes to its peers' sockets without MSG_NOSIGNAL: a peer that died
// while this rank sent to it (the write lands before the loop that reads
// the socket sees the peer gone) killed this rank with SIGPIPE, a survivor
// lost, so that a single-rank failure under restart scope "failed" became a
// group restart. Ignored, the write fails with EPIPE: a CollectiveError
// this rank recovers from. Python ignores SIGPIPE at start-up, so torch's
// Python users never meet it. A handler of the program's own is kept.
void IgnoreSigpipe() { SetUnlessHandled(SIGPIPE, SIG_IGN, 0); }

c10d::ReduceOp ToC10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    default:
      return c10d::ReduceOp::SUM;
  }
}

// Runs a collective; rethrows any Torch/Gloo failure as CollectiveError
// naming the operation.
// NCCL work is waited for on the host with the collective timeout: without
// one, wait() only orders the streams, and a dead peer would be found by
// NCCL's watchdog, which aborts the process (no CollectiveError, no error
// file, no restartable exit code).
template <typename F>
void Collective(const char* what, const World::Impl& w, F&& f) {
  // A stack dump of a hung rank names the collective it waits in.
  ActivityScope activity(what);
  try {
    auto work = f();
    if (w.backend == "nccl") {
      if (!work->wait(w.collective_timeout)) {
        throw std::runtime_error("timed out after " +
                                 std::to_string(w.collective_timeout.count()) +
                                 " ms");
      }
    } else {
      work->wait();
    }
  } catch (const std::exception& e) {
    w.failed = true;
    throw CollectiveError(std::string(what) + " failed on rank " +
                          std::to_string(w.env.rank) + " of " +
                          std::to_string(w.env.world_size) + ": " + e.what());
  }
}

// NCCL only reduces tensors on its CUDA device and Gloo only CPU tensors, but
// callers hold both kinds (a CPU RNG state, a CUDA metric): collectives run
// on a copy on the world's device and the result is copied back.
at::Tensor OnDevice(const at::Tensor& t, c10::Device device) {
  return t.device() == device ? t : t.to(device);
}

// True in a standalone world, where collectives are no-ops. A world that
// re-forms has no process group while Reform() runs, and after a Reform()
// that failed: a collective then throws instead of passing silently.
bool Standalone(const World::Impl& w) {
  if (w.pg) return false;
  if (w.reforms) {
    throw CollectiveError("rank " + std::to_string(w.env.rank) +
                          ": no process group (re-forming after a failure "
                          "did not complete)");
  }
  return true;
}

void ThrowIfFailed(const char* what, const World::Impl& w, const Status& s) {
  if (s.ok()) return;
  w.failed = true;
  throw CollectiveError(std::string(what) + " (shared memory) failed on rank " +
                        std::to_string(w.env.rank) + " of " +
                        std::to_string(w.env.world_size) + ": " + s.message());
}

int EnvSeconds(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x <= 0) {
    throw ConfigError(std::string(name) + "='" + v +
                      "' is not a positive number of seconds");
  }
  return static_cast<int>(x);
}

std::shared_ptr<::gloo::transport::Device> GlooDevice(const WorkerEnv& env) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
    if (*ifname != '\0') {
      return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
    }
  }
  const std::string& a = env.master_addr;
  if (a == "127.0.0.1" || a == "localhost" || a == "::1") {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  // Gloo's default advertises whatever this host's name resolves to, often
  // 127.0.1.1 or an address on the wrong network (torchrun's "Gloo
  // connectFullMesh failed" reports). The address this host uses to reach
  // MASTER_ADDR is one the other ranks can reach it at, too.
  const std::string source =
      SourceAddressTowards(a, env.master_port).value_or("");
  if (!source.empty()) {
    return c10d::ProcessGroupGloo::createDeviceForHostname(source);
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// Every rank adds itself to a counter; the last one to arrive releases the
// others. A missing peer becomes a CollectiveError after `timeout` saying
// how many arrived, never an endless wait. Returns the generation: how many
// complete groups joined through this store before (non-zero when a store
// outlives a restart), used to keep the process group's keys apart.
int64_t StoreBarrier(c10d::Store& store, const WorkerEnv& env,
                     std::chrono::milliseconds timeout) {
  const std::string count_key = "ddprun/init/arrived";
  int64_t arrived = store.add(count_key, 1);
  int64_t generation = (arrived - 1) / env.world_size;
  const std::string done_key = "ddprun/init/done/" + std::to_string(generation);
  if (arrived % env.world_size == 0) {
    store.set(done_key, std::vector<uint8_t>{'1'});
  }
  try {
    store.wait({done_key}, timeout);
  } catch (const std::exception& e) {
    int64_t now = -1;
    try {
      now = store.add(count_key, 0) - generation * env.world_size;
    } catch (...) {
    }
    throw CollectiveError(
        "timed out after " + std::to_string(timeout.count() / 1000) +
        " s waiting for peers: " +
        (now >= 0 ? std::to_string(now) : std::string("?")) + " of " +
        std::to_string(env.world_size) + " ranks arrived at " +
        env.master_addr + ":" + std::to_string(env.master_port));
  }
  return generation;
}

using SteadyClock = std::chrono::steady_clock;

std::vector<uint8_t> Bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}
std::string Text(const std::vector<uint8_t>& v) {
  return std::string(v.begin(), v.end());
}

std::chrono::milliseconds Left(SteadyClock::time_point deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - SteadyClock::now()));
}

// A TCPStore client to MASTER_ADDR:MASTER_PORT (the server too on rank 0
// when it hosts the store), with the agent store's attempt prefix when
// `prefixed`. Throws CollectiveError when the store cannot be reached.
c10::intrusive_ptr<c10d::Store> ConnectTcp(
    const WorkerEnv& env, std::chrono::milliseconds timeout, bool server,
    c10::intrusive_ptr<c10d::Store>* raw) {
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.timeout = timeout;
    so.multiTenant = true;
    so.waitWorkers = false;  // StoreBarrier reports missing peers
    so.isServer = server;
    if (so.isServer) so.numWorkers = static_cast<size_t>(env.world_size);
    c10::intrusive_ptr<c10d::Store> tcp =
        torch_compat::MakeTcpStore(env.master_addr, so);
    // A first query at once: LibTorch 1.13's client also opened a watch
    // socket it never writes to, and ddprun's store keeps such a socket
    // only for a client that spoke (an idle one closed after 10 s left the
    // client's listener thread spinning on it: a core at 100 %).
    tcp->getNumKeys();
    if (raw != nullptr) *raw = tcp;
    c10::intrusive_ptr<c10d::Store> store = tcp;
    if (env.use_agent_store) {
      store = c10::make_intrusive<c10d::PrefixStore>(
          "/worker/attempt_" + std::to_string(env.restart_count), tcp);
    }
    store->setTimeout(timeout);
    return store;
  } catch (const WorkerError&) {
    throw;
  } catch (const std::exception& e) {
    throw CollectiveError("cannot reach the c10d store at " + env.master_addr +
                          ":" + std::to_string(env.master_port) + " (rank " +
                          std::to_string(env.rank) + "): " + e.what());
  }
}

// The value of `key`, or nullopt when it is not set, in one round trip and
// without waiting (a compare-set whose expected and new values are the same
// impossible value reads the key, or answers that value when it is
// missing); GET of a missing key would wait, and the agent's store refuses
// it.
std::optional<std::string> ReadKey(c10d::Store& store, const std::string& key) {
  static const std::string kAbsent = std::string("\0ddprun-absent", 14);
  const std::string v =
      Text(store.compareSet(key, Bytes(kAbsent), Bytes(kAbsent)));
  if (v == kAbsent) return std::nullopt;
  return v;
}

int64_t ReadGeneration(c10d::Store& raw) {
  try {
    std::optional<std::string> v = ReadKey(raw, kGenerationKey);
    if (!v) return 0;
    StatusOr<int64_t> g = ParseGenerationNumber(*v);
    if (!g.ok()) throw CollectiveError(g.status().message());
    return *g;
  } catch (const WorkerError&) {
    throw;
  } catch (const std::exception& e) {
    throw CollectiveError(std::string("reading ") + kGenerationKey +
                          " from the store: " + e.what());
  }
}

// The process group of `impl`'s backend over `store`. Throws
// CollectiveError.
c10::intrusive_ptr<c10d::ProcessGroup> MakeGroup(
    const World::Impl& impl, const c10::intrusive_ptr<c10d::Store>& store) {
  try {
    if (impl.backend == "gloo") {
      torch_compat::GlooGroupOptions gloo;
      gloo.timeout = impl.options.collective_timeout;
      gloo.devices.push_back(GlooDevice(impl.env));
      gloo.threads = impl.options.gloo_threads;
      return torch_compat::MakeGlooGroup(store, impl.env.rank,
                                         impl.env.world_size, gloo);
    }
    return torch_compat::MakeNcclGroup(store, impl.env.rank,
                                       impl.env.world_size,
                                       impl.options.collective_timeout);
  } catch (const std::exception& e) {
    throw CollectiveError("cannot create the " + impl.backend +
                          " process group (rank " +
                          std::to_string(impl.env.rank) + "): " + e.what());
  }
}

// Thrown inside FormGeneration when the agent announced a newer generation
// than the one being formed.
struct Superseded {
  int64_t latest;
};

// Joins generation `g` (restart_scope.md, "Re-forming"): reads its record,
// arrives at the barrier under its prefix on a client of its own and,
// once every rank has, makes the process group under "<prefix>/pg". Polls
// the generation while it waits: a newer one throws Superseded. Throws
// CollectiveError at `deadline`.
void FormGeneration(World::Impl& w, int64_t g,
                    SteadyClock::time_point deadline) {
  const WorkerEnv& env = w.env;
  GenerationRecord record;
  record.generation = g;
  if (g > 0) {
    std::optional<std::string> json;
    try {
      json = ReadKey(*w.raw, GenerationRecordKey(g));
    } catch (const std::exception& e) {
      throw CollectiveError("reading " + GenerationRecordKey(g) + ": " +
                            e.what());
    }
    if (!json) {
      throw CollectiveError("generation " + std::to_string(g) +
                            " was announced without its record " +
                            GenerationRecordKey(g));
    }
    StatusOr<GenerationRecord> parsed =
        ParseGenerationRecord(g, *json, env.world_size);
    if (!parsed.ok()) throw CollectiveError(parsed.status().message());
    record = std::move(*parsed);
  }
  auto attempt = ConnectTcp(env, Left(deadline), /*server=*/false, nullptr);
  auto store =
      c10::make_intrusive<c10d::PrefixStore>(GenerationPrefix(g), attempt);
  const std::string count_key = "ddprun/init/arrived";
  const std::string done_key = "ddprun/init/done";
  try {
    const int64_t arrived = store->add(count_key, 1);
    if (arrived == env.world_size) store->set(done_key, Bytes("1"));
    // Every rank arrives once per generation: a rank that leaves a
    // generation for a newer one never comes back to it.
    while (!ReadKey(*store, done_key)) {
      const int64_t latest = ReadGeneration(*w.raw);
      if (latest > g) throw Superseded{latest};
      if (SteadyClock::now() >= deadline) {
        throw CollectiveError(
            "generation " + std::to_string(g) + ": " +
            std::to_string(store->add(count_key, 0)) + " of " +
            std::to_string(env.world_size) +
            " ranks arrived within the heal timeout (" +
            std::to_string(w.options.heal_timeout.count() / 1000) +
            " s, DDPRUN_HEAL_TIMEOUT_S)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const WorkerError&) {
    throw;
  } catch (const Superseded&) {
    throw;
  } catch (const std::exception& e) {
    throw CollectiveError("joining generation " + std::to_string(g) +
                          " through the store: " + e.what());
  }
  // Gloo's rendezvous waits for its peers' addresses with the store's
  // timeout: a peer that died after the barrier must not outlast the heal
  // timeout.
  store->setTimeout(Left(deadline));
  auto pg = MakeGroup(w, c10::make_intrusive<c10d::PrefixStore>("pg", store));
  store->setTimeout(w.options.store_timeout);
  w.store = store;
  w.pg = pg;
  w.failed = false;
  w.record = std::move(record);
}

// FormGeneration of `g`, or of a newer one when the agent moves on while
// this rank forms: the newest generation is the one every live rank joins.
void FormNewest(World::Impl& w, int64_t g, SteadyClock::time_point deadline) {
  for (;;) {
    try {
      FormGeneration(w, g, deadline);
      return;
    } catch (const Superseded& s) {
      DDP_LOG(WARNING) << "rank " << w.env.rank << ": generation " << g
                       << " was superseded by " << s.latest
                       << " while it formed; joining " << s.latest;
      g = s.latest;
    }
  }
}

}  // namespace

InitOptions InitOptionsFromEnv(InitOptions base) {
  if (const char* b = std::getenv("DDPRUN_BACKEND")) {
    if (*b != '\0') base.backend = b;
  }
  if (const char* d = std::getenv("DDPRUN_DEVICE")) {
    if (*d != '\0') base.device = d;
  }
  if (const char* g = std::getenv("DDPRUN_GPU_PER_RANK")) {
    if (*g != '\0') base.gpu_per_rank = std::string(g) != "0";
  }
  base.store_timeout = std::chrono::seconds(
      EnvSeconds("DDPRUN_STORE_TIMEOUT_S",
                 static_cast<int>(base.store_timeout.count() / 1000)));
  base.collective_timeout = std::chrono::seconds(
      EnvSeconds("DDPRUN_COLLECTIVE_TIMEOUT_S",
                 static_cast<int>(base.collective_timeout.count() / 1000)));
  base.heal_timeout = std::chrono::seconds(
      EnvSeconds("DDPRUN_HEAL_TIMEOUT_S",
                 static_cast<int>(base.heal_timeout.count() / 1000)));
  return base;
}

World::World() : impl_(std::make_shared<Impl>()) {}
World::World(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

int World::rank() const { return impl_->env.rank; }
int World::world_size() const { return impl_->env.world_size; }
int World::local_rank() const { return impl_->env.local_rank; }
int World::local_world_size() const { return impl_->env.local_world_size; }
std::chrono::milliseconds World::collective_timeout() const {
  return impl_->collective_timeout;
}
const WorkerEnv& World::env() const { return impl_->env; }
const std::string& World::backend() const { return impl_->backend; }
const std::string& World::backend_note() const { return impl_->backend_note; }
c10::Device World::device() const { return impl_->device; }
c10::intrusive_ptr<c10d::ProcessGroup> World::process_group() const {
  return impl_->pg;
}
c10::intrusive_ptr<c10d::Store> World::store() const { return impl_->store; }
bool World::reforms() const { return impl_->reforms; }
int64_t World::generation() const { return impl_->record.generation; }
const GenerationRecord& World::generation_record() const {
  return impl_->record;
}

int64_t World::LatestGeneration() const {
  if (!impl_->raw) return 0;
  return ReadGeneration(*impl_->raw);
}

c10::intrusive_ptr<c10d::Store> World::ConnectStore() const {
  const Impl& w = *impl_;
  if (!w.pg) throw CollectiveError("ConnectStore in a standalone world");
  auto attempt =
      ConnectTcp(w.env, w.options.store_timeout, /*server=*/false, nullptr);
  if (!w.reforms) return attempt;
  return c10::make_intrusive<c10d::PrefixStore>(
      GenerationPrefix(w.record.generation), attempt);
}

const GenerationRecord& World::Reform(const std::string& why) {
  Impl& w = *impl_;
  if (!w.reforms) throw CollectiveError(why);
  const auto deadline = SteadyClock::now() + w.options.heal_timeout;
  const int64_t from = w.record.generation;
  DDP_LOG(WARNING) << "rank " << w.env.rank << " re-forms (generation " << from
                   << "): " << why;
  // Peers still inside a shared memory collective with this rank are
  // released at once instead of at the collective timeout.
  if (w.shm) w.shm->Abort();
  w.shm.reset();
  torch_compat::AbortProcessGroup(w.pg);
  w.pg.reset();
  w.store.reset();
  w.failed = false;
  int64_t latest = from;
  while ((latest = ReadGeneration(*w.raw)) <= from) {
    if (SteadyClock::now() >= deadline) {
      throw CollectiveError(
          "no generation after " + std::to_string(from) +
          " within the heal timeout (" +
          std::to_string(w.options.heal_timeout.count() / 1000) +
          " s, DDPRUN_HEAL_TIMEOUT_S); the failure that made this rank "
          "re-form: " +
          why);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FormNewest(w, latest, deadline);
  return w.record;
}

void World::MarkHealed() const {
  const Impl& w = *impl_;
  if (!w.raw) return;
  try {
    w.raw->set(GenerationHealedKey(w.record.generation), Bytes("1"));
  } catch (const std::exception& e) {
    throw CollectiveError("setting " +
                          GenerationHealedKey(w.record.generation) + ": " +
                          e.what());
  }
}
void World::AttachSharedMemory(std::shared_ptr<SharedMemoryGroup> group) {
  impl_->shm = std::move(group);
}
std::shared_ptr<SharedMemoryGroup> World::shared_memory() const {
  return impl_->shm;
}

void World::AllReduce(at::Tensor& t, ReduceOp op) const {
  if (Standalone(*impl_)) return;
  ActivityScope activity("all_reduce");  // also on the shared-memory path
  if (impl_->shm && (op == ReduceOp::kSum || op == ReduceOp::kAvg) &&
      SharedMemoryReducible(t)) {
    const double scale = op == ReduceOp::kAvg ? 1.0 / world_size() : 1.0;
    const size_t n = static_cast<size_t>(t.numel());
    ThrowIfFailed("all_reduce", *impl_,
                  t.scalar_type() == at::kFloat
                      ? impl_->shm->AllReduceSum(t.data_ptr<float>(), n,
                                                 static_cast<float>(scale))
                      : impl_->shm->AllReduceSum(t.data_ptr<double>(), n,
                                                 scale));
    // Written through a raw pointer: bump the version as an in-place op
    // would, for version-keyed caches and autograd's checks.
    t.unsafeGetTensorImpl()->bump_version();
    return;
  }
  std::vector<at::Tensor> v{OnDevice(t, impl_->device)};
  c10d::AllreduceOptions opts;
  opts.reduceOp = ToC10d(op);
  Collective("all_reduce", *impl_,
             [&] { return impl_->pg->allreduce(v, opts); });
  if (!v[0].is_same(t)) {
    t.copy_(v[0]);
  } else {
    // The process group wrote `t` itself, behind autograd's back.
    t.unsafeGetTensorImpl()->bump_version();
  }
  if (op == ReduceOp::kAvg) t.div_(world_size());
}

void World::Broadcast(at::Tensor& t, int root) const {
  if (Standalone(*impl_)) return;
  ActivityScope activity("broadcast");  // also on the shared-memory path
  if (impl_->shm && t.device().is_cpu() && t.is_contiguous()) {
    ThrowIfFailed("broadcast", *impl_,
                  impl_->shm->Broadcast({{t.data_ptr(), t.nbytes()}}, root));
    t.unsafeGetTensorImpl()->bump_version();
    return;
  }
  std::vector<at::Tensor> v{OnDevice(t, impl_->device)};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  Collective("broadcast", *impl_,
             [&] { return impl_->pg->broadcast(v, opts); });
  if (!v[0].is_same(t)) {
    t.copy_(v[0]);
  } else {
    t.unsafeGetTensorImpl()->bump_version();
  }
}

std::vector<at::Tensor> World::AllGather(const at::Tensor& t) const {
  if (Standalone(*impl_)) return {t.clone()};
  ActivityScope activity("all_gather");  // also on the shared-memory path
  if (impl_->shm && t.device().is_cpu()) {
    const at::Tensor in = t.contiguous();
    std::vector<int64_t> shape{world_size()};
    for (int64_t d : in.sizes()) shape.push_back(d);
    at::Tensor out = at::empty(shape, in.options());
    ThrowIfFailed("all_gather", *impl_,
                  impl_->shm->AllGather(in.data_ptr(), in.nbytes(),
                                        out.data_ptr()));
    return out.unbind(0);
  }
  at::Tensor in = OnDevice(t, impl_->device).contiguous();
  std::vector<std::vector<at::Tensor>> out(1);
  for (int i = 0; i < world_size(); ++i) out[0].push_back(at::empty_like(in));
  std::vector<at::Tensor> inputs{in};
  Collective("all_gather", *impl_,
             [&] { return impl_->pg->allgather(out, inputs); });
  if (in.device() != t.device()) {
    for (at::Tensor& part : out[0]) part = part.to(t.device());
  }
  return out[0];
}

at::Tensor World::AllGatherVariable(const at::Tensor& t) const {
  if (Standalone(*impl_)) return t.clone();
  ActivityScope activity("all_gather");  // also on the shared-memory path
  at::Tensor in = t.dim() == 0 ? t.reshape({1}) : t.contiguous();
  at::Tensor len = at::tensor({in.size(0)}, at::kLong).to(impl_->device);
  std::vector<at::Tensor> lens = AllGather(len);
  int64_t max_len = 0;
  std::vector<int64_t> sizes;
  for (auto& l : lens) {
    sizes.push_back(l.item<int64_t>());
    max_len = std::max(max_len, sizes.back());
  }
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] = max_len;
  at::Tensor padded = at::zeros(shape, in.options());
  if (in.size(0) > 0) padded.narrow(0, 0, in.size(0)).copy_(in);
  std::vector<at::Tensor> parts = AllGather(padded);
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i] = parts[i].narrow(0, 0, sizes[i]);
  }
  return at::cat(parts, 0);
}

at::Tensor World::ReduceScatter(const at::Tensor& input) const {
  ActivityScope activity("reduce_scatter");  // also on the shared-memory path
  const int n = world_size(), r = rank();
  if (input.dim() != 1 || input.numel() % n != 0) {
    throw ConfigError("ReduceScatter: input must be 1-D with a multiple of " +
                      std::to_string(n) + " elements, got " +
                      std::to_string(input.numel()));
  }
  if (Standalone(*impl_)) return input.clone();
  const int64_t chunk = input.numel() / n;
  if (impl_->shm && SharedMemoryReducible(input)) {
    // Through the segment the whole sum costs about what the ring's first
    // step would: sum everything, keep this rank's chunk.
    at::Tensor sum = input.clone();
    AllReduce(sum);
    return sum.narrow(0, r * chunk, chunk).clone();
  }
  if (impl_->backend == "nccl") {
    at::Tensor on_device = OnDevice(input, impl_->device).contiguous();
    std::vector<at::Tensor> out{at::empty({chunk}, on_device.options())};
    std::vector<std::vector<at::Tensor>> in{on_device.split(chunk)};
    Collective("reduce_scatter", *impl_,
               [&] { return impl_->pg->reduce_scatter(out, in); });
    return out[0].to(input.device());
  }
  // Ring: at step s rank r sends its partial sum of chunk (r-s-1) mod n to
  // rank r+1 and adds the partial sum of chunk (r-s-2) mod n received from
  // rank r-1. A chunk is never written after it was sent; after n-1 steps
  // chunk r holds every rank's contribution.
  // ProcessGroupGloo sends and receives CPU tensors only (it reduces CUDA
  // ones), so the ring runs on the CPU also when the world's device is CUDA.
  at::Tensor work = input.to(at::kCPU).contiguous().clone();
  std::vector<at::Tensor> chunks = work.split(chunk);
  at::Tensor incoming = at::empty({chunk}, work.options());
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  constexpr int kTag = 0x5253;  // "RS"; send/recv match in order per peer
  for (int s = 0; s < n - 1; ++s) {
    std::vector<at::Tensor> send{chunks[((r - s - 1) % n + n) % n]};
    std::vector<at::Tensor> recv{incoming};
    Collective("reduce_scatter (ring send/recv)", *impl_, [&] {
      auto sent = impl_->pg->send(send, next, kTag);
      auto received = impl_->pg->recv(recv, prev, kTag);
      sent->wait();
      return received;
    });
    chunks[((r - s - 2) % n + n) % n].add_(incoming);
  }
  return chunks[r].to(input.device(), /*non_blocking=*/false, /*copy=*/true);
}

void World::Barrier() const {
  if (Standalone(*impl_)) return;
  Collective("barrier", *impl_, [&] { return impl_->pg->barrier(); });
}

World InitWorld(const WorkerEnv& env, const InitOptions& options) {
  // Answers ddprun's stack requests (DDPRUN_STACKS_*) from here on.
  (void)InstallStackDumpHandler();
  auto impl = std::make_shared<World::Impl>();
  impl->env = env;
  BackendFacts facts;
  facts.backend = options.backend;
  facts.device = options.device;
  facts.local_world_size = env.local_world_size;
  facts.gpu_per_rank = options.gpu_per_rank || !options.pin_cuda_device;
#if DDPRUN_WORKER_WITH_CUDA
  facts.torch_has_cuda = true;
  facts.visible_gpus = static_cast<int>(c10::cuda::device_count());
#endif
  StatusOr<BackendChoice> choice = ChooseBackend(facts);
  if (!choice.ok()) throw ConfigError(choice.status().message());
  const std::string backend = choice->backend;
  const std::string device = choice->device;
  impl->backend_note = choice->why;
  if (!choice->why.empty() && env.local_rank == 0 && !env.standalone) {
    DDP_LOG(WARNING) << choice->why;
  }
  if (device == "cuda") {
#if DDPRUN_WORKER_WITH_CUDA
    if (options.pin_cuda_device) {
      int dev = env.local_rank % c10::cuda::device_count();
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(dev));
      impl->device =
          c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(dev));
    } else {
      // The caller chose the device (e.g. CUDA_VISIBLE_DEVICES per rank or
      // its own set_device); NCCL uses the current one, so do collectives.
      impl->device = c10::Device(c10::kCUDA, c10::cuda::current_device());
    }
#endif
  }
  impl->collective_timeout = options.collective_timeout;
  if (env.standalone) return World(impl);
  IgnoreSigpipe();

  impl->backend = backend;
  impl->options = options;
  impl->reforms = env.restart_scope == "failed" && env.use_agent_store;
  if (env.restart_scope == "failed" && !env.use_agent_store && env.rank == 0) {
    DDP_LOG(WARNING)
        << "DDPRUN_RESTART_SCOPE=failed needs the agent's store "
           "(TORCHELASTIC_USE_AGENT_STORE=True): without a store that "
           "outlives every worker this job restarts as a group";
  }
  if (impl->reforms) {
    AcceptGenerationSignal();
    impl->store =
        ConnectTcp(env, options.store_timeout, /*server=*/false, &impl->raw);
    // A group start forms generation 0 within the store timeout, like the
    // barrier below; a replacement forms its generation (or a newer one)
    // within the heal timeout, as its peers wait for it that long.
    const auto wait =
        env.replacement ? options.heal_timeout : options.store_timeout;
    FormNewest(*impl, env.generation, SteadyClock::now() + wait);
    return World(impl);
  }
  impl->store = ConnectTcp(env, options.store_timeout,
                           !env.use_agent_store && env.rank == 0, nullptr);
  int64_t generation = StoreBarrier(*impl->store, env, options.store_timeout);

  auto pg_store = c10::make_intrusive<c10d::PrefixStore>(
      generation == 0 ? std::string("default_pg")
                      : "default_pg/" + std::to_string(generation),
      impl->store);
  impl->pg = MakeGroup(*impl, pg_store);
  return World(impl);
}

World InitFromEnv(const InitOptions& options) {
  if (options.tune_host_allocator) {
    StatusOr<HostAllocatorDecision> tuned = TuneHostAllocator();
    if (!tuned.ok()) throw ConfigError(tuned.status().message());
  }
  StatusOr<WorkerEnv> env = ReadWorkerEnv();
  if (!env.ok()) throw ConfigError(env.status().message());
  return InitWorld(*env, options);
}

}  // namespace ddprun::worker
