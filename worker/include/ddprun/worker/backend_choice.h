#pragma once

#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun::worker {

// What InitWorld runs on: "gloo" or "nccl", on "cpu" or "cuda".
struct BackendChoice {
  std::string backend;
  std::string device;
  // Why `backend` differs from what "auto" picks on a GPU machine (empty
  // when it does not): InitWorld logs it.
  std::string why;
};

// The facts the choice depends on (no Torch calls: a unit test drives it).
struct BackendFacts {
  std::string backend = "auto";  // requested: auto, gloo or nccl
  std::string device = "auto";   // requested: auto, cpu or cuda
  int local_world_size = 1;      // ranks on this node (LOCAL_WORLD_SIZE)
  int visible_gpus = 0;          // CUDA devices this process sees
  bool torch_has_cuda = false;   // LibTorch built with CUDA
  // The launcher gave each rank its own GPU (one CUDA_VISIBLE_DEVICES entry
  // per rank, e.g. --virtual_local_rank; InitOptions::gpu_per_rank): then
  // local_world_size > visible_gpus does not mean ranks share a GPU.
  bool gpu_per_rank = false;
};

// Picks backend and device. "auto": NCCL on CUDA when a GPU is visible and
// this node's ranks do not outnumber the visible GPUs; with more local ranks
// than GPUs Gloo on CUDA (NCCL refuses two ranks on one GPU: "Duplicate GPU
// detected"), with `why` saying so; without a GPU Gloo on the CPU. "nccl"
// with more local ranks than GPUs, on the CPU, or without a visible GPU is
// an InvalidArgument error naming the remedy (InitWorld throws it as a
// ConfigError: exit 2, which a restart cannot fix).
StatusOr<BackendChoice> ChooseBackend(const BackendFacts& facts);

}  // namespace ddprun::worker
