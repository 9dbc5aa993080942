#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace ddprun::worker {

// The process's default random generators that a rank's training draws
// from, by name: "cpu" (Torch's default CPU generator) and, when `device`
// is a CUDA device, "cuda" (that device's default generator: dropout and
// randn on the GPU draw from it). Checkpoints keep their states.
std::vector<std::pair<std::string, at::Generator>> DefaultGenerators(
    c10::Device device);

// A 64-bit seed for a tuple (run seed, rank, step, purpose, ...): splitmix64
// over the parts, so nearby tuples give unrelated streams.
uint64_t MixSeed(std::initializer_list<uint64_t> parts);

// While it lives, the default generators of DefaultGenerators(device) are
// seeded with `seed`; its destructor puts back the states they had before.
// Used around a validation that samples noise: its numbers then depend only
// on the seed (e.g. MixSeed({run seed, epoch, rank})), and the training
// stream after it is the one it would be had the validation not run, so a
// run resumed from a checkpoint taken before a validation draws what the
// uninterrupted run drew. Local (no collective); the generators are shared
// by the whole process, so no other thread may draw from them meanwhile
// (loader threads use their own generators). Not copyable.
class RngFork {
 public:
  RngFork(uint64_t seed, c10::Device device);
  ~RngFork();
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  struct Saved {
    at::Generator generator;
    at::Tensor state;  // CPU byte tensor (Generator::get_state)
  };
  std::vector<Saved> saved_;
};

}  // namespace ddprun::worker
