#include "torch_compat.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include <ATen/autocast_mode.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#include <torch/version.h>
#if DDPRUN_WORKER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ddprun::worker::torch_compat {
namespace {

template <typename>
inline constexpr bool kAlwaysFalse = false;

using ParamNames = std::unordered_map<size_t, std::string>;
using PgPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

template <typename T, typename = void>
struct HasSetGroupName : std::false_type {};
template <typename T>
struct HasSetGroupName<T, std::void_t<decltype(std::declval<T&>().setGroupName(
                              std::declval<std::string>()))>> : std::true_type {
};

// The ProcessGroup shell of Torch 2.x. Torch 2.0-2.3 take Options(backend
// name, timeout), later releases only the store, rank and size.
template <typename PG>
c10::intrusive_ptr<PG> NewProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const std::string& backend, std::chrono::milliseconds timeout) {
  if constexpr (std::is_constructible_v<PG, c10::intrusive_ptr<c10d::Store>,
                                        int, int>) {
    return c10::make_intrusive<PG>(store, rank, size);
  } else {
    auto options = c10::make_intrusive<typename PG::Options>(backend, timeout);
    return c10::make_intrusive<PG>(store, rank, size, options);
  }
}

template <typename T, typename = void>
struct HasShutdown : std::false_type {};
template <typename T>
struct HasShutdown<T, std::void_t<decltype(std::declval<T&>().shutdown())>>
    : std::true_type {};

template <typename T, typename = void>
struct HasUseLibUv : std::false_type {};
template <typename T>
struct HasUseLibUv<T, std::void_t<decltype(std::declval<T&>().useLibUV)>>
    : std::true_type {};

// Python's rule (torch.distributed.rendezvous): libuv unless USE_LIBUV says
// otherwise.
bool LibUvWanted() {
  const char* v = std::getenv("USE_LIBUV");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

template <typename Options = c10d::TCPStoreOptions>
c10::intrusive_ptr<c10d::TCPStore> NewTcpStore(const std::string& host,
                                               Options options) {
  if constexpr (!HasUseLibUv<Options>::value) {
    return c10::make_intrusive<c10d::TCPStore>(host, options);
  } else {
    options.useLibUV = options.useLibUV && LibUvWanted();
    try {
      return c10::make_intrusive<c10d::TCPStore>(host, options);
    } catch (const c10::Error& e) {
      // "use_libuv was requested but PyTorch was build without libuv
      // support": checked before any socket is opened, so a retry is clean.
      if (!options.useLibUV ||
          std::strstr(e.what(), "without libuv") == nullptr) {
        throw;
      }
      options.useLibUV = false;
      return c10::make_intrusive<c10d::TCPStore>(host, options);
    }
  }
}

enum class Kind { kGloo, kNccl };

// LibTorch 1.x: ProcessGroupGloo/NCCL are process groups. Torch >= 2.0:
// they are Backends, and this does what Python's init_process_group does
// with one: a ProcessGroup that dispatches to it for each device type it
// serves, with it as the default, named "0" like the default group (NCCL's
// logs and flight recorder use the name). PG is a template parameter so
// that only the branch this LibTorch has is compiled.
template <typename PG = c10d::ProcessGroup, typename B>
PgPtr AsProcessGroup(const c10::intrusive_ptr<B>& backend, Kind kind,
                     const std::vector<c10::DeviceType>& devices,
                     const c10::intrusive_ptr<c10d::Store>& store, int rank,
                     int size, std::chrono::milliseconds timeout) {
  if constexpr (std::is_base_of_v<PG, B>) {
    return backend;
  } else {
    const auto type = kind == Kind::kGloo ? PG::BackendType::GLOO
                                          : PG::BackendType::NCCL;
    c10::intrusive_ptr<PG> pg = NewProcessGroup<PG>(
        store, rank, size, kind == Kind::kGloo ? "gloo" : "nccl", timeout);
    pg->setDefaultBackend(type);
    for (c10::DeviceType d : devices) pg->setBackend(d, type, backend);
    if constexpr (HasSetGroupName<PG>::value) pg->setGroupName("0");
    return pg;
  }
}

// c10d::Reducer's constructor, newest shape first. The trailing arguments
// are Python DDP's defaults: no skipping of unused-parameter all-reduces, the
// C++ reducer, no per-bucket cap list, batched gradient copies off.
template <typename R = c10d::Reducer>
std::unique_ptr<R> NewReducer(ReducerArgs a, const PgPtr& pg) {
  using Indices = std::vector<std::vector<size_t>>;
  using Caps = std::vector<int64_t>;
  if constexpr (std::is_constructible_v<R, std::vector<at::Tensor>, Indices,
                                        PgPtr, std::vector<bool>, int64_t,
                                        bool, bool, ParamNames, int64_t, bool,
                                        bool, Caps, bool>) {
    return std::make_unique<R>(
        std::move(a.params), std::move(a.bucket_indices), pg,
        std::move(a.expect_sparse_gradients), a.bucket_bytes_cap,
        a.find_unused_parameters, /*gradient_as_bucket_view=*/false,
        ParamNames{}, a.first_bucket_bytes_cap,
        /*skip_all_reduce_unused_params=*/false,
        /*use_python_reducer=*/false, Caps{}, /*batched_grad_copy=*/false);
  } else if constexpr (std::is_constructible_v<R, std::vector<at::Tensor>,
                                               Indices, PgPtr,
                                               std::vector<bool>, int64_t,
                                               bool, bool, ParamNames, int64_t,
                                               bool, bool, Caps>) {
    return std::make_unique<R>(
        std::move(a.params), std::move(a.bucket_indices), pg,
        std::move(a.expect_sparse_gradients), a.bucket_bytes_cap,
        a.find_unused_parameters, /*gradient_as_bucket_view=*/false,
        ParamNames{}, a.first_bucket_bytes_cap,
        /*skip_all_reduce_unused_params=*/false,
        /*use_python_reducer=*/false, Caps{});
  } else if constexpr (std::is_constructible_v<
                           R, std::vector<at::Tensor>, Indices,
                           const std::vector<size_t>&, PgPtr,
                           std::vector<bool>, int64_t, bool, bool, ParamNames,
                           int64_t, bool, bool>) {
    return std::make_unique<R>(
        std::move(a.params), std::move(a.bucket_indices),
        a.bucket_size_limits, pg, std::move(a.expect_sparse_gradients),
        a.bucket_bytes_cap, a.find_unused_parameters,
        /*gradient_as_bucket_view=*/false, ParamNames{},
        a.first_bucket_bytes_cap, /*skip_all_reduce_unused_params=*/false,
        /*use_python_reducer=*/false);
  } else if constexpr (std::is_constructible_v<
                           R, std::vector<at::Tensor>, Indices,
                           const std::vector<size_t>&, PgPtr,
                           std::vector<bool>, int64_t, bool, bool, ParamNames,
                           int64_t, bool>) {
    return std::make_unique<R>(
        std::move(a.params), std::move(a.bucket_indices),
        a.bucket_size_limits, pg, std::move(a.expect_sparse_gradients),
        a.bucket_bytes_cap, a.find_unused_parameters,
        /*gradient_as_bucket_view=*/false, ParamNames{},
        a.first_bucket_bytes_cap, /*skip_all_reduce_unused_params=*/false);
  } else if constexpr (std::is_constructible_v<
                           R, std::vector<at::Tensor>, Indices,
                           const std::vector<size_t>&, PgPtr,
                           std::vector<bool>, int64_t, bool, bool, ParamNames,
                           int64_t>) {
    // LibTorch 1.13 through 2.6.
    return std::make_unique<R>(
        std::move(a.params), std::move(a.bucket_indices),
        a.bucket_size_limits, pg, std::move(a.expect_sparse_gradients),
        a.bucket_bytes_cap, a.find_unused_parameters,
        /*gradient_as_bucket_view=*/false, ParamNames{},
        a.first_bucket_bytes_cap);
  } else {
    static_assert(kAlwaysFalse<R>,
                  "this LibTorch's c10d::Reducer constructor is not known: "
                  "add its shape to worker/src/torch_compat.cc");
  }
}

}  // namespace

std::string TorchVersion() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." +
         std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

c10::intrusive_ptr<c10d::TCPStore> MakeTcpStore(
    const std::string& host, const c10d::TCPStoreOptions& options) {
  return NewTcpStore(host, options);
}

PgPtr MakeGlooGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                    int size, const GlooGroupOptions& options) {
  auto opts = c10d::ProcessGroupGloo::Options::create(options.timeout);
  opts->devices = options.devices;
  if (options.threads > 0) opts->threads = options.threads;
  auto gloo =
      c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
  return AsProcessGroup(gloo, Kind::kGloo,
                        {c10::DeviceType::CPU, c10::DeviceType::CUDA}, store,
                        rank, size, options.timeout);
}

PgPtr MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                    int size, std::chrono::milliseconds timeout) {
#if DDPRUN_WORKER_WITH_CUDA
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  auto nccl =
      c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
  return AsProcessGroup(nccl, Kind::kNccl, {c10::DeviceType::CUDA}, store,
                        rank, size, timeout);
#else
  (void)store, (void)rank, (void)size, (void)timeout;
  throw std::runtime_error("this LibTorch was built without CUDA: no NCCL");
#endif
}

template <typename PG = c10d::ProcessGroup>
void Shutdown(const c10::intrusive_ptr<PG>& group) {
  if constexpr (HasShutdown<PG>::value) {
    try {
      group->shutdown();
    } catch (...) {
      // The destructor's abort is what remains.
    }
  } else {
    (void)group;  // LibTorch < 2.3: ~ProcessGroupNCCL is the only way
  }
}

void ShutdownProcessGroup(const PgPtr& group) {
  if (group) Shutdown(group);
}

namespace {

template <typename T, typename = void>
struct HasAbort : std::false_type {};
template <typename T>
struct HasAbort<T, std::void_t<decltype(std::declval<T&>().abort())>>
    : std::true_type {};

template <typename T, typename = void>
struct HasGetBackend : std::false_type {};
template <typename T>
struct HasGetBackend<T, std::void_t<decltype(std::declval<T&>().getBackend(
                            c10::DeviceType::CUDA))>> : std::true_type {};

#if DDPRUN_WORKER_WITH_CUDA
// ProcessGroupNCCL::abort where the backend has it (2.2-2.5: its only
// abort; LibTorch 1.13: none).
template <typename N>
void AbortNccl(N* nccl) {
  if constexpr (HasAbort<N>::value) nccl->abort();
}

// The ProcessGroupNCCL behind `group`: the group itself on LibTorch 1.13,
// its CUDA backend on 2.x; null for a Gloo group.
template <typename PG = c10d::ProcessGroup>
c10d::ProcessGroupNCCL* NcclOf(const c10::intrusive_ptr<PG>& group) {
  if constexpr (HasGetBackend<PG>::value) {
    try {
      return dynamic_cast<c10d::ProcessGroupNCCL*>(
          group->getBackend(c10::DeviceType::CUDA).get());
    } catch (...) {
      return nullptr;  // no CUDA backend: a CPU-only Gloo group
    }
  } else {
    return dynamic_cast<c10d::ProcessGroupNCCL*>(group.get());
  }
}
#endif

template <typename PG = c10d::ProcessGroup>
void Abort(const c10::intrusive_ptr<PG>& group) {
#if DDPRUN_WORKER_WITH_CUDA
  try {
    if constexpr (HasAbort<PG>::value) {
      group->abort();  // every backend's; Gloo's is a no-op
    } else if (c10d::ProcessGroupNCCL* nccl = NcclOf(group)) {
      // LibTorch 1.13: ~ProcessGroupNCCL aborts the communicators.
      AbortNccl(nccl);
    }
  } catch (...) {
    // Releasing the group is what remains.
  }
#else
  (void)group;  // Gloo only: releasing the group closes its connections
#endif
}

}  // namespace

void AbortProcessGroup(const PgPtr& group) {
  if (group) Abort(group);
}

std::unique_ptr<c10d::Reducer> MakeReducer(ReducerArgs args,
                                           const PgPtr& group) {
  return NewReducer(std::move(args), group);
}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)

bool AutocastEnabled(c10::DeviceType device) {
  return at::autocast::is_autocast_enabled(device);
}
void SetAutocastEnabled(c10::DeviceType device, bool enabled) {
  at::autocast::set_autocast_enabled(device, enabled);
}
void SetAutocastDtype(c10::DeviceType device, at::ScalarType dtype) {
  at::autocast::set_autocast_dtype(device, dtype);
}
at::ScalarType AutocastDtype(c10::DeviceType device) {
  return at::autocast::get_autocast_dtype(device);
}

#else  // LibTorch < 2.4: one function per device type

bool AutocastEnabled(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                         : at::autocast::is_cpu_enabled();
}
void SetAutocastEnabled(c10::DeviceType device, bool enabled) {
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
}
void SetAutocastDtype(c10::DeviceType device, at::ScalarType dtype) {
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
}
at::ScalarType AutocastDtype(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA
             ? at::autocast::get_autocast_gpu_dtype()
             : at::autocast::get_autocast_cpu_dtype();
}

#endif

bool AutocastSupports(c10::DeviceType device, at::ScalarType dtype) {
  if (dtype != at::kBFloat16 && dtype != at::kHalf) return false;
  if (device == c10::DeviceType::CUDA) {
    if (dtype == at::kHalf) return true;
#if DDPRUN_WORKER_WITH_CUDA
    const cudaDeviceProp* p = at::cuda::getCurrentDeviceProperties();
    return p != nullptr && p->major >= 8;
#else
    return false;  // no CUDA autocast without CUDA
#endif
  }
  if (device != c10::DeviceType::CPU) return false;
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  return true;
#else
  return dtype == at::kBFloat16;
#endif
}

}  // namespace ddprun::worker::torch_compat
