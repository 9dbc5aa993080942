// The one place where LibTorch's version differences live. The worker runtime
// builds against LibTorch 1.13 (Debian bookworm) through 2.11 (PyTorch
// wheels), CPU and CUDA; every call whose shape changed between those goes
// through a function here, so the rest of worker/ is written once.
//
// What changed, and how it is handled (torch_compat.cc):
//  - Torch 2.0 split process groups: ProcessGroupGloo/NCCL became
//    c10d::Backend objects that a c10d::ProcessGroup dispatches to, per
//    device type. MakeGlooGroup/MakeNcclGroup return a ProcessGroup either
//    way (on 1.13 the backend is one).
//  - The ProcessGroup constructor took an Options object up to Torch 2.3
//    and does not since; the c10d::Reducer constructor gained and lost
//    arguments several times. Both are picked at compile time by which
//    constructor exists (not by version number), so a release in between
//    builds too; an unknown shape fails with a static_assert naming this
//    file.
//  - Autocast moved to a per-device-type API in 2.4 (the old functions are
//    deprecated there). CPU autocast took only bfloat16 until 2.2, which
//    added float16 (pytorch/pytorch#112484).
// Internal to worker/: not installed, not included by public headers.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/DeviceType.h>
#include <c10/util/intrusive_ptr.h>

namespace c10d {
class ProcessGroup;
class Reducer;
class Store;
class TCPStore;
struct TCPStoreOptions;
}  // namespace c10d
namespace gloo::transport {
class Device;
}

namespace ddprun::worker::torch_compat {

// "MAJOR.MINOR.PATCH" of the LibTorch headers this was compiled against.
std::string TorchVersion();

// A c10d::TCPStore. Torch >= 2.4 serves it with libuv by default, and
// refuses to start where LibTorch was built without libuv (Debian's 2.6):
// like Python, USE_LIBUV=0 turns libuv off, and where it is missing the
// classic server is used instead of failing. Throws what TCPStore throws.
c10::intrusive_ptr<c10d::TCPStore> MakeTcpStore(
    const std::string& host, const c10d::TCPStoreOptions& options);

struct GlooGroupOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(1800)};
  // Transport devices (one per interface); at least one.
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  int threads = 0;  // 0: Torch's default
};

// A Gloo process group over `store`, for CPU tensors and (as Python's
// init_process_group("gloo") registers it) CUDA tensors, which Gloo reduces
// when Torch was built with CUDA. Throws what Torch throws (the caller wraps
// it into a CollectiveError).
c10::intrusive_ptr<c10d::ProcessGroup> MakeGlooGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const GlooGroupOptions& options);

// An NCCL process group over `store` on the current CUDA device. Throws
// std::runtime_error on a LibTorch built without CUDA.
c10::intrusive_ptr<c10d::ProcessGroup> MakeNcclGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout);

// Shuts `group` down cleanly at the end of a job where this LibTorch can
// (ProcessGroup::shutdown, Torch >= 2.3: NCCL's communicators are destroyed
// instead of aborted by ~ProcessGroupNCCL, which also warns); a no-op on
// older releases. Never throws (it runs from destructors).
void ShutdownProcessGroup(const c10::intrusive_ptr<c10d::ProcessGroup>& group);

// Drops a process group after a failure without a clean shutdown (restart
// scope "failed": a peer is dead, a clean shutdown could wait on it). NCCL:
// its communicators are aborted (ncclCommAbort) through
// ProcessGroup::abort (Torch >= 2.6) or ProcessGroupNCCL::abort (2.2-2.5);
// LibTorch 1.13 has neither, and ~ProcessGroupNCCL aborts them when the
// last reference goes. Gloo: nothing to abort, releasing the group closes
// its connections. Never throws; a null group is a no-op.
void AbortProcessGroup(const c10::intrusive_ptr<c10d::ProcessGroup>& group);

struct ReducerArgs {
  std::vector<at::Tensor> params;
  std::vector<std::vector<size_t>> bucket_indices;
  std::vector<size_t> bucket_size_limits;  // one per bucket, bytes
  std::vector<bool> expect_sparse_gradients;
  int64_t bucket_bytes_cap = 0;
  int64_t first_bucket_bytes_cap = 0;
  bool find_unused_parameters = false;
};

// c10d::Reducer (the engine under Python's DDP) with these arguments and
// every newer one at the value Python's DDP passes by default.
std::unique_ptr<c10d::Reducer> MakeReducer(
    ReducerArgs args, const c10::intrusive_ptr<c10d::ProcessGroup>& group);

// Autocast state for one device type (kCPU or kCUDA).
bool AutocastEnabled(c10::DeviceType device);
void SetAutocastEnabled(c10::DeviceType device, bool enabled);
void SetAutocastDtype(c10::DeviceType device, at::ScalarType dtype);
at::ScalarType AutocastDtype(c10::DeviceType device);
// Whether this LibTorch's autocast on `device` (kCPU or kCUDA) computes in
// `dtype` (kBFloat16 or kHalf): CUDA float16, and bfloat16 on the current
// GPU from compute capability 8.0 (Ampere) on, as torch.cuda.is_bf16_supported
// says (older GPUs emulate it, slowly or not at all); CPU bfloat16, and
// float16 from LibTorch 2.2 on.
bool AutocastSupports(c10::DeviceType device, at::ScalarType dtype);

}  // namespace ddprun::worker::torch_compat
