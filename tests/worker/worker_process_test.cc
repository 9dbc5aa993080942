// Multi-process tests of the worker runtime: real ranks (rank_helper) on
// loopback with Gloo through a real TCPStore.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ddprun_catch.h"
#include "tests/common/remove_at_exit.h"

#include "ddprun/worker/errors.h"
#include "ddprun/worker/hardware.h"
#include "tests/worker/rank_process.h"

namespace wt = ddprun::worker::testing;
using ddprun::worker::kExitCollective;

namespace {

std::string Helper() { return wt::BinPath("worker_rank_helper"); }

std::string TempDir() {
  char tmpl[] = "/tmp/ddprun_worker_test_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return ddprun::testing::RemoveAtExit(tmpl);
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v;
  float f;
  while (in.read(reinterpret_cast<char*>(&f), sizeof(f))) v.push_back(f);
  return v;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void RequireAllOk(const std::vector<wt::RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << " output:\n" << results[r].output);
    REQUIRE(results[r].exit_code == 0);
  }
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  REQUIRE(!a.empty());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

}  // namespace

TEST_CASE("World: all-reduce, broadcast and variable all-gather on 3 ranks",
          "[worker][process]") {
  auto results = wt::RunRanks({Helper(), "collectives"}, 3);
  RequireAllOk(results);
  for (auto& r : results) {
    REQUIRE(r.output.find("ok backend gloo agent_store 0") !=
            std::string::npos);
  }
}

TEST_CASE("World: with a shared memory group attached, every collective gives "
          "the process group's results on 3 ranks",
          "[worker][process][shm]") {
  // Sums and averages of float and double (chunked past a 1 MB slot),
  // broadcast from the last rank, and what the group cannot take (int64
  // max) through the process group, all checked by the helper; the version
  // of a tensor written through the segment moves.
  auto results = wt::RunRanks({Helper(), "collectives", "shm"}, 3);
  RequireAllOk(results);
  for (int r = 0; r < 3; ++r) {
    INFO(results[r].output);
    REQUIRE(results[r].output.find("rank " + std::to_string(r) +
                                   " shared memory ok") != std::string::npos);
  }
}

TEST_CASE("World: DDPRUN_BACKEND picks the backend or names what is wrong",
          "[worker][process]") {
  SECTION("gloo forced") {
    auto results = wt::RunRanks({Helper(), "collectives"}, 2,
                                {{"DDPRUN_BACKEND", "gloo"}});
    RequireAllOk(results);
    for (auto& r : results) {
      REQUIRE(r.output.find("ok backend gloo") != std::string::npos);
    }
  }
  SECTION("an unknown backend is a usage error, not a hang") {
    auto results =
        wt::RunRanks({Helper(), "collectives"}, 2, {{"DDPRUN_BACKEND", "mpi"}});
    for (auto& r : results) {
      INFO(r.output);
      REQUIRE(r.exit_code == ddprun::worker::kExitUsage);
      REQUIRE(r.output.find("unknown backend 'mpi' (expected auto, gloo or "
                            "nccl)") != std::string::npos);
    }
  }
  SECTION("DDPRUN_DEVICE: an unknown device or NCCL on the CPU is a usage "
          "error") {
    for (auto [env, message] : std::vector<std::pair<
             std::map<std::string, std::string>, std::string>>{
             {{{"DDPRUN_DEVICE", "tpu"}},
              "unknown device 'tpu' (expected auto, cpu or cuda)"},
             {{{"DDPRUN_DEVICE", "cpu"}, {"DDPRUN_BACKEND", "nccl"}},
              "backend nccl reduces CUDA tensors only: device cpu needs "
              "backend gloo"}}) {
      auto results = wt::RunRanks({Helper(), "collectives"}, 2, env);
      for (auto& r : results) {
        INFO(r.output);
        REQUIRE(r.exit_code == ddprun::worker::kExitUsage);
        REQUIRE(r.output.find(message) != std::string::npos);
      }
    }
  }
#if !DDPRUN_WORKER_WITH_CUDA
  SECTION("gloo on CUDA on a CPU-only LibTorch says so") {
    auto results = wt::RunRanks({Helper(), "collectives"}, 2,
                                {{"DDPRUN_BACKEND", "gloo"},
                                 {"DDPRUN_DEVICE", "cuda"}});
    for (auto& r : results) {
      INFO(r.output);
      REQUIRE(r.exit_code == ddprun::worker::kExitUsage);
      REQUIRE(r.output.find("backend gloo on device cuda requested but this "
                            "LibTorch was built without CUDA") !=
              std::string::npos);
    }
  }
  SECTION("nccl on a CPU-only LibTorch says so") {
    auto results = wt::RunRanks({Helper(), "collectives"}, 2,
                                {{"DDPRUN_BACKEND", "nccl"}});
    for (auto& r : results) {
      INFO(r.output);
      REQUIRE(r.exit_code == ddprun::worker::kExitUsage);
      REQUIRE(r.output.find("built without CUDA") != std::string::npos);
    }
  }
#endif
}

TEST_CASE("ddp-hwinfo: prints this machine and the settings for the flags",
          "[worker][process][hardware]") {
  const std::string tool = wt::BinPath("ddp-hwinfo");
  ddprun::worker::HardwareInfo hw = ddprun::worker::DetectHardware();
  SECTION("report") {
    wt::RankProcess p({tool, "--world_size", "4", "--local_world_size", "2",
                       "--target_batch", "256"},
                      {});
    REQUIRE(p.Wait(std::chrono::seconds(30)));
    const std::string out = p.Output();
    INFO(out);
    REQUIRE(p.exit_code() == 0);
    REQUIRE(out.find("CPU cores: " + std::to_string(hw.cpu_cores) + "\n") !=
            std::string::npos);
    REQUIRE(out.find("GPUs: " + std::to_string(hw.gpus.size())) !=
            std::string::npos);
    // The same table the trainers use, for 4 processes, 2 per node.
    ddprun::worker::AutoSettings s =
        ddprun::worker::RecommendSettings(hw, 4, 2, 256);
    REQUIRE(s.effective_batch >= 200);
    REQUIRE(s.effective_batch <= 320);
    std::ostringstream line;
    line << "Recommended: device " << s.device << ", batch "
         << s.per_device_batch << " per process, grad accumulation "
         << s.grad_accum_steps << ", effective batch " << s.effective_batch
         << ", threads " << std::max(1, hw.cpu_cores / 2);
    REQUIRE(out.find(line.str()) != std::string::npos);
  }
  SECTION("bad flags exit 2 with a message") {
    wt::RankProcess bad({tool, "--world_size", "0"}, {});
    REQUIRE(bad.Wait(std::chrono::seconds(30)));
    REQUIRE(bad.exit_code() == 2);
    REQUIRE(bad.Output().find("--world_size must be a positive integer") !=
            std::string::npos);
    wt::RankProcess unknown({tool, "--gpus", "2"}, {});
    REQUIRE(unknown.Wait(std::chrono::seconds(30)));
    REQUIRE(unknown.exit_code() == 2);
    REQUIRE(unknown.Output().find("unknown argument '--gpus'") !=
            std::string::npos);
  }
}

TEST_CASE("World: with no launcher env a trainer runs as a single process",
          "[worker][process]") {
  wt::RankProcess p({Helper(), "collectives"}, {});
  REQUIRE(p.Wait(std::chrono::seconds(30)));
  INFO(p.Output());
  REQUIRE(p.exit_code() == 0);
  REQUIRE(p.Output().find("rank 0 of 1 ok backend none") != std::string::npos);
}

TEST_CASE("World: a peer that never arrives is a clear, restartable error",
          "[worker][process]") {
  std::string dir = TempDir();
  auto env = wt::RankEnv(0, 2, wt::FreeLoopbackPort());
  env["TORCHELASTIC_ERROR_FILE"] = dir + "/error.json";
  wt::RankProcess p({Helper(), "throw", "init"}, env);
  REQUIRE(p.Wait(std::chrono::seconds(30)));
  INFO(p.Output());
  REQUIRE(p.exit_code() == kExitCollective);
  REQUIRE(p.Output().find("1 of 2 ranks arrived") != std::string::npos);
  std::string json = ReadText(dir + "/error.json");
  REQUIRE(json.find("CollectiveError: timed out") != std::string::npos);
}

TEST_CASE("DistributedDataParallel: 2 ranks x batch 8 equal 1 rank x batch 16",
          "[worker][process][ddp]") {
  // Tolerance 1e-5 absolute on every parameter after 5 SGD steps: the only
  // difference is the order of the fp32 gradient sums.
  std::string dir = TempDir();
  std::string multi = dir + "/multi.bin", single = dir + "/single.bin";
  SECTION("plain") {
    auto results = wt::RunRanks({Helper(), "ddp", multi, "5", "8"}, 2);
    RequireAllOk(results);
    // bucket_cap_mb 0.001 splits the 3244 gradient bytes in two buckets.
    for (auto& r : results) {
      INFO(r.output);
      REQUIRE(r.output.find("buckets 2 bytes 3244") != std::string::npos);
      REQUIRE(r.output.find("transport shared_memory") != std::string::npos);
    }
    wt::RankProcess p({Helper(), "ddp", single, "5", "16"}, {});
    REQUIRE(p.Wait(std::chrono::seconds(60)));
    REQUIRE(p.exit_code() == 0);
    REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-5);
  }
  SECTION("gradient accumulation with NoSync and an unused branch") {
    RequireAllOk(
        wt::RunRanks({Helper(), "ddp", multi, "4", "8", "2", "unused"}, 2));
    wt::RankProcess p({Helper(), "ddp", single, "4", "16", "2", "unused"}, {});
    REQUIRE(p.Wait(std::chrono::seconds(60)));
    INFO(p.Output());
    REQUIRE(p.exit_code() == 0);
    REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-5);
  }
  SECTION("a branch that starts being used half way (find_unused_parameters)") {
    // The reducer logs when the set of unused parameters changes; without
    // a logger attached that crashed (SIGSEGV) on the first changed step.
    auto results =
        wt::RunRanks({Helper(), "ddp", multi, "4", "8", "1", "switch"}, 2);
    RequireAllOk(results);
    wt::RankProcess p({Helper(), "ddp", single, "4", "16", "1", "switch"}, {});
    REQUIRE(p.Wait(std::chrono::seconds(60)));
    INFO(p.Output());
    REQUIRE(p.exit_code() == 0);
    REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-5);
  }
  SECTION("3 ranks x batch 4 equal 1 rank x batch 12") {
    RequireAllOk(wt::RunRanks({Helper(), "ddp", multi, "5", "4"}, 3));
    wt::RankProcess p({Helper(), "ddp", single, "5", "12"}, {});
    REQUIRE(p.Wait(std::chrono::seconds(60)));
    REQUIRE(p.exit_code() == 0);
    REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-5);
  }
}

TEST_CASE(
    "DistributedDataParallel: shared memory gradients and buffers "
    "train like Gloo's, and DDPRUN_SHM_ALLREDUCE=0 is Gloo",
    "[worker][process][ddp][shm]") {
  std::string dir = TempDir();
  std::string shm = dir + "/shm.bin", gloo = dir + "/gloo.bin";
  // A batch norm layer: its running statistics are buffers, which DDP
  // broadcasts from rank 0 after every synchronised backward.
  auto with_shm = wt::RunRanks({Helper(), "ddp", shm, "5", "8", "1", "bn"}, 2);
  auto with_gloo = wt::RunRanks({Helper(), "ddp", gloo, "5", "8", "1", "bn"},
                                2, {{"DDPRUN_SHM_ALLREDUCE", "0"}});
  RequireAllOk(with_shm);
  RequireAllOk(with_gloo);
  auto buffers = [](const std::string& out) {
    size_t at = out.find("buffers ");
    return at == std::string::npos ? std::string()
                                   : out.substr(at, out.find('\n', at) - at);
  };
  for (int r = 0; r < 2; ++r) {
    INFO(with_shm[r].output << with_gloo[r].output);
    REQUIRE(with_shm[r].output.find("transport shared_memory") !=
            std::string::npos);
    REQUIRE(with_gloo[r].output.find("transport process_group") !=
            std::string::npos);
  }
  // Every rank holds rank 0's buffers after the last step (5 batches seen).
  REQUIRE_FALSE(buffers(with_shm[0].output).empty());
  REQUIRE(buffers(with_shm[0].output).find(" 5") != std::string::npos);
  REQUIRE(buffers(with_shm[0].output) == buffers(with_shm[1].output));
  REQUIRE(buffers(with_gloo[0].output) == buffers(with_gloo[1].output));
  // Same averaged gradients up to the order of fp32 sums.
  REQUIRE(MaxAbsDiff(ReadFloats(shm), ReadFloats(gloo)) < 1e-5);

  auto bad = wt::RunRanks({Helper(), "ddp", shm, "1", "8"}, 2,
                          {{"DDPRUN_SHM_ALLREDUCE", "yes"}});
  for (auto& r : bad) {
    INFO(r.output);
    REQUIRE(r.exit_code == ddprun::worker::kExitUsage);
    REQUIRE(r.output.find("DDPRUN_SHM_ALLREDUCE must be 0 or 1") !=
            std::string::npos);
  }
}

TEST_CASE("DistributedDataParallel: a rank that dies mid-training fails its "
          "shared memory peer at once, naming it",
          "[worker][process][ddp][shm]") {
  // Without the liveness check rank 0 would wait the collective timeout
  // (30 min) in the gradient all-reduce; RunRanks kills it after 60 s.
  std::string dir = TempDir();
  const auto start = std::chrono::steady_clock::now();
  auto results = wt::RunRanks({Helper(), "ddp", dir + "/p.bin", "5", "8"}, 2,
                              {{"DDP_RANK1_EXITS_AT", "2"}});
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  INFO(results[0].output);
  REQUIRE(results[1].exit_code == 3);
  REQUIRE(results[0].exit_code == kExitCollective);
  REQUIRE(results[0].output.find("rank 1 (pid") != std::string::npos);
  REQUIRE(results[0].output.find("exited") != std::string::npos);
  REQUIRE(seconds < 30);
}

TEST_CASE("RunMain: an exception writes torchrun's error file and exits 1",
          "[worker][process][error]") {
  std::string dir = TempDir();
  std::string file = dir + "/error.json";
  wt::RankProcess p(
      {Helper(), "throw", "runtime"},
      {{"TORCHELASTIC_ERROR_FILE", file}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
  REQUIRE(p.Wait(std::chrono::seconds(30)));
  REQUIRE(p.exit_code() == 1);
  std::string json = ReadText(file);
  INFO(json);
  REQUIRE(json.rfind("{\"message\": {\"message\": \"std::runtime_error: loss "
                     "is NaN at step 7\", \"extraInfo\": {\"py_callstack\": \"",
                     0) == 0);
  REQUIRE(json.find("\"timestamp\": \"") != std::string::npos);
  // Python must parse it with the exact schema torchrun reads.
  std::string check =
      "/usr/bin/python3 -c \"import json,sys,time; d=json.load(open('" + file +
      "')); m=d['message']; assert m['message'].startswith('std::runtime_error"
      "'); assert abs(int(m['extraInfo']['timestamp'])-time.time())<120; "
      "assert 'rank 0' in m['extraInfo']['py_callstack']\"";
  REQUIRE(std::system(check.c_str()) == 0);
}

TEST_CASE("RunMain: collective failures and Torch errors get their codes",
          "[worker][process][error]") {
  std::string dir = TempDir();
  std::string file = dir + "/error.json";
  {
    wt::RankProcess p({Helper(), "throw", "collective"},
                      {{"TORCHELASTIC_ERROR_FILE", file}});
    REQUIRE(p.Wait(std::chrono::seconds(30)));
    REQUIRE(p.exit_code() == kExitCollective);
    REQUIRE(ReadText(file).find("CollectiveError: all_reduce failed") !=
            std::string::npos);
  }
  {
    wt::RankProcess p({Helper(), "throw", "torch"},
                      {{"TORCHELASTIC_ERROR_FILE", file}});
    REQUIRE(p.Wait(std::chrono::seconds(30)));
    REQUIRE(p.exit_code() == 1);
    std::string json = ReadText(file);
    INFO(json);
    REQUIRE(json.find("c10::Error: ") != std::string::npos);
  }
}

TEST_CASE(
    "DistributedSampler: indices equal torch.utils.data.DistributedSampler",
    "[worker][process][sampler]") {
  struct Case {
    int n, world, seed, epoch;
    bool shuffle, drop_last;
  };
  std::vector<Case> cases = {
      {10, 3, 0, 0, true, false},    {10, 3, 7, 2, true, true},
      {1000, 4, 42, 5, true, false}, {5, 4, 1, 1, false, false},
      {2, 4, 3, 0, true, false},     {3, 4, 3, 0, true, true},
      {30000, 2, 9, 1, true, false}};
  // One Python run prints every case (importing torch costs seconds).
  std::string script =
      "from torch.utils.data import DistributedSampler\n"
      "def run(n, world, seed, epoch, shuffle, drop_last):\n"
      "  for r in range(world):\n"
      "    s = DistributedSampler(range(n), num_replicas=world, rank=r,\n"
      "                           shuffle=shuffle, seed=seed, "
      "drop_last=drop_last)\n"
      "    s.set_epoch(epoch)\n"
      "    print(''.join(str(i) + ' ' for i in s))\n"
      "  print('--')\n";
  for (const Case& c : cases) {
    script += "run(" + std::to_string(c.n) + ", " + std::to_string(c.world) +
              ", " + std::to_string(c.seed) + ", " + std::to_string(c.epoch) +
              ", " + (c.shuffle ? "True" : "False") + ", " +
              (c.drop_last ? "True" : "False") + ")\n";
  }
  std::string py = TempDir() + "/s.py";
  std::ofstream(py) << script;
  REQUIRE(std::system(
              ("/usr/bin/python3 " + py + " > " + py + ".out").c_str()) == 0);
  std::string expected = ReadText(py + ".out");
  size_t pos = 0;
  for (const Case& c : cases) {
    CAPTURE(c.n, c.world, c.seed, c.epoch, c.shuffle, c.drop_last);
    wt::RankProcess p({Helper(), "sampler", std::to_string(c.n),
                       std::to_string(c.seed), std::to_string(c.epoch),
                       c.shuffle ? "1" : "0", c.drop_last ? "1" : "0"},
                      {{"SAMPLER_WORLD", std::to_string(c.world)}});
    REQUIRE(p.Wait(std::chrono::seconds(30)));
    REQUIRE(p.exit_code() == 0);
    size_t end = expected.find("--\n", pos);
    REQUIRE(end != std::string::npos);
    REQUIRE(p.Output() == expected.substr(pos, end - pos));
    pos = end + 3;
  }
}

TEST_CASE("World: ranks under Debian's torchrun use its agent store",
          "[worker][process][torchrun]") {
  // torchrun's static rendezvous sets TORCHELASTIC_USE_AGENT_STORE=True: the
  // agent hosts the TCPStore and workers use the /worker/attempt_N prefix.
  // Debian's torchrun needs tests/compat/torchrun_fixes.py to start (Python
  // 3.11 under 1.13; no libuv under 2.6); the workers here are ours.
  std::string dir = TempDir();
  std::string fixes =
      std::string(DDPRUN_SOURCE_DIR) + "/tests/compat/torchrun_fixes.py";
  REQUIRE(std::system(("cp " + fixes + " " + dir).c_str()) == 0);
  {
    std::ofstream site(dir + "/sitecustomize.py");
    site << "import torchrun_fixes\ntorchrun_fixes.apply()\n";
  }
  std::string cmd = "cd " + dir + " && PYTHONPATH=" + dir +
                    " OMP_NUM_THREADS=1 timeout 120 /usr/bin/python3 -m "
                    "torch.distributed.run --nnodes=1 --node_rank=0 "
                    "--master_addr=127.0.0.1 --master_port=" +
                    std::to_string(wt::FreeLoopbackPort()) +
                    " --nproc_per_node=2 --no_python " + Helper() + " ";
  SECTION("collectives succeed") {
    REQUIRE(std::system((cmd + "collectives > out.txt 2>&1").c_str()) == 0);
    std::string out = ReadText(dir + "/out.txt");
    INFO(out);
    REQUIRE(out.find("rank 0 of 2 ok backend gloo agent_store 1") !=
            std::string::npos);
    REQUIRE(out.find("rank 1 of 2 ok backend gloo agent_store 1") !=
            std::string::npos);
  }
  SECTION("torchrun reports our error file as the root cause") {
    REQUIRE(std::system((cmd + "throw runtime > out.txt 2>&1").c_str()) != 0);
    std::string out = ReadText(dir + "/out.txt");
    INFO(out);
    REQUIRE(out.find("Root Cause (first observed failure)") !=
            std::string::npos);
    REQUIRE(out.find("std::runtime_error: loss is NaN at step 7") !=
            std::string::npos);
  }
}

namespace {

// ShardedAdam (gradients reduce-scattered by the optimizer) on `ranks`
// ranks x batch 8 vs AdamW on one process x batch 8*ranks: equal parameters
// after 5 steps (1e-5 absolute: fp32 summation order) and optimizer state
// 1/ranks of the unsharded one.
void CheckShardedAdam(int ranks) {
  std::string dir = TempDir();
  std::string multi = dir + "/multi.bin", single = dir + "/single.bin";
  auto results =
      wt::RunRanks({Helper(), "zero", multi, "5", "8", "sharded"}, ranks);
  RequireAllOk(results);
  wt::RankProcess p(
      {Helper(), "zero", single, "5", std::to_string(8 * ranks), "plain"}, {});
  REQUIRE(p.Wait(std::chrono::seconds(60)));
  REQUIRE(p.exit_code() == 0);
  REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-5);
  long long numel = 0, bytes = 0;
  REQUIRE(std::sscanf(results[0].output.c_str(),
                      "rank 0 numel %lld state_bytes %lld", &numel,
                      &bytes) == 2);
  // exp_avg + exp_avg_sq in fp32 for 1/ranks of the (padded) parameters.
  REQUIRE(bytes == 2 * 4 * ((numel + ranks - 1) / ranks));
  long long full = 0;
  REQUIRE(std::sscanf(p.Output().c_str(), "rank 0 numel %lld state_bytes %lld",
                      &numel, &full) == 2);
  REQUIRE(static_cast<double>(bytes) / full ==
          Approx(1.0 / ranks).epsilon(0.01));
}

}  // namespace

TEST_CASE("ShardedAdam: 2 ranks equal AdamW on the full batch, state 1/world",
          "[worker][process][zero]") {
  CheckShardedAdam(2);
}

TEST_CASE("ShardedAdam: 3 ranks (ring reduce-scatter on Gloo) equal AdamW",
          "[worker][process][zero]") {
  CheckShardedAdam(3);
}

// DeepSpeed's offload_optimizer {device: cpu}: the state lives in host
// memory and the update runs on the CPU. On this CPU world the parameters
// must come out as without offload (and as AdamW on the full batch), with
// the same state bytes per rank, none of them on the device.
TEST_CASE("ShardedAdam: CPU offload of the state trains like no offload",
          "[worker][process][zero]") {
  std::string dir = TempDir();
  std::string offload = dir + "/offload.bin", sharded = dir + "/sharded.bin";
  std::string single = dir + "/single.bin";
  auto with = wt::RunRanks({Helper(), "zero", offload, "5", "8", "offload"}, 2);
  RequireAllOk(with);
  auto without =
      wt::RunRanks({Helper(), "zero", sharded, "5", "8", "sharded"}, 2);
  RequireAllOk(without);
  wt::RankProcess p({Helper(), "zero", single, "5", "16", "plain"}, {});
  REQUIRE(p.Wait(std::chrono::seconds(60)));
  REQUIRE(p.exit_code() == 0);
  CHECK(MaxAbsDiff(ReadFloats(offload), ReadFloats(sharded)) < 1e-6);
  CHECK(MaxAbsDiff(ReadFloats(offload), ReadFloats(single)) < 1e-5);
  for (size_t r = 0; r < 2; ++r) {
    long long rank = -1, numel = 0, bytes = 0, device = -1;
    long long bytes_without = 0, device_without = 0;
    INFO(with[r].output);
    REQUIRE(std::sscanf(with[r].output.c_str(),
                        "rank %lld numel %lld state_bytes %lld "
                        "device_state_bytes %lld",
                        &rank, &numel, &bytes, &device) == 4);
    REQUIRE(std::sscanf(without[r].output.c_str(),
                        "rank %lld numel %lld state_bytes %lld "
                        "device_state_bytes %lld",
                        &rank, &numel, &bytes_without, &device_without) == 4);
    CHECK(bytes == 2 * 4 * ((numel + 1) / 2));
    CHECK(bytes == bytes_without);
    CHECK(device == 0);
    CHECK(device_without == bytes_without);
  }
}

TEST_CASE("SyncBatchNorm: 2 ranks x batch 4 normalise like 1 rank x batch 8, "
          "through DDP's shared memory group as over Gloo",
          "[worker][process][syncbn]") {
  // Tolerance 1e-4 absolute on parameters and running stats after 4 steps
  // (statistics summed in a different order).
  for (const char* dims : {"2", "3"}) {
    CAPTURE(dims);
    std::string dir = TempDir();
    std::string multi = dir + "/multi.bin", single = dir + "/single.bin";
    auto ranks = wt::RunRanks({Helper(), "syncbn", multi, "4", "4", dims}, 2);
    RequireAllOk(ranks);
    // The statistics' all-reduces go through DDP's shared memory group.
    for (const auto& r : ranks) {
      INFO(r.output);
      REQUIRE(r.output.find("world collectives shared_memory") !=
              std::string::npos);
    }
    wt::RankProcess p({Helper(), "syncbn", single, "4", "8", dims}, {});
    REQUIRE(p.Wait(std::chrono::seconds(60)));
    INFO(p.Output());
    REQUIRE(p.exit_code() == 0);
    REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-4);
    // Over Gloo alone the same training, to float rounding.
    std::string gloo = dir + "/gloo.bin";
    auto over_gloo = wt::RunRanks({Helper(), "syncbn", gloo, "4", "4", dims},
                                  2, {{"DDPRUN_SHM_ALLREDUCE", "0"}});
    RequireAllOk(over_gloo);
    REQUIRE(over_gloo[0].output.find("world collectives process_group") !=
            std::string::npos);
    REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(gloo)) < 1e-5);
  }
}

TEST_CASE("AutocastScope: CPU bf16 autocast, GradScaler, clipping, LR scaling",
          "[worker][process]") {
  wt::RankProcess p({Helper(), "amp"}, {});
  REQUIRE(p.Wait(std::chrono::seconds(30)));
  INFO(p.Output());
  REQUIRE(p.exit_code() == 0);
}

TEST_CASE("ddp_demo: 2 ranks all-reduce and fit with identical replicas",
          "[worker][process][demo]") {
  auto results = wt::RunRanks({wt::BinPath("ddp_demo"), "--steps", "20"}, 2);
  RequireAllOk(results);
  for (int r = 0; r < 2; ++r) {
    const std::string& out = results[r].output;
    REQUIRE(out.find("rank " + std::to_string(r) +
                     " all_reduce(sum of rank+1) = 3 (expected 3)") !=
            std::string::npos);
    REQUIRE(out.find("(target 3, -1) OK") != std::string::npos);
  }
  REQUIRE(results[0].output.find("[ddp_demo] step 20 loss") !=
          std::string::npos);
  REQUIRE(results[1].output.find("[ddp_demo] step 20 loss") ==
          std::string::npos);
}

TEST_CASE("World: groups can join twice through one agent-hosted store",
          "[worker][process]") {
  // The agent's store outlives worker restarts; the second group must not
  // read the first group's keys (generation-scoped join and PG prefix).
  int port = wt::FreeLoopbackPort();
  wt::RankProcess host({Helper(), "host_store", std::to_string(port), "60"},
                       {});
  // A readiness wait, not a bound under test: the helper loads LibTorch
  // first, which took over 5 s (the old fixed 50 x 100 ms) on the 2-core
  // machine with two trainers running.
  REQUIRE(ddprun::testing::WaitUntil(
      [&] { return host.Output().find("store up") != std::string::npos; },
      std::chrono::seconds(30)));
  std::map<std::string, std::string> env = {
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_RESTART_COUNT", "0"}};
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    auto results = wt::RunRanks({Helper(), "collectives"}, 2, env,
                                std::chrono::seconds(30), port);
    RequireAllOk(results);
    REQUIRE(results[0].output.find("agent_store 1") != std::string::npos);
  }
}

TEST_CASE(
    "DistributedDataParallel: a parameter off the world's device is a "
    "usage error saying so",
    "[worker][process]") {
  // A rank that finds the problem first may leave while its peer still
  // connects the Gloo mesh: that peer then fails as a collective (75).
  auto results = wt::RunRanks({Helper(), "ddp_device"}, 2);
  int usage = 0;
  for (const auto& r : results) {
    INFO(r.output);
    REQUIRE(r.output.find("differs between ranks") == std::string::npos);
    if (r.exit_code == kExitCollective) continue;
    REQUIRE(r.exit_code == ddprun::worker::kExitUsage);
    REQUIRE(r.output.find("parameter 0 [2] is on meta but the world's device "
                          "is cpu (backend gloo): move the model to "
                          "world.device()") != std::string::npos);
    ++usage;
  }
  REQUIRE(usage >= 1);
}

TEST_CASE(
    "SyncBatchNorm: per-rank statistics combine stably when the mean "
    "dwarfs the spread",
    "[worker][process][syncbn]") {
  // Values 1000 +- 0.01 on 2 ranks: E[x^2] - E[x]^2 from float sums loses
  // the variance entirely; Chan's combination matches float64.
  auto results = wt::RunRanks({Helper(), "syncbn_offset", "1000", "4"}, 2);
  RequireAllOk(results);
  // The same check standalone (one rank, no collectives).
  wt::RankProcess p({Helper(), "syncbn_offset", "1000", "8"}, {});
  REQUIRE(p.Wait(std::chrono::seconds(60)));
  INFO(p.Output());
  REQUIRE(p.exit_code() == 0);
}

TEST_CASE(
    "ShardedAdam: gradient clipping uses the reduced gradients' norm "
    "(ZeRO-2)",
    "[worker][process][zero]") {
  // 0.05 is below every step's gradient norm here: every step clips. Local
  // gradients' norms differ from the averaged gradient's, so clipping them
  // would not match clip_grad_norm_ on one process with the full batch.
  std::string dir = TempDir();
  std::string multi = dir + "/multi.bin", single = dir + "/single.bin";
  auto results =
      wt::RunRanks({Helper(), "zero", multi, "5", "8", "sharded", "0.05"}, 2);
  RequireAllOk(results);
  wt::RankProcess p({Helper(), "zero", single, "5", "16", "plain", "0.05"}, {});
  REQUIRE(p.Wait(std::chrono::seconds(60)));
  REQUIRE(p.exit_code() == 0);
  REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-5);
  // Without clipping the runs differ: the clip did something.
  std::string unclipped = dir + "/unclipped.bin";
  wt::RankProcess q({Helper(), "zero", unclipped, "5", "16", "plain"}, {});
  REQUIRE(q.Wait(std::chrono::seconds(60)));
  REQUIRE(q.exit_code() == 0);
  REQUIRE(MaxAbsDiff(ReadFloats(unclipped), ReadFloats(single)) > 1e-4);
}
