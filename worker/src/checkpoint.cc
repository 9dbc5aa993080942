#include "ddprun/worker/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include "common/file_util.h"
#include "common/logging.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/rng_fork.h"
#include "ddprun/worker/sharded_adam.h"

namespace ddprun::worker {
namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'C', 'K', 'P', 'T', '1'};
constexpr size_t kTrailerSize = 32;  // magic, length, hash, reserved

// Where the model lives (CPU when there is no model or no parameter).
c10::Device ModelDevice(const torch::nn::Module* model) {
  if (model != nullptr) {
    for (const at::Tensor& p : model->parameters()) return p.device();
  }
  return c10::Device(c10::kCPU);
}

std::function<void(const std::string&)>& BeforeRenameHook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

uint64_t Fnv1a(const char* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ull;
  }
  return h;
}

std::string FileName(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "ckpt-%012lld.pt",
                static_cast<long long>(step));
  return buf;
}

// Step of a final checkpoint name, or -1.
int64_t StepOf(const std::string& name) {
  long long step = -1;
  char tail[8] = {0};
  if (name.size() != std::strlen("ckpt-000000000000.pt")) return -1;
  if (std::sscanf(name.c_str(), "ckpt-%12lld.%2s", &step, tail) != 2) return -1;
  return std::string(tail) == "pt" ? step : -1;
}

// Reads `path` and returns the payload if the trailer and hash match.
bool ReadVerified(const std::string& path, std::string* payload) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string data;
  char buf[1 << 16];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) data.append(buf, n);
  ::close(fd);
  if (n < 0 || data.size() < kTrailerSize) return false;
  const char* t = data.data() + data.size() - kTrailerSize;
  if (std::memcmp(t, kMagic, 8) != 0) return false;
  uint64_t len, hash;
  std::memcpy(&len, t + 8, 8);
  std::memcpy(&hash, t + 16, 8);
  if (len != data.size() - kTrailerSize) return false;
  if (Fnv1a(data.data(), len) != hash) return false;
  data.resize(len);
  *payload = std::move(data);
  return true;
}

void MakeDirs(const std::string& dir) {
  std::string cur;
  std::stringstream ss(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      throw ConfigError("checkpoint dir " + dir + ": cannot create " + cur +
                        ": " + std::strerror(errno));
    }
  }
}

// Module::load with copy_ instead of set_: parameters keep their storage.
// DDP's Reducer and optimizers hold those tensors, and a set_ behind the
// Reducer's back made the first step after a resume diverge (seen in the
// kill-and-resume test).
void LoadModule(torch::nn::Module& m, torch::serialize::InputArchive& a,
                const std::string& prefix) {
  at::NoGradGuard no_grad;
  for (auto& p : m.named_parameters(/*recurse=*/false)) {
    at::Tensor t;
    a.read(p.key(), t);
    if (!t.sizes().equals(p.value().sizes())) {
      throw WorkerError("checkpoint: parameter " + prefix + p.key() +
                        " has shape " + c10::str(t.sizes()) +
                        ", the model has " + c10::str(p.value().sizes()));
    }
    p.value().detach().copy_(t);
  }
  for (auto& b : m.named_buffers(/*recurse=*/false)) {
    at::Tensor t;
    a.read(b.key(), t, /*is_buffer=*/true);
    b.value().detach().copy_(t.view_as(b.value()));
  }
  for (auto& c : m.named_children()) {
    torch::serialize::InputArchive sub;
    a.read(c.key(), sub);
    LoadModule(*c.value(), sub, prefix + c.key() + ".");
  }
}

at::Tensor Int64(int64_t v) { return at::tensor({v}, at::kLong); }

int64_t ReadInt64(torch::serialize::InputArchive& a, const std::string& key) {
  at::Tensor t;
  a.read(key, t);
  return t.item<int64_t>();
}

}  // namespace

Checkpointer::Checkpointer(World world, CheckpointOptions options)
    : world_(std::move(world)), options_(std::move(options)) {
  if (options_.dir.empty()) throw ConfigError("checkpoint dir is empty");
  if (options_.keep_last < 1) {
    throw ConfigError("checkpoint keep_last must be >= 1");
  }
  if (world_.is_main()) MakeDirs(options_.dir);
}

void Checkpointer::SetBeforeRenameHookForTesting(
    std::function<void(const std::string&)> hook) {
  BeforeRenameHook() = std::move(hook);
}

std::string Checkpointer::Save(const TrainState& state,
                               const CheckpointParts& parts) {
  return Write(FileName(state.step), state, parts, /*rotate=*/true);
}

std::string Checkpointer::SaveNamed(const std::string& file_name,
                                    const TrainState& state,
                                    const CheckpointParts& parts) {
  if (file_name.empty() || file_name.find('/') != std::string::npos ||
      StepOf(file_name) >= 0 || file_name.find(".tmp.") != std::string::npos) {
    throw ConfigError("checkpoint name '" + file_name +
                      "' must be a plain file name other than ckpt-<step>.pt");
  }
  return Write(file_name, state, parts, /*rotate=*/false);
}

namespace {

// What a checkpoint holds, into `archive` (collective for a sharded
// optimizer or rng).
void FillArchive(torch::serialize::OutputArchive& archive, const World& world,
                 const TrainState& state, const CheckpointParts& parts) {
  archive.write("meta/epoch", Int64(state.epoch));
  archive.write("meta/step", Int64(state.step));
  archive.write("meta/batch_in_epoch", Int64(state.batch_in_epoch));
  std::string names;
  std::vector<double> values;
  for (auto& [k, v] : state.scalars) {
    names += k + "\n";
    values.push_back(v);
  }
  archive.write("meta/scalar_names", c10::IValue(names));
  archive.write("meta/scalar_values",
                at::tensor(values, at::kDouble).reshape({-1}));
  archive.write("meta/world_size", Int64(world.world_size()));
  if (parts.model != nullptr) {
    torch::serialize::OutputArchive sub;
    parts.model->save(sub);
    archive.write("model", sub);
  }
  if (parts.optimizer != nullptr) {
    torch::serialize::OutputArchive sub;
    parts.optimizer->save(sub);
    archive.write("optimizer", sub);
  }
  if (parts.sharded_optimizer != nullptr) {
    torch::serialize::OutputArchive sub;
    parts.sharded_optimizer->Save(sub);  // collective
    archive.write("sharded_optimizer", sub);
  }
  if (parts.rng) {
    // Every rank's generators: ranks draw different dropout masks.
    for (auto& [kind, gen] : DefaultGenerators(ModelDevice(parts.model))) {
      at::Tensor mine;
      {
        std::lock_guard<std::mutex> lock(gen.mutex());
        mine = gen.get_state();
      }
      std::vector<at::Tensor> all = world.AllGather(mine);
      for (size_t r = 0; r < all.size(); ++r) {
        archive.write("rng/" + kind + "/" + std::to_string(r), all[r]);
      }
    }
  }
}

}  // namespace

std::string CheckpointPayload(const World& world, const TrainState& state,
                              const CheckpointParts& parts) {
  torch::serialize::OutputArchive archive;
  FillArchive(archive, world, state, parts);
  std::ostringstream os;
  archive.save_to(os);
  return os.str();
}

std::string Checkpointer::Write(const std::string& file_name,
                                const TrainState& state,
                                const CheckpointParts& parts, bool rotate) {
  // Only rank 0 writes, but the archive's gathers are collective.
  torch::serialize::OutputArchive archive;
  FillArchive(archive, world_, state, parts);
  const std::string final_path = options_.dir + "/" + file_name;
  if (world_.is_main()) {
    std::ostringstream os;
    archive.save_to(os);
    std::string data = os.str();
    char trailer[kTrailerSize] = {0};
    uint64_t len = data.size();
    uint64_t hash = Fnv1a(data.data(), data.size());
    std::memcpy(trailer, kMagic, 8);
    std::memcpy(trailer + 8, &len, 8);
    std::memcpy(trailer + 16, &hash, 8);
    // A full disk costs the partial file too: the previous checkpoint
    // stays the newest complete one.
    AtomicWriteOptions atomic;
    atomic.before_rename = BeforeRenameHook();
    Status written = WriteFileAtomically(
        final_path, {data, std::string_view(trailer, kTrailerSize)}, atomic);
    if (!written.ok()) throw WorkerError("checkpoint: " + written.message());
    // Retention and leftovers of crashed writers (named files are outside
    // the rotation; their leftovers go with the next periodic save).
    if (rotate) {
      std::vector<std::string> complete = ListComplete(options_.dir);
      for (size_t i = 0; i + options_.keep_last < complete.size(); ++i) {
        ::unlink(complete[i].c_str());
      }
      if (DIR* d = ::opendir(options_.dir.c_str())) {
        while (dirent* e = ::readdir(d)) {
          std::string n = e->d_name;
          if (n.find(".pt.tmp.") != std::string::npos) {
            ::unlink((options_.dir + "/" + n).c_str());
          }
        }
        ::closedir(d);
      }
    }
  }
  world_.Barrier();
  return final_path;
}

std::vector<std::string> Checkpointer::ListComplete(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      int64_t step = StepOf(e->d_name);
      if (step >= 0) found.emplace_back(step, dir + "/" + e->d_name);
    }
    ::closedir(d);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, path] : found) {
    std::string payload;
    if (ReadVerified(path, &payload)) {
      out.push_back(path);
    } else {
      DDP_LOG(WARNING) << "checkpoint " << path
                       << " is incomplete or corrupt; ignored";
    }
  }
  return out;
}

namespace {

TrainState LoadVerifiedFile(const std::string& path,
                            const CheckpointParts& parts, int rank) {
  std::string payload;
  if (!ReadVerified(path, &payload)) {
    throw WorkerError("checkpoint " + path + " is missing or corrupt");
  }
  return LoadCheckpointPayload(payload, parts, rank, "checkpoint " + path);
}

}  // namespace

TrainState LoadCheckpointPayload(const std::string& payload,
                                 const CheckpointParts& parts, int rank,
                                 const std::string& what) {
  const std::string& path = what;
  // Onto the CPU first: without a device, tensors go back to the device
  // they were saved from, so every rank would materialise rank 0's state on
  // cuda:0 (and a GPU checkpoint would not load on a CPU-only machine).
  torch::serialize::InputArchive archive;
  archive.load_from(payload.data(), payload.size(), c10::Device(c10::kCPU));
  // Model and optimizer state go where the model lives: an optimizer loaded
  // onto the CPU under a CUDA model fails at its first step. Metadata and
  // RNG states stay on the CPU (the CPU generator only takes CPU state).
  const c10::Device device = ModelDevice(parts.model);
  torch::serialize::InputArchive on_device;
  if (!device.is_cpu()) {
    on_device.load_from(payload.data(), payload.size(), device);
  }
  torch::serialize::InputArchive& state_archive =
      device.is_cpu() ? archive : on_device;
  TrainState state;
  state.epoch = ReadInt64(archive, "meta/epoch");
  state.step = ReadInt64(archive, "meta/step");
  state.batch_in_epoch = ReadInt64(archive, "meta/batch_in_epoch");
  c10::IValue names;
  archive.read("meta/scalar_names", names);
  at::Tensor values;
  archive.read("meta/scalar_values", values);
  std::stringstream ss(names.toStringRef());
  std::string name;
  for (int64_t i = 0; std::getline(ss, name) && i < values.numel(); ++i) {
    state.scalars[name] = values[i].item<double>();
  }
  if (parts.model != nullptr) {
    torch::serialize::InputArchive sub;
    if (!state_archive.try_read("model", sub)) {
      throw WorkerError(path + " has no model state");
    }
    LoadModule(*parts.model, sub, "");
  }
  if (parts.optimizer != nullptr) {
    torch::serialize::InputArchive sub;
    if (!state_archive.try_read("optimizer", sub)) {
      throw WorkerError(path + " has no optimizer state");
    }
    parts.optimizer->load(sub);
  }
  if (parts.sharded_optimizer != nullptr) {
    torch::serialize::InputArchive sub;
    if (!state_archive.try_read("sharded_optimizer", sub)) {
      throw WorkerError(path + " has no sharded optimizer state");
    }
    parts.sharded_optimizer->Load(sub);
  }
  if (parts.rng) {
    for (auto& [kind, gen] : DefaultGenerators(device)) {
      at::Tensor state_t;
      if (archive.try_read("rng/" + kind + "/" + std::to_string(rank),
                           state_t) ||
          archive.try_read("rng/" + kind + "/0", state_t)) {
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(state_t);
      }
    }
  }
  return state;
}

bool Checkpointer::IsComplete(const std::string& path) {
  std::string payload;
  return ReadVerified(path, &payload);
}

TrainState Checkpointer::LoadFile(const std::string& path,
                                  const CheckpointParts& parts) {
  const char* rank = std::getenv("RANK");
  return LoadVerifiedFile(path, parts, rank != nullptr ? std::atoi(rank) : 0);
}

std::optional<TrainState> Checkpointer::LoadLatest(
    const CheckpointParts& parts) {
  int64_t step = -1;
  if (world_.is_main()) {
    std::vector<std::string> complete = ListComplete(options_.dir);
    if (!complete.empty()) {
      step = StepOf(complete.back().substr(complete.back().rfind('/') + 1));
    }
  }
  if (world_.distributed()) {
    at::Tensor t = at::tensor({step}, at::kLong).to(world_.device());
    world_.Broadcast(t, 0);
    step = t.cpu().item<int64_t>();
  }
  if (step < 0) return std::nullopt;
  TrainState state = LoadVerifiedFile(options_.dir + "/" + FileName(step),
                                      parts, world_.rank());
  DDP_LOG(INFO) << "rank " << world_.rank() << " resumed from "
                << FileName(step) << " (epoch " << state.epoch << ", step "
                << state.step << ")";
  return state;
}

}  // namespace ddprun::worker
