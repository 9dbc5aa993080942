#include "ddprun/worker/ddp.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_map>

#include <ATen/ATen.h>
#include <gloo/common/error.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/module.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include "common/logging.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/shared_memory_group.h"
#include "ddprun/worker/shared_memory_join.h"
#include "ddprun/worker/stack_dump.h"
#include "torch_compat.h"

namespace ddprun::worker {
namespace {

constexpr size_t kBroadcastBucketBytes = 250u << 20;  // Python's default

size_t MbToBytes(double mb) { return static_cast<size_t>(mb * 1024 * 1024); }

// Averages a gradient bucket through the shared memory group, synchronously
// on the autograd thread (the reducer launches buckets in the same order on
// every rank). With a comm hook the reducer leaves the division by the world
// size to the hook, as Python's builtin ALLREDUCE hook does. A bucket the
// group cannot take (CUDA, half precision) goes to the process group.
class SharedMemoryAllReduceHook : public c10d::CommHookInterface {
 public:
  SharedMemoryAllReduceHook(std::shared_ptr<SharedMemoryGroup> group,
                            c10::intrusive_ptr<c10d::ProcessGroup> pg)
      : group_(std::move(group)), pg_(std::move(pg)) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(
      c10d::GradBucket& bucket) override {
    at::Tensor& t = bucket.getBufferRef();
    if (!SharedMemoryReducible(t)) {
      t.div_(group_->size());
      std::vector<at::Tensor> tensors{t};
      return pg_->allreduce(tensors)->getFuture();
    }
    const size_t n = static_cast<size_t>(t.numel());
    Status s = t.scalar_type() == at::kFloat
                   ? group_->AllReduceSum(t.data_ptr<float>(), n,
                                          1.0f / group_->size())
                   : group_->AllReduceSum(t.data_ptr<double>(), n,
                                          1.0 / group_->size());
    // c10::Error: the reducer's caller (Backward) turns it into a
    // CollectiveError naming the rank.
    TORCH_CHECK(s.ok(), s.message());
    auto future =
        c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
    future->markCompleted(c10::IValue(t));
    return future;
  }

  at::Tensor parseHookResult(const c10::IValue& result) override {
    return result.isTensor() ? result.toTensor() : result.toTensorVector()[0];
  }

 private:
  std::shared_ptr<SharedMemoryGroup> group_;
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
};

// Rank `root`'s bucket layout on every rank (a broadcast of its encoding).
// Throws WorkerError when it does not name every parameter once.
std::vector<std::vector<size_t>> SharedLayout(
    const World& world, int root, const std::vector<std::vector<size_t>>& mine,
    size_t params) {
  at::Tensor data;
  if (world.rank() == root) data = EncodeBucketLayout(mine);
  at::Tensor size =
      at::tensor({world.rank() == root ? data.numel() : int64_t{0}}, at::kLong);
  world.Broadcast(size, root);
  if (world.rank() != root) data = at::zeros({size.item<int64_t>()}, at::kLong);
  world.Broadcast(data, root);
  std::optional<std::vector<std::vector<size_t>>> layout =
      DecodeBucketLayout(data, params);
  if (!layout) {
    throw WorkerError("DistributedDataParallel: rank " + std::to_string(root) +
                      "'s bucket layout does not name each of the " +
                      std::to_string(params) + " parameters once");
  }
  return *std::move(layout);
}

}  // namespace

at::Tensor EncodeBucketLayout(const std::vector<std::vector<size_t>>& layout) {
  std::vector<int64_t> flat;
  flat.push_back(static_cast<int64_t>(layout.size()));
  for (const auto& bucket : layout) flat.push_back(bucket.size());
  for (const auto& bucket : layout)
    flat.insert(flat.end(), bucket.begin(), bucket.end());
  return at::tensor(flat, at::kLong);
}

std::optional<std::vector<std::vector<size_t>>> DecodeBucketLayout(
    const at::Tensor& encoded, size_t params) {
  if (!encoded.defined() || encoded.dim() != 1 ||
      encoded.scalar_type() != at::kLong) {
    return std::nullopt;
  }
  const at::Tensor data = encoded.to(c10::kCPU).contiguous();
  const int64_t* v = data.data_ptr<int64_t>();
  const int64_t n = data.numel();
  std::vector<std::vector<size_t>> layout;
  std::vector<bool> seen(params, false);
  bool ok = n >= 1 && v[0] >= 0 && v[0] < n;
  int64_t at = ok ? 1 + v[0] : 0;
  for (int64_t b = 0; ok && b < v[0]; ++b) {
    ok = v[1 + b] >= 0 && v[1 + b] <= n;
    layout.emplace_back();
    for (int64_t i = 0; ok && i < v[1 + b]; ++i, ++at) {
      ok = at < n && v[at] >= 0 && static_cast<uint64_t>(v[at]) < params &&
           !seen[v[at]];
      if (ok) {
        seen[v[at]] = true;
        layout.back().push_back(static_cast<size_t>(v[at]));
      }
    }
  }
  ok =
      ok && at == n && std::find(seen.begin(), seen.end(), false) == seen.end();
  if (!ok) return std::nullopt;
  return layout;
}

struct DistributedDataParallel::Impl {
  std::vector<at::Tensor> params;   // requires_grad, in module order
  std::vector<at::Tensor> buffers;  // module buffers
  std::shared_ptr<c10d::Reducer> reducer;
  // The reducer reports through a Logger (as Python's DDP gives it one),
  // e.g. when the set of unused parameters changes between steps; without
  // one that report dereferences a null pointer.
  std::shared_ptr<c10d::Logger> logger;
  // Set when every rank is on this host (DdpOptions::shared_memory).
  std::shared_ptr<SharedMemoryGroup> shm;
  std::string why_not_shm;
  // Buffers all CPU and contiguous: broadcast through `shm`.
  bool buffers_on_shm = false;
};

DistributedDataParallel::DistributedDataParallel(
    World world, std::shared_ptr<torch::nn::Module> module, DdpOptions options)
    : world_(std::move(world)),
      module_(std::move(module)),
      options_(options),
      impl_(std::make_unique<Impl>()) {
  if (!module_) throw ConfigError("DistributedDataParallel: null module");
  if (options_.bucket_cap_mb <= 0 || options_.first_bucket_cap_mb <= 0) {
    throw ConfigError("DistributedDataParallel: bucket sizes must be > 0 MB");
  }
  for (auto& p : module_->parameters()) {
    if (p.requires_grad()) impl_->params.push_back(p);
  }
  for (auto& b : module_->buffers()) impl_->buffers.push_back(b);
  auto pg = world_.process_group();
  if (!pg) return;  // standalone: plain backward

  // The reducer's buckets and the backend live on the world's device; a
  // parameter elsewhere fails inside Torch with a message about backends or
  // a "model that differs between ranks".
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    const at::Tensor& p = impl_->params[i];
    if (p.device() != world_.device()) {
      throw ConfigError(
          "DistributedDataParallel: parameter " + std::to_string(i) + " " +
          c10::str(p.sizes()) + " is on " + p.device().str() +
          " but the world's device is " + world_.device().str() + " (backend " +
          world_.backend() +
          "): move the model to world.device() (module->to(world.device())) "
          "before wrapping it, and its batches too");
    }
  }

  try {
    c10d::verify_params_across_processes(pg, impl_->params, {});
  } catch (const c10::Error& e) {
    throw ConfigError(std::string("DistributedDataParallel: the model differs "
                                  "between ranks: ") +
                      e.what_without_backtrace());
  } catch (const std::exception& e) {
    // Gloo's own errors: a peer failed during the check.
    throw CollectiveError(
        std::string("DistributedDataParallel: checking the model across "
                    "ranks failed on rank ") +
        std::to_string(world_.rank()) + ": " + e.what());
  }
  if (options_.broadcast_initial_state) BroadcastState();

  size_t cap = MbToBytes(options_.bucket_cap_mb);
  size_t first_cap = std::min(cap, MbToBytes(options_.first_bucket_cap_mb));
  std::vector<bool> sparse(impl_->params.size(), false);
  // Same construction as torch.nn.parallel.DistributedDataParallel 1.13:
  // buckets computed in parameter order then reversed, because backward
  // produces gradients roughly in reverse order.
  auto [indices, limits] = c10d::compute_bucket_assignment_by_size(
      impl_->params, {first_cap, cap}, sparse);
  std::reverse(indices.begin(), indices.end());
  std::reverse(limits.begin(), limits.end());
  std::optional<std::vector<std::vector<size_t>>> given;
  if (options_.layout_root >= 0) {
    given = SharedLayout(world_, options_.layout_root, options_.layout,
                         impl_->params.size());
  } else if (!options_.layout.empty()) {
    given = DecodeBucketLayout(EncodeBucketLayout(options_.layout),
                               impl_->params.size());
    if (!given && world_.rank() == 0) {
      DDP_LOG(WARNING) << "DistributedDataParallel: the bucket layout given "
                          "(a checkpoint's) does not name each of the "
                       << impl_->params.size()
                       << " parameters that require grad once; the buckets "
                          "are computed";
    }
  }
  if (given) {
    indices = *std::move(given);
    limits.assign(indices.size(), cap);
    if (!limits.empty()) limits.front() = first_cap;
  }
  torch_compat::ReducerArgs args;
  args.params = impl_->params;
  args.bucket_indices = std::move(indices);
  args.bucket_size_limits = std::move(limits);
  args.expect_sparse_gradients = std::move(sparse);
  args.bucket_bytes_cap = static_cast<int64_t>(cap);
  args.first_bucket_bytes_cap = static_cast<int64_t>(first_cap);
  args.find_unused_parameters = options_.find_unused_parameters;
  impl_->reducer = torch_compat::MakeReducer(std::move(args), pg);
  impl_->logger = std::make_shared<c10d::Logger>(impl_->reducer);
  impl_->reducer->set_logger(impl_->logger);

  // Decided by every rank alike: options and the job's environment.
  if (!options_.shared_memory || !SharedMemoryAllowedByEnv()) {
    impl_->why_not_shm = "turned off";
    return;
  }
  // The group reduces host memory: a CUDA model's gradients would go
  // through the process group anyway (every rank's device type is alike).
  if (!world_.device().is_cpu()) {
    impl_->why_not_shm = "the model is on " + world_.device().str();
    return;
  }
  // One group per job: a second DDP model (a GAN's two networks) reuses the
  // one the first joined and World's collectives already use.
  std::shared_ptr<SharedMemoryGroup> shm = world_.shared_memory();
  if (!shm) {
    shm = JoinSharedMemoryGroup(world_, world_.collective_timeout(),
                                &impl_->why_not_shm);
    if (!shm) return;
    world_.AttachSharedMemory(shm);
  }
  impl_->shm = shm;
  impl_->reducer->register_comm_hook(
      std::make_unique<SharedMemoryAllReduceHook>(shm, pg));
  impl_->buffers_on_shm = true;
  for (const at::Tensor& b : impl_->buffers) {
    if (!b.device().is_cpu() || !b.is_contiguous()) impl_->buffers_on_shm = false;
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::BroadcastState() {
  auto pg = world_.process_group();
  if (!pg) return;
  std::vector<at::Tensor> tensors;
  {
    at::NoGradGuard no_grad;
    for (auto& p : module_->parameters()) tensors.push_back(p.detach());
    for (auto& b : impl_->buffers) tensors.push_back(b.detach());
  }
  if (tensors.empty()) return;
  try {
    c10d::broadcast_coalesced(pg, tensors, kBroadcastBucketBytes, 0);
  } catch (const std::exception& e) {
    throw CollectiveError(std::string("DDP broadcast of rank 0's state: ") +
                          e.what());
  }
}

void DistributedDataParallel::Backward(const at::Tensor& loss) {
  Backward(loss, at::Tensor());
}

void DistributedDataParallel::Backward(const at::Tensor& output,
                                       const at::Tensor& grad) {
  auto& reducer = impl_->reducer;
  if (!reducer) {
    output.backward(grad);
    return;
  }
  // A stack dump of a rank stuck here names it: the gradients' all-reduce
  // runs inside backward (the reducer's hooks).
  ActivityScope activity("backward (DDP gradient all_reduce)");
  try {
    if (sync_enabled_) {
      reducer->prepare_for_forward();
      reducer->prepare_for_backward(options_.find_unused_parameters
                                        ? std::vector<at::Tensor>{output}
                                        : std::vector<at::Tensor>{});
    }
    output.backward(grad);
    // The one rebuild (by the order the gradients became ready in) goes at
    // the end of the step whose backward recorded that order, not at the
    // start of the next one as torch's DDP places it: its broadcast is then
    // a collective of the step it belongs to. Placed in step 2, a failure
    // there (a peer killed after step 1) left the survivors' buckets in
    // parameter order, and after the heal to step 1 the redone step 2
    // summed its gradients in another order than the uninterrupted run's
    // (equal to float rounding only); a checkpoint of step 1 kept the same
    // stale layout. Gradients stay in param.grad (no bucket views).
    if (sync_enabled_) reducer->rebuild_buckets();
  } catch (const WorkerError&) {
    throw;
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    // Reducer usage errors (unused parameters without
    // find_unused_parameters) are bugs of the caller, not restartable.
    if (msg.find("Expected to have finished reduction") != std::string::npos) {
      throw WorkerError("DDP: " + msg);
    }
    throw CollectiveError("DDP gradient all-reduce failed on rank " +
                          std::to_string(world_.rank()) + ": " + msg);
  } catch (const ::gloo::Exception& e) {
    // A Gloo bucket's all-reduce failed (a peer died): its error comes
    // through the reducer's future as Gloo threw it.
    throw CollectiveError("DDP gradient all-reduce failed on rank " +
                          std::to_string(world_.rank()) + ": " + e.what());
  }
  if (sync_enabled_ && options_.broadcast_buffers && !impl_->buffers.empty() &&
      impl_->buffers_on_shm) {
    std::vector<SharedMemoryGroup::Buffer> bufs;
    for (auto& b : impl_->buffers) bufs.push_back({b.data_ptr(), b.nbytes()});
    Status s = impl_->shm->Broadcast(bufs, 0);
    if (!s.ok()) {
      throw CollectiveError("DDP buffer broadcast on rank " +
                            std::to_string(world_.rank()) + ": " + s.message());
    }
    // Written through raw pointers: tell version-keyed caches (autocast's
    // weight cache, autograd's saved-tensor checks), as an in-place copy_
    // would.
    for (auto& b : impl_->buffers) b.unsafeGetTensorImpl()->bump_version();
  } else if (sync_enabled_ && options_.broadcast_buffers &&
             !impl_->buffers.empty()) {
    std::vector<at::Tensor> bufs;
    for (auto& b : impl_->buffers) bufs.push_back(b.detach());
    try {
      c10d::broadcast_coalesced(world_.process_group(), bufs,
                                kBroadcastBucketBytes, 0);
    } catch (const std::exception& e) {
      throw CollectiveError(std::string("DDP buffer broadcast: ") + e.what());
    }
  }
}

std::vector<size_t> DistributedDataParallel::bucket_bytes() const {
  std::vector<size_t> out;
  if (!impl_->reducer) return out;
  for (auto& b :
       impl_->reducer->get_grad_buckets(/*return_zero_tensors=*/true)) {
    out.push_back(b.getBuffer().nbytes());
  }
  return out;
}

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_layout()
    const {
  std::vector<std::vector<size_t>> layout;
  if (!impl_->reducer) return layout;
  std::unordered_map<const c10::TensorImpl*, size_t> index;
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    index[impl_->params[i].unsafeGetTensorImpl()] = i;
  }
  for (auto& b :
       impl_->reducer->get_grad_buckets(/*return_zero_tensors=*/true)) {
    layout.emplace_back();
    for (const at::Tensor& p : b.getParameters()) {
      layout.back().push_back(index.at(p.unsafeGetTensorImpl()));
    }
  }
  return layout;
}

const char* DistributedDataParallel::gradient_transport() const {
  if (!impl_->reducer) return "none";
  return impl_->shm ? "shared_memory" : "process_group";
}

const std::string& DistributedDataParallel::why_not_shared_memory() const {
  return impl_->why_not_shm;
}

DistributedDataParallel::NoSyncScope::NoSyncScope(DistributedDataParallel* ddp)
    : ddp_(ddp), previous_(ddp->sync_enabled_) {
  ddp_->sync_enabled_ = false;
}

DistributedDataParallel::NoSyncScope::~NoSyncScope() {
  ddp_->sync_enabled_ = previous_;
}

}  // namespace ddprun::worker
