#include "examples/cascade/cascade_batches.h"

#include <ATen/CPUGeneratorImpl.h>

namespace ddprun::examples {

PatientStore::PatientStore(std::vector<Patient> patients, LoadOptions options,
                           bool cache_in_memory)
    : patients_(std::move(patients)),
      options_(std::move(options)),
      cache_in_memory_(cache_in_memory) {}

StatusOr<PatientSample> PatientStore::Load(int64_t i) {
  if (cache_in_memory_) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = cache_.find(i);
    if (it != cache_.end()) return it->second;
  }
  DDP_ASSIGN_OR_RETURN(PatientSample s, LoadPatient(patients_.at(i), options_));
  if (cache_in_memory_) {
    std::lock_guard<std::mutex> lock(mu_);
    cache_.emplace(i, s);
  }
  return s;
}

StatusOr<CascadeBatch> PatientStore::MakeBatch(
    const std::vector<int64_t>& items, const std::vector<int64_t>& size,
    const std::vector<int64_t>& previous_size, double conditioning_noise,
    bool augment, uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  std::vector<torch::Tensor> views, volumes, previous;
  for (int64_t item : items) {
    DDP_ASSIGN_OR_RETURN(PatientSample s, Load(item));
    torch::Tensor v = s.views;
    torch::Tensor volume = s.volume;
    if (augment && at::rand({1}, generator).item<double>() < 0.5) {
      volume = volume.flip({-1});
      v = torch::cat(
          {v.narrow(0, 0, 1).flip({-1}), v.narrow(0, 1, v.size(0) - 1)});
    }
    views.push_back(v);
    volumes.push_back(ResizeVolume(volume, size));
    if (!previous_size.empty()) {
      torch::Tensor p = ResizeVolume(ResizeVolume(volume, previous_size), size);
      const double level =
          conditioning_noise * at::rand({1}, generator).item<double>();
      previous.push_back(p + level * at::randn(p.sizes(), generator));
    }
  }
  CascadeBatch b;
  b.views = torch::stack(views);
  b.volume = torch::stack(volumes);
  if (!previous.empty()) b.previous = torch::stack(previous);
  return b;
}

}  // namespace ddprun::examples
