// model_step_bench: samples/s of one trainer's training step (model, loss,
// optimizer, precision as the trainer uses them; a fixed random batch made
// once on the device, so no data loading is timed). run.py runs it next to
// the Python twin (twins.py) and prints the ratio; see README.md.
//
//   model_step_bench --trainer survival [--device cpu|cuda[:N]]
//       [--precision fp32|bf16|fp16] [--warmup 5] [--steps 20]
//       [--threads 1] [--seed 0]          -> one JSON line on stdout
//   model_step_bench --trainer T --export FILE [--steps 3]
//       -> FILE (torch.load-able): the initial parameters and buffers, the
//          batch, the losses of --steps steps from seed 1 and the parameters
//          and buffers after them (twins.py --compare checks its twin
//          against it)
//   model_step_bench --malloc-tunables   (GLIBC_TUNABLES equivalent of the
//                                         runtime's malloc tuning)
// Errors: bad input (flags, fp16 on CPU, no CUDA device) is one line on
// stderr and exit 2; a Torch failure while running, one line and exit 1.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/cuda.h>
#include <torch/serialize.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/model_step/model_step.h"
#include "ddprun/worker/host_allocator.h"

namespace ddprun::bench {
namespace {

struct Flags {
  std::string trainer;
  std::string device = "cpu";
  std::string precision = "fp32";
  int warmup = 5;
  int steps = 20;
  int threads = 1;  // 0: leave Torch's default
  uint64_t seed = 0;
  std::string export_path;
  bool malloc_tunables = false;
};

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double WallSeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

torch::Device ParseDevice(const std::string& name) {
  try {
    return torch::Device(name);
  } catch (const c10::Error&) {
    throw std::invalid_argument("--device must be cpu, cuda or cuda:N, got '" +
                                name + "'");
  }
}

c10::List<torch::Tensor> CpuCopies(const std::vector<torch::Tensor>& ts) {
  c10::List<torch::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().cpu().clone());
  return out;
}

nlohmann::json Shapes(const std::vector<torch::Tensor>& ts) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : ts) out.push_back(t.sizes().vec());
  return out;
}

int64_t Elements(const std::vector<torch::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

// --export: see the file comment.
int Export(const Flags& flags, const torch::Device& device) {
  torch::manual_seed(flags.seed);
  auto step = MakeModelStep(flags.trainer, {device, flags.precision});
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("trainer", flags.trainer);
  dict.insert("params", CpuCopies(step->model().parameters()));
  dict.insert("buffers", CpuCopies(step->model().buffers()));
  dict.insert("batch", CpuCopies(step->batch()));
  torch::manual_seed(1);
  c10::List<double> losses;
  for (int i = 0; i < flags.steps; ++i) losses.push_back(step->Step());
  dict.insert("losses", losses);
  dict.insert("params_after", CpuCopies(step->model().parameters()));
  dict.insert("buffers_after", CpuCopies(step->model().buffers()));
  const std::vector<char> bytes = torch::pickle_save(dict);
  std::ofstream out(flags.export_path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::cerr << "model_step_bench: error: cannot write " << flags.export_path
              << "\n";
    return 1;
  }
  return 0;
}

int Bench(const Flags& flags, const torch::Device& device) {
  torch::manual_seed(flags.seed);
  auto step = MakeModelStep(flags.trainer, {device, flags.precision});
  const std::vector<torch::Tensor> params = step->model().parameters();
  const std::vector<torch::Tensor> buffers = step->model().buffers();
  double first_loss = 0, last_loss = 0;
  for (int i = 0; i < flags.warmup; ++i) first_loss = step->Step();
  Synchronize(device);
  std::vector<double> step_s;
  const double wall0 = WallSeconds(), cpu0 = CpuSeconds();
  for (int i = 0; i < flags.steps; ++i) {
    const double t0 = WallSeconds();
    last_loss = step->Step();
    Synchronize(device);
    step_s.push_back(WallSeconds() - t0);
  }
  const double wall = WallSeconds() - wall0, cpu = CpuSeconds() - cpu0;
  std::vector<double> sorted = step_s;
  std::sort(sorted.begin(), sorted.end());
  const double samples = static_cast<double>(flags.steps) *
                         static_cast<double>(step->samples_per_step());
  nlohmann::json out = {{"side", "cpp"},
                        {"trainer", flags.trainer},
                        {"device", device.str()},
                        {"precision", flags.precision},
                        {"torch_version", TORCH_VERSION},
                        {"threads", torch::get_num_threads()},
                        {"params", Elements(params)},
                        {"param_tensors", params.size()},
                        {"param_shapes", Shapes(params)},
                        {"buffer_shapes", Shapes(buffers)},
                        {"batch", step->batch_description()},
                        {"samples_per_step", step->samples_per_step()},
                        {"warmup", flags.warmup},
                        {"steps", flags.steps},
                        {"seconds", wall},
                        {"samples_per_s", samples / wall},
                        {"ms_per_step", 1e3 * wall / flags.steps},
                        {"median_step_ms", 1e3 * sorted[sorted.size() / 2]},
                        {"cpu_ms_per_step", 1e3 * cpu / flags.steps},
                        {"first_loss", first_loss},
                        {"last_loss", last_loss}};
  std::cout << out.dump() << std::endl;
  return 0;
}

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app(
      "model_step_bench: samples/s of a trainer's training step (see "
      "bench/model_step/README.md)");
  app.add_option("--trainer", flags.trainer,
                 "survival, ddpm, vqa or segmentation")
      ->check(CLI::IsMember(TrainerNames()));
  app.add_option("--device", flags.device, "cpu, cuda or cuda:N");
  app.add_option("--precision", flags.precision, "fp32, bf16 or fp16 (CUDA)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--warmup", flags.warmup, "Untimed steps first")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--steps", flags.steps, "Timed steps")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", flags.threads,
                 "Torch intra-op threads (0: Torch's default)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", flags.seed, "Seed of the model and the batch");
  app.add_option("--export", flags.export_path,
                 "Write weights, batch, losses of --steps steps to FILE "
                 "(no timing)");
  app.add_flag("--malloc-tunables", flags.malloc_tunables,
               "Print the GLIBC_TUNABLES value of the runtime's malloc tuning");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "model_step_bench: error: " << e.what() << "\n";
    return 2;
  }
  if (flags.malloc_tunables) {
    std::cout << worker::MallocTunablesEnvValue() << "\n";
    return 0;
  }
  if (flags.trainer.empty()) {
    std::cerr << "model_step_bench: error: --trainer is required\n";
    return 2;
  }
  try {
    // What InitFromEnv does for every trainer (host_allocator.h).
    auto tuned = worker::TuneHostAllocator();
    if (!tuned.ok()) throw std::invalid_argument(tuned.status().message());
    const torch::Device device = ParseDevice(flags.device);
    if (device.is_cuda() && !torch::cuda::is_available())
      throw std::invalid_argument("--device " + flags.device +
                                  ": this LibTorch sees no CUDA device");
    if (flags.threads > 0) torch::set_num_threads(flags.threads);
    if (!flags.export_path.empty()) return Export(flags, device);
    return Bench(flags, device);
  } catch (const std::invalid_argument& e) {
    std::cerr << "model_step_bench: error: " << e.what() << "\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "model_step_bench: torch error: " << e.what_without_backtrace()
              << "\n";
    return 1;
  }
}

}  // namespace
}  // namespace ddprun::bench

int main(int argc, char** argv) { return ddprun::bench::Main(argc, argv); }
