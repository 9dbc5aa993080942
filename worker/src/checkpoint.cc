#include "ddprun/worker/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <sstream>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include "common/file_util.h"
#include "common/logging.h"
#include "ddprun/worker/ddp.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/rng_fork.h"
#include "ddprun/worker/sharded_adam.h"
#include "worker/src/checkpoint_file.h"

namespace ddprun::worker {
namespace {

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

// A save of `step` into a folder holding higher steps written before it:
// an earlier run's, one this run did not resume from (a reused output
// folder). Said once per Checkpointer (*warned).
void WarnOfOtherRun(const CheckpointOptions& options,
                    const std::vector<CheckpointEntry>& before, int64_t step,
                    bool* warned) {
  if (*warned) return;
  const CheckpointEntry* later = nullptr;
  for (const CheckpointEntry& e : before) {
    if (e.step > step && (later == nullptr || e.step > later->step)) {
      later = &e;
    }
  }
  if (later == nullptr) return;
  *warned = true;
  DDP_LOG(WARNING) << "checkpoint dir " << options.dir << " holds "
                   << Basename(later->path) << " (step " << later->step
                   << "), written before this run's step " << step
                   << " and not resumed from: this run's checkpoints are "
                      "the newest (a restart resumes from them), and the "
                      "rotation keeps the last "
                   << options.keep_last << " written";
}

// Keeps the newest keep_last rotated checkpoints of `options.dir` and
// removes what crashed writers left.
void Rotate(const CheckpointOptions& options, const std::string& written) {
  // The newest keep_last by write order; the file just written is the
  // newest of all (its generation is above every other), so it stays even
  // where an earlier run left higher steps.
  std::vector<CheckpointEntry> complete = ListCheckpoints(options.dir);
  size_t excess = complete.size() > static_cast<size_t>(options.keep_last)
                      ? complete.size() - options.keep_last
                      : 0;
  for (size_t i = 0; i < excess; ++i) {
    if (complete[i].path != written) ::unlink(complete[i].path.c_str());
  }
  // Leftovers of crashed writers; another job's write in flight in a shared
  // folder holds its file's lock and stays. Named files' leftovers go with
  // the next periodic save.
  if (DIR* d = ::opendir(options.dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.find(".pt.tmp.") != std::string::npos) {
        RemoveAbandonedTempFile(options.dir + "/" + n);
      }
    }
    ::closedir(d);
  }
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
  return Write(CheckpointFileName(state.step), state, parts, /*rotate=*/true);
}

std::string Checkpointer::SaveNamed(const std::string& file_name,
                                    const TrainState& state,
                                    const CheckpointParts& parts) {
  if (file_name.empty() || file_name.find('/') != std::string::npos ||
      CheckpointStepOf(file_name) >= 0 ||
      file_name.find(".tmp.") != std::string::npos) {
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
  if (parts.ddp != nullptr) {
    const std::vector<std::vector<size_t>> layout = parts.ddp->bucket_layout();
    if (!layout.empty()) {
      archive.write("ddp/bucket_layout", EncodeBucketLayout(layout));
    }
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
    // Trailers only (32 bytes a file): saving never reads back what it
    // keeps.
    const std::vector<CheckpointEntry> before = ListCheckpoints(options_.dir);
    CheckpointTrailer trailer;
    trailer.generation = 1;
    for (const CheckpointEntry& e : before) {
      trailer.generation = std::max(trailer.generation, e.generation + 1);
    }
    if (rotate)
      WarnOfOtherRun(options_, before, state.step, &warned_other_run_);
    // Streamed to the file with its hash: no copy of the checkpoint in
    // memory. A full disk costs the partial file too: the previous
    // checkpoint stays the newest complete one.
    Fnv1a64 hash;
    auto write = [&](int fd) -> int {
      int err = 0;
      try {
        archive.save_to([&](const void* buf, size_t n) -> size_t {
          if (err == 0) {
            err = WriteFullyErrno(
                fd, std::string_view(static_cast<const char*>(buf), n));
          }
          // After a failed write the rest is discarded but reported as
          // written: torch throws on a short write, and LibTorch 1.13's
          // writer then writes its end record from its destructor, where
          // a second throw aborts the process (a full disk was SIGABRT).
          if (err != 0) return n;
          hash.Add(buf, n);
          trailer.length += n;
          return n;
        });
      } catch (const std::exception&) {
        if (err == 0) err = EIO;
      }
      trailer.hash = hash.value();
      return err != 0 ? err
                      : WriteFullyErrno(fd, EncodeCheckpointTrailer(trailer));
    };
    AtomicWriteOptions atomic;
    atomic.before_rename = BeforeRenameHook();
    Status written = WriteFileAtomicallyWith(final_path, write, atomic);
    if (!written.ok()) throw WorkerError("checkpoint: " + written.message());
    if (rotate) Rotate(options_, final_path);
  }
  world_.Barrier();
  return final_path;
}

std::vector<std::string> Checkpointer::ListComplete(const std::string& dir) {
  std::vector<std::string> out;
  for (const CheckpointEntry& e : ListCheckpoints(dir)) {
    std::optional<CheckpointFile> f = CheckpointFile::Open(e.path);
    if (f && f->Verify()) {
      out.push_back(e.path);
    } else {
      DDP_LOG(WARNING) << "checkpoint " << e.path
                       << " is incomplete or corrupt; ignored";
    }
  }
  return out;
}

namespace {

// The first line of a torch error (its message without the C++ trace).
std::string FirstLine(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

// Opens `archive` onto `device` (the caller's source: a file or bytes).
using ArchiveOpener =
    std::function<void(torch::serialize::InputArchive&, c10::Device)>;

// Loads a verified checkpoint payload into `parts`. Torch's errors (a
// payload that is not an archive of ours: c10::Error, the TorchScript
// parser's std::runtime_error) become WorkerError starting with `what`.
TrainState LoadArchive(const ArchiveOpener& open, const std::string& what,
                       const CheckpointParts& parts, int rank) {
  // Straight to where the model lives (an optimizer loaded onto the CPU
  // under a CUDA model fails at its first step), read from where it lies:
  // the checkpoint's tensors exist once, with no second archive. Without a
  // device, tensors would go back to the device they were saved from: every
  // rank would materialise rank 0's state on cuda:0, and a GPU checkpoint
  // would not load on a CPU-only machine.
  const c10::Device device = ModelDevice(parts.model);
  torch::serialize::InputArchive archive;
  TrainState state;
  try {
    open(archive, device);
    state.epoch = ReadInt64(archive, "meta/epoch");
    state.step = ReadInt64(archive, "meta/step");
    state.batch_in_epoch = ReadInt64(archive, "meta/batch_in_epoch");
    c10::IValue names;
    archive.read("meta/scalar_names", names);
    at::Tensor values;
    archive.read("meta/scalar_values", values);
    values = values.to(c10::kCPU, at::kDouble).reshape({-1});
    std::stringstream ss(names.toStringRef());
    std::string name;
    for (int64_t i = 0; std::getline(ss, name) && i < values.numel(); ++i) {
      state.scalars[name] = values[i].item<double>();
    }
    if (parts.model != nullptr) {
      torch::serialize::InputArchive sub;
      if (!archive.try_read("model", sub)) {
        throw WorkerError(what + " has no model state");
      }
      LoadModule(*parts.model, sub, "");
    }
    if (parts.optimizer != nullptr) {
      torch::serialize::InputArchive sub;
      if (!archive.try_read("optimizer", sub)) {
        throw WorkerError(what + " has no optimizer state");
      }
      parts.optimizer->load(sub);
    }
    if (parts.sharded_optimizer != nullptr) {
      torch::serialize::InputArchive sub;
      if (!archive.try_read("sharded_optimizer", sub)) {
        throw WorkerError(what + " has no sharded optimizer state");
      }
      parts.sharded_optimizer->Load(sub);
    }
    at::Tensor layout;
    if (parts.model != nullptr &&
        archive.try_read("ddp/bucket_layout", layout)) {
      size_t params = 0;
      for (const at::Tensor& p : parts.model->parameters()) {
        if (p.requires_grad()) ++params;
      }
      if (auto decoded = DecodeBucketLayout(layout, params)) {
        state.bucket_layout = *std::move(decoded);
      }
    }
    if (parts.rng) {
      for (auto& [kind, gen] : DefaultGenerators(device)) {
        at::Tensor state_t;
        if (archive.try_read("rng/" + kind + "/" + std::to_string(rank),
                             state_t) ||
            archive.try_read("rng/" + kind + "/0", state_t)) {
          // Generators take their state as a CPU byte tensor.
          state_t = state_t.to(c10::kCPU);
          std::lock_guard<std::mutex> lock(gen.mutex());
          gen.set_state(state_t);
        }
      }
    }
  } catch (const c10::Error& e) {
    throw WorkerError(what + " cannot be read: " +
                      FirstLine(e.what_without_backtrace()));
  } catch (const WorkerError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    // The TorchScript parser's std::runtime_error on a payload that is not
    // an archive of ours (found by fuzz/checkpoint).
    throw WorkerError(what + " cannot be read: " + FirstLine(e.what()));
  }
  return state;
}

TrainState LoadArchive(const CheckpointFile& file, const std::string& path,
                       const CheckpointParts& parts, int rank) {
  return LoadArchive(
      [&file](torch::serialize::InputArchive& archive, c10::Device device) {
        archive.load_from(
            [&file](uint64_t pos, void* buf, size_t n) {
              return file.ReadPayload(pos, buf, n);
            },
            [&file] { return static_cast<size_t>(file.trailer().length); },
            device);
      },
      "checkpoint " + path, parts, rank);
}

// Opens and verifies `path`; WorkerError when it is missing or corrupt.
CheckpointFile OpenVerified(const std::string& path) {
  std::optional<CheckpointFile> file = CheckpointFile::Open(path);
  if (!file || !file->Verify()) {
    throw WorkerError("checkpoint " + path + " is missing or corrupt");
  }
  return std::move(*file);
}

}  // namespace

TrainState LoadCheckpointPayload(const std::string& payload,
                                 const CheckpointParts& parts, int rank,
                                 const std::string& what) {
  return LoadArchive(
      [&payload](torch::serialize::InputArchive& archive, c10::Device device) {
        archive.load_from(payload.data(), payload.size(), device);
      },
      what, parts, rank);
}

bool Checkpointer::IsComplete(const std::string& path) {
  std::optional<CheckpointFile> file = CheckpointFile::Open(path);
  return file && file->Verify();
}

TrainState Checkpointer::LoadFile(const std::string& path,
                                  const CheckpointParts& parts) {
  const char* rank = std::getenv("RANK");
  return LoadArchive(OpenVerified(path), path, parts,
                     rank != nullptr ? std::atoi(rank) : 0);
}

std::optional<TrainState> Checkpointer::LoadLatest(
    const CheckpointParts& parts) {
  int64_t step = -1;
  std::optional<CheckpointFile> newest;
  if (world_.is_main()) {
    // Newest first by write order; only the one resumed from is read whole.
    std::vector<CheckpointEntry> entries = ListCheckpoints(options_.dir);
    for (auto e = entries.rbegin(); e != entries.rend() && step < 0; ++e) {
      newest = CheckpointFile::Open(e->path);
      if (newest && newest->Verify()) {
        step = e->step;
      } else {
        newest.reset();
        DDP_LOG(WARNING) << "checkpoint " << e->path
                         << " is incomplete or corrupt; ignored";
      }
    }
  }
  if (world_.distributed()) {
    at::Tensor t = at::tensor({step}, at::kLong).to(world_.device());
    world_.Broadcast(t, 0);
    step = t.cpu().item<int64_t>();
  }
  if (step < 0) return std::nullopt;
  const std::string path = options_.dir + "/" + CheckpointFileName(step);
  TrainState state =
      LoadArchive(newest ? std::move(*newest) : OpenVerified(path), path, parts,
                  world_.rank());
  DDP_LOG(INFO) << "rank " << world_.rank() << " resumed from "
                << CheckpointFileName(step) << " (epoch " << state.epoch
                << ", step " << state.step << ")";
  return state;
}

}  // namespace ddprun::worker
