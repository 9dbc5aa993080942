#include "ddprun/worker/rng_fork.h"

#include <mutex>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

namespace ddprun::worker {

std::vector<std::pair<std::string, at::Generator>> DefaultGenerators(
    c10::Device device) {
  std::vector<std::pair<std::string, at::Generator>> gens;
  gens.emplace_back("cpu", at::detail::getDefaultCPUGenerator());
  if (device.is_cuda()) {
    gens.emplace_back("cuda", at::globalContext().defaultGenerator(device));
  }
  return gens;
}

uint64_t MixSeed(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (uint64_t p : parts) {
    h ^= p + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
  }
  return h;
}

RngFork::RngFork(uint64_t seed, c10::Device device) {
  for (auto& [name, gen] : DefaultGenerators(device)) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    saved_.push_back({gen, gen.get_state()});
    gen.set_current_seed(seed);
  }
}

RngFork::~RngFork() {
  for (Saved& s : saved_) {
    std::lock_guard<std::mutex> lock(s.generator.mutex());
    s.generator.set_state(s.state);
  }
}

}  // namespace ddprun::worker
