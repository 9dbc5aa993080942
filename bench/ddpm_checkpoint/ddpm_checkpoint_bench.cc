// Activation checkpointing of ddpm_trainer's 3D UNet (--gradient_checkpointing,
// examples/ddpm/unet3d.cc): peak resident memory and time of a training step
// with it against the same step without it, measured in the same run.
//
//   ddpm_checkpoint_bench [--size 48] [--width 8] [--batch 1] [--steps 3]
//                         [--rounds 2] [--bf16]
//
// Each measurement is a fresh child process (this program, re-executed with
// --child MODE) so that its peak RSS (getrusage ru_maxrss) is its own:
//   idle  builds the model, optimizer and batch and stops (the floor: code,
//         weights, data);
//   plain runs --steps training steps (forward, MSE, backward, Adam);
//   ckpt  the same with gradient checkpointing.
// Rounds alternate the order of plain and ckpt. Everything runs twice: with
// glibc malloc's defaults (what a process gets; freed heap memory can stay
// resident, so the peak includes fragmentation) and with
// MALLOC_MMAP_THRESHOLD_=65536 ("exact": every tensor buffer is its own
// mapping, returned when freed, so the peak RSS is the peak of live memory).
// Prints one line per child and per allocator a summary: median peak RSS of
// each, their ratio, the ratio of the activation part (peak minus idle), and
// ms/step of each with their ratio.
// Exit 0 done, 1 a child failed, 2 bad flags.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddprun/worker/precision.h"
#include "examples/ddpm/unet3d.h"

namespace ex = ddprun::examples;

namespace {

struct Flags {
  int64_t size = 48, width = 8, batch = 1, steps = 3, rounds = 2;
  bool bf16 = false;
  std::string child;  // "", "idle", "plain" or "ckpt"
};

double PeakRssMb() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // Linux: kilobytes
}

// One child: prints "peak_rss_mb ms_per_step".
int Child(const Flags& f) {
  at::set_num_threads(1);
  torch::manual_seed(0);
  ex::UNet3dOptions o;
  o.width = f.width;
  o.gradient_checkpointing = f.child == "ckpt";
  o.recompute_autocast = {f.bf16, c10::Device(c10::kCPU), at::kBFloat16};
  ex::UNet3d model(o);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(2e-3));
  const torch::Tensor x = torch::randn({f.batch, 4, f.size, f.size, f.size});
  const torch::Tensor target =
      torch::randn({f.batch, 1, f.size, f.size, f.size});
  const torch::Tensor t = torch::full({f.batch}, 499, torch::kInt64);
  double ms = 0;
  if (f.child != "idle") {
    for (int64_t s = 0; s < f.steps; ++s) {
      const auto start = std::chrono::steady_clock::now();
      adam.zero_grad();
      torch::Tensor out;
      {
        ddprun::worker::AutocastScope autocast(f.bf16, c10::Device(c10::kCPU));
        out = model->forward(x, t);
      }
      torch::mse_loss(out.to(torch::kFloat32), target).backward();
      adam.step();
      ms += std::chrono::duration<double, std::milli>(
                std::chrono::steady_clock::now() - start)
                .count();
    }
    ms /= static_cast<double>(f.steps);
  }
  std::printf("%.1f %.1f\n", PeakRssMb(), ms);
  return 0;
}

struct Measured {
  double rss_mb = 0, ms = 0;
};

bool RunChild(const std::string& self, const Flags& f, const std::string& env,
              const std::string& mode, Measured* m) {
  const std::string cmd = env + "'" + self + "' --child " + mode + " --size " +
                          std::to_string(f.size) + " --width " +
                          std::to_string(f.width) + " --batch " +
                          std::to_string(f.batch) + " --steps " +
                          std::to_string(f.steps) + (f.bf16 ? " --bf16" : "");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  const int got = std::fscanf(p, "%lf %lf", &m->rss_mb, &m->ms);
  const int rc = pclose(p);
  if (got != 2 || rc != 0) {
    std::fprintf(stderr, "ddpm_checkpoint_bench: child %s failed (rc %d)\n",
                 mode.c_str(), rc);
    return false;
  }
  std::printf("%-5s peak RSS %8.1f MB  %9.1f ms/step\n", mode.c_str(),
              m->rss_mb, m->ms);
  std::fflush(stdout);
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto number = [&](int64_t* out, int64_t min) {
      if (i + 1 >= argc) return false;
      char* end = nullptr;
      const long long v = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || v < min) return false;
      *out = v;
      return true;
    };
    bool ok = true;
    if (a == "--size")
      ok = number(&f->size, 4) && f->size % 2 == 0;
    else if (a == "--width")
      ok = number(&f->width, 1);
    else if (a == "--batch")
      ok = number(&f->batch, 1);
    else if (a == "--steps")
      ok = number(&f->steps, 1);
    else if (a == "--rounds")
      ok = number(&f->rounds, 1);
    else if (a == "--bf16")
      f->bf16 = true;
    else if (a == "--child" && i + 1 < argc)
      f->child = argv[++i];
    else
      ok = false;
    if (!ok) {
      std::fprintf(stderr,
                   "ddpm_checkpoint_bench: error: bad flag or value at '%s' "
                   "(--size EVEN>=4, --width, --batch, --steps, --rounds "
                   "N>=1, --bf16)\n",
                   a.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) return 2;
  if (!f.child.empty()) return Child(f);
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return 1;
  self[n] = '\0';
  std::printf(
      "UNet3d width %lld, batch %lld x 4 x %lld^3, %s, %lld steps "
      "per child, 1 thread\n",
      static_cast<long long>(f.width), static_cast<long long>(f.batch),
      static_cast<long long>(f.size), f.bf16 ? "bf16 autocast" : "fp32",
      static_cast<long long>(f.steps));
  for (const char* env : {"", "MALLOC_MMAP_THRESHOLD_=65536 "}) {
    std::printf("malloc: %s\n", *env ? "exact (MALLOC_MMAP_THRESHOLD_=65536)"
                                     : "glibc defaults");
    Measured idle;
    if (!RunChild(self, f, env, "idle", &idle)) return 1;
    std::vector<double> plain_rss, ckpt_rss, plain_ms, ckpt_ms;
    for (int64_t r = 0; r < f.rounds; ++r) {
      for (int k = 0; k < 2; ++k) {
        const bool ckpt =
            (k == 0) == (r % 2 == 1);  // plain first in even rounds
        Measured m;
        if (!RunChild(self, f, env, ckpt ? "ckpt" : "plain", &m)) return 1;
        (ckpt ? ckpt_rss : plain_rss).push_back(m.rss_mb);
        (ckpt ? ckpt_ms : plain_ms).push_back(m.ms);
      }
    }
    const double pr = Median(plain_rss), cr = Median(ckpt_rss);
    const double pm = Median(plain_ms), cm = Median(ckpt_ms);
    std::printf(
        "peak RSS: plain %.1f MB, checkpointed %.1f MB, ratio %.3f; above the "
        "idle floor (%.1f MB): %.1f vs %.1f MB, ratio %.3f\n"
        "time: plain %.1f ms/step, checkpointed %.1f ms/step, ratio %.3f\n",
        pr, cr, cr / pr, idle.rss_mb, pr - idle.rss_mb, cr - idle.rss_mb,
        (cr - idle.rss_mb) / std::max(1e-9, pr - idle.rss_mb), pm, cm, cm / pm);
  }
  return 0;
}
