#include "ddprun/worker/backend_choice.h"

namespace ddprun::worker {
namespace {

std::string Gpus(int n) {
  return std::to_string(n) + (n == 1 ? " visible GPU" : " visible GPUs");
}

}  // namespace

StatusOr<BackendChoice> ChooseBackend(const BackendFacts& f) {
  if (f.backend != "auto" && f.backend != "gloo" && f.backend != "nccl") {
    return InvalidArgumentError("unknown backend '" + f.backend +
                                "' (expected auto, gloo or nccl)");
  }
  if (f.device != "auto" && f.device != "cpu" && f.device != "cuda") {
    return InvalidArgumentError("unknown device '" + f.device +
                                "' (expected auto, cpu or cuda)");
  }
  const int gpus = f.torch_has_cuda ? f.visible_gpus : 0;
  const bool shared = gpus > 0 && !f.gpu_per_rank && f.local_world_size > gpus;
  BackendChoice c;
  c.backend = f.backend;
  if (c.backend == "auto") {
    if (gpus == 0 || f.device == "cpu") {
      c.backend = "gloo";
    } else if (shared) {
      c.backend = "gloo";
      c.why = "backend gloo on CUDA tensors: " +
              std::to_string(f.local_world_size) +
              " ranks on this node share " + Gpus(gpus) +
              " and NCCL needs a GPU per rank (for NCCL start at most " +
              std::to_string(gpus) + " ranks per node)";
    } else {
      c.backend = "nccl";
    }
  }
  c.device = f.device;
  if (c.device == "auto") {
    // Ranks sharing a GPU under auto share it rather than fall back to the
    // CPU; an explicit gloo keeps the CPU.
    c.device = c.backend == "nccl" || !c.why.empty() ? "cuda" : "cpu";
  }
  if (c.backend == "nccl" && c.device == "cpu") {
    return InvalidArgumentError(
        "backend nccl reduces CUDA tensors only: device cpu needs backend "
        "gloo");
  }
  if (c.device == "cuda" && !f.torch_has_cuda) {
    return InvalidArgumentError(
        "backend " + c.backend +
        " on device cuda requested but this LibTorch was built "
        "without CUDA");
  }
  if (c.device == "cuda" && gpus == 0) {
    return InvalidArgumentError(
        "backend " + c.backend +
        " on device cuda requested but no CUDA device is visible");
  }
  if (c.backend == "nccl" && shared) {
    return InvalidArgumentError(
        "backend nccl needs a GPU per rank, but " +
        std::to_string(f.local_world_size) + " ranks on this node see " +
        Gpus(gpus) +
        " (NCCL refuses two ranks on one GPU: 'Duplicate GPU detected', and "
        "a restart fails the same way). Start at most " +
        std::to_string(gpus) +
        " ranks per node (--nproc_per_node=" + std::to_string(gpus) +
        "), or use backend gloo (--backend gloo or DDPRUN_BACKEND=gloo), "
        "which lets ranks share a GPU; if the launcher gives each rank its "
        "own GPU through CUDA_VISIBLE_DEVICES, set DDPRUN_GPU_PER_RANK=1");
  }
  return c;
}

}  // namespace ddprun::worker
