// One rank of the worker runtime's multi-process tests. The test drivers
// (tests/worker/*_process_test.cc) start N copies with RANK, WORLD_SIZE and
// MASTER_* set and check their exit codes, stdout and output files.
//   rank_helper collectives [shm]
//   rank_helper ddp OUT STEPS BATCH [accum] [unused]
//   rank_helper sampler N SEED EPOCH SHUFFLE DROP_LAST
//   rank_helper throw KIND            (RunMain error file)
//   rank_helper train CKPT_DIR STEPS EVERY LOG   (checkpoint/resume)
//   rank_helper ckpt_memory CKPT_DIR save|load N  (resume's peak memory)
//   rank_helper zero OUT STEPS BATCH sharded|offload|plain
//   rank_helper syncbn OUT DIMS
//   rank_helper heal OUT STEPS   (restart scope failed: rank_helper_heal.cc)
//   rank_helper ckpt_digest PATH (a checkpoint's tensors and scalars, hashed)

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "ddprun/worker/shared_memory_join.h"
#include "ddprun/worker/sync_batch_norm.h"
#include "ddprun/worker/worker.h"
#include "worker/src/torch_compat.h"

namespace w = ddprun::worker;

int HealTraining(const std::string& out, int64_t steps);
int CheckpointDigest(const std::string& path);

namespace {

#define CHECK_OR_THROW(cond, msg)                                        \
  do {                                                                   \
    if (!(cond)) throw std::runtime_error(std::string("check: ") + msg); \
  } while (0)

void WriteFloats(const std::string& path, const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kFloat).contiguous().cpu();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(c.data_ptr<float>()),
            static_cast<std::streamsize>(c.numel() * sizeof(float)));
}

at::Tensor FlatParams(torch::nn::Module& m) {
  std::vector<at::Tensor> v;
  for (auto& p : m.parameters()) v.push_back(p.detach().flatten());
  return at::cat(v);
}

// The checks of World's collectives; `how` names the transport in messages.
void CheckCollectives(const w::World& world, const std::string& how) {
  int r = world.rank(), n = world.world_size();
  at::Tensor t = at::full({4}, static_cast<float>(r + 1));
  world.AllReduce(t);
  CHECK_OR_THROW(t[0].item<float>() == n * (n + 1) / 2.0f, "all_reduce sum");
  at::Tensor a = at::full({2}, static_cast<float>(r));
  world.AllReduce(a, w::ReduceOp::kAvg);
  CHECK_OR_THROW(std::abs(a[1].item<float>() - (n - 1) / 2.0f) < 1e-6,
                 "all_reduce avg");
  at::Tensor b = at::full({3}, r == 0 ? 42.0f : -1.0f);
  world.Broadcast(b, 0);
  CHECK_OR_THROW(b[2].item<float>() == 42.0f, "broadcast");
  // Rank r contributes r+1 rows holding r.
  at::Tensor v = at::full({r + 1, 2}, static_cast<float>(r));
  at::Tensor g = world.AllGatherVariable(v);
  CHECK_OR_THROW(g.size(0) == n * (n + 1) / 2, "all_gather_variable rows");
  int64_t row = 0;
  for (int k = 0; k < n; ++k) {
    for (int j = 0; j <= k; ++j, ++row) {
      CHECK_OR_THROW(g[row][1].item<float>() == k, "all_gather order");
    }
  }
  double mean = w::AllReduceMean(world, r);
  CHECK_OR_THROW(std::abs(mean - (n - 1) / 2.0) < 1e-12, "AllReduceMean");
  double wm = w::AllReduceWeightedMean(world, r, r + 1);
  double num = 0, den = 0;
  for (int k = 0; k < n; ++k) num += k * (k + 1.0), den += k + 1.0;
  CHECK_OR_THROW(std::abs(wm - num / den) < 1e-12, "weighted mean " + how);
  // Longer than a shared memory slot (1 MB): chunks in both halves.
  at::Tensor big = at::arange(600000, at::kFloat) + r;
  world.AllReduce(big);
  CHECK_OR_THROW(big[599999].item<float>() == n * 599999.0f + n * (n - 1) / 2,
                 "chunked all_reduce " + how);
  at::Tensor d = at::full({5}, 0.25 * (r + 1), at::kDouble);
  world.AllReduce(d, w::ReduceOp::kAvg);
  CHECK_OR_THROW(std::abs(d[4].item<double>() - 0.125 * (n + 1)) < 1e-15,
                 "double all_reduce avg " + how);
  at::Tensor i = at::full({3}, r + 1, at::kLong);  // the process group's
  world.AllReduce(i, w::ReduceOp::kMax);
  CHECK_OR_THROW(i[0].item<int64_t>() == n, "int64 all_reduce max " + how);
  at::Tensor from_last = at::full({7}, r == n - 1 ? 2.5 : 0.0, at::kDouble);
  world.Broadcast(from_last, n - 1);
  CHECK_OR_THROW(from_last[6].item<double>() == 2.5, "broadcast root " + how);
  // Written in place, through a raw pointer or not, the tensor's version
  // moves, as version-keyed caches and autograd's checks expect of an
  // in-place op (standalone: nothing is written).
  at::Tensor v2 = at::ones({2});
  const auto before = v2._version();
  world.AllReduce(v2);
  CHECK_OR_THROW(v2._version() > before || !world.distributed(),
                 "version bump " + how);
  // Fixed-size all-gathers: int64, a scalar, and floats past a 1 MB slot.
  std::vector<at::Tensor> ints =
      world.AllGather(at::tensor({int64_t{10} * r, int64_t{10} * r + 1}));
  CHECK_OR_THROW(static_cast<int>(ints.size()) == n, "all_gather count " + how);
  for (int k = 0; k < n; ++k) {
    CHECK_OR_THROW(ints[k].sizes() == at::IntArrayRef({2}) &&
                       ints[k][1].item<int64_t>() == 10 * k + 1,
                   "int64 all_gather " + how);
  }
  std::vector<at::Tensor> scalars =
      world.AllGather(at::scalar_tensor(0.5 * r, at::kDouble));
  CHECK_OR_THROW(scalars[n - 1].dim() == 0 &&
                     scalars[n - 1].item<double>() == 0.5 * (n - 1),
                 "scalar all_gather " + how);
  std::vector<at::Tensor> wide =
      world.AllGather(at::arange(300001, at::kFloat) * (r + 1));
  for (int k = 0; k < n; ++k) {
    CHECK_OR_THROW(wide[k][300000].item<float>() == 300000.0f * (k + 1) &&
                       wide[k][262144].item<float>() == 262144.0f * (k + 1),
                   "chunked all_gather " + how);
  }
  // Reduce-scatter: rank r keeps elements [5r, 5r+5) of the sum.
  at::Tensor rs = world.ReduceScatter(at::arange(5 * n, at::kFloat) + r);
  CHECK_OR_THROW(rs.numel() == 5 && rs[4].item<float>() ==
                                        n * (5.0f * r + 4) + n * (n - 1) / 2.0f,
                 "reduce_scatter " + how);
  world.Barrier();
}

int Collectives(bool shm) {
  w::World world = w::InitFromEnv();
  CheckCollectives(world, "process group");
  if (shm) {
    std::string why;
    std::shared_ptr<w::SharedMemoryGroup> group =
        w::JoinSharedMemoryGroup(world, world.collective_timeout(), &why);
    CHECK_OR_THROW(group != nullptr, "no shared memory group: " + why);
    world.AttachSharedMemory(group);
    w::World copy = world;  // copies share the attachment
    CHECK_OR_THROW(copy.shared_memory() == group, "attached to copies");
    const uint64_t before = group->completed();
    CheckCollectives(copy, "shared memory");
    // Through the group, not the process group: 7 all-reduces (sum, avg,
    // AllReduceMean, weighted mean, chunked, double avg, version), 2
    // broadcasts, 3 all-gathers and AllGatherVariable's 2, the
    // reduce-scatter (one sum); the int64 max and the barrier stay on the
    // process group.
    const uint64_t through = group->completed() - before;
    CHECK_OR_THROW(through == 15, "collectives through shared memory: " +
                                      std::to_string(through) + ", want 15");
    std::printf("rank %d shared memory ok\n", world.rank());
  }
  std::printf("rank %d of %d ok backend %s agent_store %d\n", world.rank(),
              world.world_size(), world.backend().c_str(),
              world.env().use_agent_store ? 1 : 0);
  return 0;
}

// Small conv net; `extra` adds a branch that is only used when asked
// (use_extra), to exercise find_unused_parameters.
struct NetImpl : torch::nn::Module {
  explicit NetImpl(bool extra, bool batch_norm = false) {
    conv = register_module(
        "conv",
        torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)));
    if (batch_norm) bn = register_module("bn", torch::nn::BatchNorm2d(4));
    fc = register_module("fc", torch::nn::Linear(4 * 8 * 8, 3));
    if (extra) unused = register_module("unused", torch::nn::Linear(3, 3));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = conv(x);
    if (bn) h = bn(h);
    at::Tensor y = fc(torch::relu(h).flatten(1));
    return use_extra ? unused(y) : y;
  }
  bool use_extra = false;
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
  torch::nn::Linear unused{nullptr};
};
TORCH_MODULE(Net);

struct Data {
  at::Tensor x, y;
};
Data MakeData(int64_t n) {
  auto gen = at::detail::createCPUGenerator(123);
  return {at::randn({n, 1, 8, 8}, gen), at::randint(0, 3, {n}, gen)};
}

// N ranks x batch B (split in `accum` micro-batches, the first ones under
// NoSync) for STEPS SGD steps; rank 0 writes the flat parameters to OUT.
// `branch`: "unused" adds a layer no step uses; "switch" uses it from the
// second half of the steps on (the set of unused parameters changes);
// "bn" adds a batch norm layer whose buffers DDP keeps equal to rank 0's
// (each rank prints them). DDP_RANK1_EXITS_AT=S: rank 1 exits before the
// backward of step S (a peer dying mid-training).
int Ddp(const std::string& out, int steps, int batch, int accum,
        const std::string& branch) {
  const bool unused = branch == "unused" || branch == "switch";
  w::World world = w::InitFromEnv();
  torch::manual_seed(1000 + world.rank());  // different init per rank:
  Net net(unused, branch == "bn");          // DDP must broadcast rank 0's
  w::DdpOptions opts;
  // 0.001 MB = 1048 B: the 3244 B of gradients (conv 160 B, fc.weight
  // 3072 B, fc.bias 12 B) need two buckets, so bucketing is exercised.
  opts.bucket_cap_mb = 0.001;
  opts.find_unused_parameters = unused;
  w::DistributedDataParallel ddp(world, net.ptr(), opts);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  int n = world.world_size(), r = world.rank();
  int64_t global = static_cast<int64_t>(batch) * n;
  Data d = MakeData(global * steps);
  int micro = batch / accum;
  const char* exit_at = std::getenv("DDP_RANK1_EXITS_AT");
  std::printf("rank %d transport %s\n", world.rank(), ddp.gradient_transport());
  std::fflush(stdout);
  for (int s = 0; s < steps; ++s) {
    if (exit_at != nullptr && world.rank() == 1 && s == std::atoi(exit_at)) {
      std::_Exit(3);
    }
    sgd.zero_grad();
    net->use_extra = branch == "switch" && 2 * s >= steps;
    for (int m = 0; m < accum; ++m) {
      int64_t begin = s * global + r * batch + m * micro;
      at::Tensor x = d.x.narrow(0, begin, micro);
      at::Tensor y = d.y.narrow(0, begin, micro);
      at::Tensor loss =
          torch::nn::functional::cross_entropy(net->forward(x), y) / accum;
      if (m + 1 < accum) {
        auto scope = ddp.NoSync();
        ddp.Backward(loss);
      } else {
        ddp.Backward(loss);
      }
    }
    sgd.step();
  }
  if (branch == "unused")
    CHECK_OR_THROW(
        !net->unused->weight.grad().defined() ||
            net->unused->weight.grad().abs().sum().item<float>() == 0,
        "unused parameter got a gradient");
  if (r == 0) WriteFloats(out, FlatParams(*net));
  if (net->bn) {
    std::printf(
        "rank %d buffers %.9g %.9g %lld\n", r,
        net->bn->running_mean.sum().item<double>(),
        net->bn->running_var.sum().item<double>(),
        static_cast<long long>(net->bn->num_batches_tracked.item<int64_t>()));
  }
  size_t bytes = 0;
  for (size_t b : ddp.bucket_bytes()) bytes += b;
  std::printf("rank %d buckets %zu bytes %zu\n", r, ddp.bucket_bytes().size(),
              bytes);
  return 0;
}

int Sampler(int64_t n, int seed, int epoch, bool shuffle, bool drop_last) {
  const char* ws = std::getenv("SAMPLER_WORLD");
  int world = ws ? std::atoi(ws) : 1;
  for (int r = 0; r < world; ++r) {
    w::DistributedSampler s(n, world, r,
                            {shuffle, static_cast<uint64_t>(seed), drop_last});
    s.set_epoch(epoch);
    for (int64_t i : s.Indices())
      std::printf("%lld ", static_cast<long long>(i));
    std::printf("\n");
  }
  return 0;
}

int Throw(const std::string& kind) {
  if (kind == "runtime") throw std::runtime_error("loss is NaN at step 7");
  if (kind == "collective") {
    throw w::CollectiveError("all_reduce failed: Connection closed by peer");
  }
  if (kind == "torch") {
    at::ones({2, 3}).matmul(at::ones({2, 3}));  // shape error (c10::Error)
  }
  if (kind == "init") {
    w::InitOptions o;
    o.store_timeout = std::chrono::seconds(2);
    w::InitFromEnv(o);  // the peer never comes
  }
  return 0;
}

// Deterministic training with checkpoints every EVERY steps; rank 0 logs
// "step S" lines to LOG and writes the final parameters to DIR/final.bin.
// Env SLOW_MS slows each step; CRASH_AT_SAVE_STEP=k makes rank 0 SIGKILL
// itself between fsync and rename of checkpoint k.
int Train(const std::string& dir, int total, int every, const std::string& log,
          bool sharded) {
  w::World world = w::InitFromEnv();
  const int r = world.rank();
  torch::manual_seed(100 + r);  // per-rank dropout stream
  torch::nn::Sequential net(
      torch::nn::Linear(64, 512),
      torch::nn::Dropout(std::getenv("NO_DROPOUT") ? 0.0 : 0.2),
      torch::nn::ReLU(), torch::nn::Linear(512, 10));
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-3));
  w::ShardedAdamOptions zo;
  zo.reduce_gradients = false;  // DDP already averaged
  w::ShardedAdam zero(world, net->parameters(), zo);
  w::Checkpointer cp(world, {dir, every, 2});
  if (const char* c = std::getenv("CRASH_AT_SAVE_STEP")) {
    std::string target = "ckpt-" + std::string(12 - std::strlen(c), '0') + c;
    w::Checkpointer::SetBeforeRenameHookForTesting(
        [target](const std::string& tmp) {
          if (tmp.find(target) != std::string::npos) raise(SIGKILL);
        });
  }
  w::CheckpointParts parts;
  parts.model = net.ptr().get();
  if (sharded) {
    parts.sharded_optimizer = &zero;
  } else {
    parts.optimizer = &adam;
  }
  int start = 0;
  w::DdpOptions ddp_options;
  if (auto st = cp.LoadLatest(parts)) {
    start = static_cast<int>(st->step);
    // As TrainerSession does: the first step after a resume buckets the
    // gradients as the saving run's steps did.
    ddp_options.layout = st->bucket_layout;
  }
  w::DistributedDataParallel ddp(world, net.ptr(), ddp_options);
  parts.ddp = &ddp;
  std::printf("rank %d resumed from step %d\n", r, start);
  std::fflush(stdout);
  const char* slow = std::getenv("SLOW_MS");
  for (int s = start + 1; s <= total; ++s) {
    auto gen = at::detail::createCPUGenerator(1000 * s + r);
    at::Tensor x = at::randn({16, 64}, gen);
    at::Tensor y = at::randint(0, 10, {16}, gen);
    if (sharded) {
      zero.ZeroGrad();
    } else {
      adam.zero_grad();
    }
    ddp.Backward(torch::nn::functional::cross_entropy(net->forward(x), y));
    if (sharded) {
      zero.Step();
    } else {
      adam.step();
    }
    if (r == 0) {
      FILE* f = std::fopen(log.c_str(), "a");
      std::fprintf(f, "step %d\n", s);
      std::fclose(f);
    }
    if (slow) usleep(std::atoi(slow) * 1000);
    if (cp.ShouldSave(s)) cp.Save({0, s, s, {{"lr", 1e-3}}}, parts);
  }
  if (r == 0) WriteFloats(dir + "/final.bin", FlatParams(*net));
  return 0;
}

// This process's peak resident size so far (VmHWM), in KiB.
long PeakRssKib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long kib = 0;
  while (status >> key) {
    if (key == "VmHWM:") {
      status >> kib;
      return kib;
    }
    status.ignore(1 << 16, '\n');
  }
  return 0;
}

// An N x N linear layer saved to DIR at step 1 ("save"), or loaded from
// there into a fresh one ("load"), which prints how far the load raised
// the process's peak memory: "load_peak_kib K file_kib F".
int CheckpointMemory(const std::string& dir, const std::string& what, int n) {
  w::World world;
  torch::nn::Linear net(torch::nn::LinearOptions(n, n).bias(false));
  w::CheckpointParts parts;
  parts.model = net.ptr().get();
  parts.rng = false;
  w::Checkpointer cp(world, {dir, 1, 1});
  if (what == "save") {
    cp.Save({0, 1, 1, {}}, parts);
    return 0;
  }
  net->weight.detach().zero_();  // touched: counted before the load
  const long before = PeakRssKib();
  CHECK_OR_THROW(cp.LoadLatest(parts).has_value(), "no checkpoint to load");
  const long after = PeakRssKib();
  struct stat st {};
  ::stat((dir + "/ckpt-000000000001.pt").c_str(), &st);
  std::printf("load_peak_kib %ld file_kib %ld\n", after - before,
              static_cast<long>(st.st_size / 1024));
  CHECK_OR_THROW(net->weight.abs().sum().item<double>() > 0,
                 "the load did not restore the weights");
  return 0;
}

// ShardedAdam (no DDP, gradients reduced by the optimizer; `mode`
// "sharded", or "offload": state and update on the CPU) on N ranks x batch B
// vs torch::optim::AdamW ("plain") on one process x batch N*B.
int Zero(const std::string& out, int steps, int batch, const std::string& mode,
         double clip) {
  const bool sharded = mode != "plain";
  w::World world = w::InitFromEnv();
  // Different init per rank: ShardedAdam must broadcast rank 0's.
  torch::manual_seed(5 + (sharded ? world.rank() : 0));
  Net net(false);
  int n = world.world_size(), r = world.rank();
  std::unique_ptr<torch::optim::AdamW> plain;
  std::unique_ptr<w::ShardedAdam> zero;
  if (sharded) {
    w::ShardedAdamOptions o;
    o.lr = 0.01;
    o.weight_decay = 0.01;
    o.decoupled_weight_decay = true;
    o.offload_to_cpu = mode == "offload";
    zero = std::make_unique<w::ShardedAdam>(world, net->parameters(), o);
  } else {
    plain = std::make_unique<torch::optim::AdamW>(
        net->parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.01));
  }
  int64_t global = static_cast<int64_t>(batch) * n;
  Data d = MakeData(global * steps);
  for (int s = 0; s < steps; ++s) {
    at::Tensor x = d.x.narrow(0, s * global + r * batch, batch);
    at::Tensor y = d.y.narrow(0, s * global + r * batch, batch);
    at::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    if (sharded) {
      zero->ZeroGrad();
      loss.backward();
      zero->Step(clip);
    } else {
      plain->zero_grad();
      loss.backward();
      if (clip > 0) torch::nn::utils::clip_grad_norm_(net->parameters(), clip);
      plain->step();
    }
  }
  int64_t numel = FlatParams(*net).numel();
  if (r == 0) WriteFloats(out, FlatParams(*net));
  const long long bytes = sharded ? zero->state_bytes() : 2 * 4 * numel;
  std::printf(
      "rank %d numel %lld state_bytes %lld device_state_bytes %lld\n", r,
      static_cast<long long>(numel), bytes,
      sharded ? static_cast<long long>(zero->device_state_bytes()) : bytes);
  return 0;
}

// Conv -> SyncBatchNorm -> ReLU -> Linear under DDP; N ranks x batch B vs
// one process x batch N*B. Rank 0 writes parameters and running stats.
int SyncBn(const std::string& out, int steps, int batch, int dims) {
  w::World world = w::InitFromEnv();
  torch::manual_seed(11);
  int n = world.world_size(), r = world.rank();
  w::SyncBatchNorm bn(world, w::SyncBatchNormOptions{4});
  int64_t spatial = dims == 3 ? 4 * 4 * 4 : 8 * 8;
  torch::nn::Linear fc(4 * spatial, 3);
  torch::nn::Sequential net;
  if (dims == 3) {
    net->push_back(
        torch::nn::Conv3d(torch::nn::Conv3dOptions(1, 4, 3).padding(1)));
  } else {
    net->push_back(
        torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)));
  }
  net->push_back(bn);
  net->push_back(torch::nn::ReLU());
  net->push_back(torch::nn::Flatten());
  net->push_back(fc);
  w::DistributedDataParallel ddp(world, net.ptr());
  // DDP attaches its shared memory group to the World that SyncBatchNorm's
  // statistics all-reduces go through.
  std::printf("rank %d world collectives %s\n", r,
              world.shared_memory() ? "shared_memory" : "process_group");
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  int64_t global = static_cast<int64_t>(batch) * n;
  auto gen = at::detail::createCPUGenerator(77);
  std::vector<int64_t> shape =
      dims == 3 ? std::vector<int64_t>{global * steps, 1, 4, 4, 4}
                : std::vector<int64_t>{global * steps, 1, 8, 8};
  at::Tensor xs = at::randn(shape, gen) * 3 + 1;
  at::Tensor ys = at::randint(0, 3, {global * steps}, gen);
  for (int s = 0; s < steps; ++s) {
    at::Tensor x = xs.narrow(0, s * global + r * batch, batch);
    at::Tensor y = ys.narrow(0, s * global + r * batch, batch);
    sgd.zero_grad();
    ddp.Backward(torch::nn::functional::cross_entropy(net->forward(x), y));
    sgd.step();
  }
  if (world.world_size() == 1) {
    // Standalone SyncBatchNorm must equal torch's BatchNorm.
    torch::nn::BatchNorm2d ref(4);
    w::SyncBatchNorm mine(world, w::SyncBatchNormOptions{4});
    at::Tensor x1 = at::randn({6, 4, 5, 5}, gen).requires_grad_();
    at::Tensor x2 = x1.detach().clone().requires_grad_();
    at::Tensor g = at::randn({6, 4, 5, 5}, gen);
    at::Tensor y1 = ref->forward(x1), y2 = mine->forward(x2);
    (y1 * g).sum().backward();
    (y2 * g).sum().backward();
    CHECK_OR_THROW(at::allclose(y1, y2, 1e-4, 1e-5), "bn forward");
    CHECK_OR_THROW(at::allclose(x1.grad(), x2.grad(), 1e-4, 1e-5), "bn dx");
    CHECK_OR_THROW(
        at::allclose(ref->weight.grad(), mine->weight.grad(), 1e-4, 1e-4),
        "bn dweight");
    CHECK_OR_THROW(
        at::allclose(ref->running_var, mine->running_var, 1e-5, 1e-6),
        "bn running_var");
  }
  if (r == 0) {
    WriteFloats(out,
                at::cat({FlatParams(*net), bn->running_mean, bn->running_var}));
  }
  return 0;
}

// bf16 CPU autocast: a Linear inside the scope computes in bfloat16, outside
// it in float32; ClipGradNorm and ScaleLearningRate do their arithmetic.
int Amp() {
  torch::nn::Linear lin(8, 4);
  at::Tensor x = at::randn({2, 8});
  {
    w::AutocastScope scope(true, "cpu", "bf16");
    CHECK_OR_THROW(lin->forward(x).scalar_type() == at::kBFloat16,
                   "autocast bf16");
  }
  CHECK_OR_THROW(lin->forward(x).scalar_type() == at::kFloat, "autocast off");
  {
    // A scope restores autocast's dtype as well as its flag. LibTorch
    // 1.13's CPU autocast takes bfloat16 only; CUDA's state is thread-local
    // and settable without a GPU (no op runs under it here).
    const c10::DeviceType cuda = c10::DeviceType::CUDA;
    w::torch_compat::SetAutocastDtype(cuda, at::kBFloat16);
    {
      w::AutocastScope scope(true, c10::Device(c10::kCUDA), at::kHalf);
      CHECK_OR_THROW(w::torch_compat::AutocastDtype(cuda) == at::kHalf,
                     "autocast dtype set");
    }
    CHECK_OR_THROW(w::torch_compat::AutocastDtype(cuda) == at::kBFloat16,
                   "autocast dtype restored");
    CHECK_OR_THROW(!w::torch_compat::AutocastEnabled(cuda),
                   "autocast flag restored");
    w::torch_compat::SetAutocastDtype(cuda, at::kHalf);
  }
  {
    // What the trainers use: bf16 on the world's device (CPU here).
    w::AutocastScope scope(true, w::World().device());
    CHECK_OR_THROW(lin->forward(x).scalar_type() == at::kBFloat16,
                   "autocast bf16 on the world device");
  }
  CHECK_OR_THROW(lin->forward(x).scalar_type() == at::kFloat,
                 "autocast off after the device scope");
  lin->forward(x).sum().mul(1000).backward();
  double norm = w::ClipGradNorm(lin->parameters(), 1.0);
  double after = 0;
  for (auto& p : lin->parameters())
    after += p.grad().pow(2).sum().item<double>();
  CHECK_OR_THROW(norm > 1.0 && std::abs(std::sqrt(after) - 1.0) < 1e-3,
                 "clip grad norm");
  CHECK_OR_THROW(w::ScaleLearningRate(1e-4, 4) == 4e-4, "linear lr scaling");
  // GradScaler: scaled backward + Unscale gives the plain gradients; an
  // overflow skips the step and halves the scale.
  w::World world;
  w::GradScalerOptions so;
  so.init_scale = 1024;
  so.growth_interval = 2;
  w::GradScaler scaler(world, so);
  at::Tensor xin = at::randn({3, 8});
  for (auto& p : lin->parameters()) p.mutable_grad() = at::Tensor();
  lin->forward(xin).sum().backward();
  at::Tensor plain = lin->weight.grad().clone();
  for (auto& p : lin->parameters()) p.mutable_grad() = at::Tensor();
  scaler.Scale(lin->forward(xin).sum()).backward();
  CHECK_OR_THROW(scaler.Unscale(lin->parameters()), "finite grads");
  CHECK_OR_THROW(at::allclose(lin->weight.grad(), plain, 1e-5, 1e-6),
                 "unscaled grads");
  scaler.Update();
  scaler.Update();
  CHECK_OR_THROW(scaler.scale() == 2048, "scale growth");
  for (auto& p : lin->parameters()) p.mutable_grad() = at::Tensor();
  scaler.Scale(lin->forward(xin).sum() * 1e38f).backward();
  CHECK_OR_THROW(!scaler.Unscale(lin->parameters()), "overflow detected");
  scaler.Update();
  CHECK_OR_THROW(scaler.scale() == 1024, "scale backoff");
  std::printf("amp ok\n");
  return 0;
}

// Hosts a TCPStore on PORT for SECONDS, as a launcher's agent does.
int HostStore(int port, int seconds) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = true;
  o.waitWorkers = false;
  // Through the worker's compatibility layer: Torch >= 2.4 would otherwise
  // ask for a libuv server that Debian's 2.6 does not have.
  auto store = w::torch_compat::MakeTcpStore("127.0.0.1", o);
  std::printf("store up\n");
  std::fflush(stdout);
  sleep(seconds);
  return 0;
}

// DDP's one bucket rebuild (by the order the gradients became ready in)
// must land in the step whose backward recorded that order: prints the
// layout before any step and after the first, on a model whose gradients
// become ready in another order than its parameters' reversed (the first
// registered layer runs last).
int DdpRebuildStep() {
  w::World world = w::InitFromEnv();
  torch::nn::Sequential net;
  torch::nn::Linear last(3, 2), first(4, 3);
  net->push_back(last);   // registered first: parameters 0 and 1
  net->push_back(first);  // parameters 2 and 3
  w::DdpOptions opts;
  opts.bucket_cap_mb = 0.00002;  // 20 B: one parameter or two per bucket
  w::DistributedDataParallel ddp(world, net.ptr(), opts);
  auto show = [&](const char* when) {
    std::string s;
    for (const auto& bucket : ddp.bucket_layout()) {
      s += "[";
      for (size_t i : bucket) s += std::to_string(i) + " ";
      s += "]";
    }
    std::printf("rank %d %s %s\n", world.rank(), when, s.c_str());
  };
  show("before");
  ddp.Backward(last(first(at::ones({2, 4}))).sum());
  show("after_step_1");
  std::fflush(stdout);
  return 0;
}

// What a rank meets when it writes to a peer that died mid-collective (Gloo
// sends without MSG_NOSIGNAL): a write to a socket whose other end is gone.
// The rank must live on and see EPIPE; then the world still all-reduces.
int WriteToClosedSocket() {
  w::World world = w::InitFromEnv();
  int fds[2];
  CHECK_OR_THROW(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0, "socketpair");
  close(fds[1]);
  const char byte = 'x';
  const ssize_t n = write(fds[0], &byte, 1);
  const int err = errno;
  close(fds[0]);
  CHECK_OR_THROW(n < 0 && err == EPIPE, "the write did not fail with EPIPE");
  at::Tensor t = at::ones({4});
  world.AllReduce(t);
  CHECK_OR_THROW(t[0].item<float>() == world.world_size(), "all-reduce sum");
  std::printf("rank %d lived on: EPIPE\n", world.rank());
  return 0;
}

// A parameter that is not on the world's device (meta here; a CPU model
// under NCCL on a GPU machine): DDP must say so, not "the model differs".
int DdpDevice() {
  w::World world = w::InitFromEnv();
  struct Off : torch::nn::Module {
    Off() { register_parameter("w", at::empty({2}, at::device(at::kMeta))); }
  };
  auto m = std::make_shared<Off>();
  w::DistributedDataParallel ddp(world, m);
  return 0;
}

// SyncBatchNorm on rank r's part of a global batch whose values sit at
// OFFSET with standard deviation 0.01 (|mean| >> std): outputs and running
// variance must match a float64 batch norm of the whole batch.
int SyncBnOffset(double offset, int batch) {
  w::World world = w::InitFromEnv();
  const int n = world.world_size(), r = world.rank();
  auto gen = at::detail::createCPUGenerator(99);
  at::Tensor all =
      (at::randn({batch * n, 3, 4, 4}, gen) * 0.01 + offset).to(at::kFloat);
  at::Tensor mine = all.narrow(0, r * batch, batch);
  w::SyncBatchNormOptions o{3};
  o.momentum = 1.0;  // running stats = this batch's
  w::SyncBatchNorm bn(world, o);
  at::Tensor y = bn->forward(mine);
  at::Tensor xd = all.to(at::kDouble);
  at::Tensor mean = xd.mean({0, 2, 3}, true);
  at::Tensor var = xd.var({0, 2, 3}, /*unbiased=*/false, true);
  at::Tensor ref =
      ((xd - mean) / (var + 1e-5).sqrt()).narrow(0, r * batch, batch);
  const double err = (y.to(at::kDouble) - ref).abs().max().item<double>();
  at::Tensor unbiased = xd.var({0, 2, 3}, /*unbiased=*/true);
  const double var_err =
      ((bn->running_var.to(at::kDouble) - unbiased).abs() / unbiased)
          .max()
          .item<double>();
  std::printf("rank %d max_err %.3g running_var_rel_err %.3g\n", r, err,
              var_err);
  CHECK_OR_THROW(err < 2e-2, "sync batch norm output far from float64's");
  CHECK_OR_THROW(var_err < 1e-2, "running variance far from float64's");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return w::RunMain([&]() -> int {
    std::vector<std::string> a(argv, argv + argc);
    if (a.size() < 2) throw w::ConfigError("usage: rank_helper MODE ...");
    const std::string& mode = a[1];
    if (mode == "collectives") {
      return Collectives(a.size() > 2 && a[2] == "shm");
    }
    if (mode == "ddp") {
      return Ddp(a.at(2), std::stoi(a.at(3)), std::stoi(a.at(4)),
                 a.size() > 5 ? std::stoi(a[5]) : 1, a.size() > 6 ? a[6] : "");
    }
    if (mode == "sampler") {
      return Sampler(std::stoll(a.at(2)), std::stoi(a.at(3)),
                     std::stoi(a.at(4)), a.at(5) == "1", a.at(6) == "1");
    }
    if (mode == "throw") return Throw(a.at(2));
    if (mode == "train") {
      return Train(a.at(2), std::stoi(a.at(3)), std::stoi(a.at(4)), a.at(5),
                   a.size() > 6 && a[6] == "sharded");
    }
    if (mode == "syncbn") {
      return SyncBn(a.at(2), std::stoi(a.at(3)), std::stoi(a.at(4)),
                    std::stoi(a.at(5)));
    }
    if (mode == "ckpt_memory") {
      return CheckpointMemory(a.at(2), a.at(3), std::stoi(a.at(4)));
    }
    if (mode == "amp") return Amp();
    if (mode == "host_store") {
      return HostStore(std::stoi(a.at(2)), std::stoi(a.at(3)));
    }
    if (mode == "zero") {
      return Zero(a.at(2), std::stoi(a.at(3)), std::stoi(a.at(4)), a.at(5),
                  a.size() > 6 ? std::stod(a[6]) : 0.0);
    }
    if (mode == "ddp_device") return DdpDevice();
    if (mode == "closed_socket") return WriteToClosedSocket();
    if (mode == "ddp_rebuild") return DdpRebuildStep();
    if (mode == "heal") return HealTraining(a.at(2), std::stoll(a.at(3)));
    if (mode == "ckpt_digest") return CheckpointDigest(a.at(2));
    if (mode == "syncbn_offset") {
      return SyncBnOffset(std::stod(a.at(2)), std::stoi(a.at(3)));
    }
    throw w::ConfigError("unknown mode " + mode);
  });
}
