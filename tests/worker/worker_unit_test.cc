// Torch-free unit tests of the worker runtime: env contract, error file,
// hardware table.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "ddprun_catch.h"

#include "ddprun/worker/backend_choice.h"
#include "ddprun/worker/env.h"
#include "ddprun/worker/generation.h"
#include "ddprun/worker/hardware.h"
#include "ddprun/worker/metrics.h"
#include "ddprun/worker/run_main.h"
#include "tests/worker/map_env.h"

namespace w = ddprun::worker;

namespace {

ddprun::StatusOr<w::WorkerEnv> Parse(
    const std::map<std::string, std::string>& vars) {
  return w::ParseWorkerEnv(w::testing::MapGetenv(vars));
}

// What `fn` writes to fd 2 (where LogMain writes), read back from a
// temporary file that stands in for it while `fn` runs.
std::string CapturedStderr(const std::function<void()>& fn) {
  char path[] = "/tmp/ddprun_stderr_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::unlink(path);
  std::fflush(stderr);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  fn();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::string out;
  ::lseek(fd, 0, SEEK_SET);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  ::close(fd);
  return out;
}

size_t CountLines(const std::string& text) {
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

}  // namespace

TEST_CASE("ParseWorkerEnv: no launcher variables means a standalone process",
          "[worker][env]") {
  auto env = Parse({});
  REQUIRE(env.ok());
  REQUIRE(env->standalone);
  REQUIRE(env->world_size == 1);
  REQUIRE(env->rank == 0);
}

TEST_CASE("ParseWorkerEnv: reads torchrun's contract", "[worker][env]") {
  auto env = Parse({{"RANK", "5"},
                    {"WORLD_SIZE", "8"},
                    {"LOCAL_RANK", "1"},
                    {"LOCAL_WORLD_SIZE", "4"},
                    {"GROUP_RANK", "1"},
                    {"MASTER_ADDR", "10.0.0.1"},
                    {"MASTER_PORT", "29500"},
                    {"TORCHELASTIC_RESTART_COUNT", "2"},
                    {"TORCHELASTIC_MAX_RESTARTS", "3"},
                    {"TORCHELASTIC_RUN_ID", "job7"},
                    {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                    {"TORCHELASTIC_ERROR_FILE", "/tmp/e.json"}});
  REQUIRE(env.ok());
  REQUIRE_FALSE(env->standalone);
  REQUIRE(env->rank == 5);
  REQUIRE(env->world_size == 8);
  REQUIRE(env->local_rank == 1);
  REQUIRE(env->local_world_size == 4);
  REQUIRE(env->group_rank == 1);
  REQUIRE(env->master_addr == "10.0.0.1");
  REQUIRE(env->master_port == 29500);
  REQUIRE(env->restart_count == 2);
  REQUIRE(env->max_restarts == 3);
  REQUIRE(env->run_id == "job7");
  REQUIRE(env->use_agent_store);
  REQUIRE(env->error_file == "/tmp/e.json");
}

TEST_CASE("ParseWorkerEnv: agent store only for the exact string True",
          "[worker][env]") {
  auto env = Parse({{"RANK", "0"},
                    {"WORLD_SIZE", "1"},
                    {"TORCHELASTIC_USE_AGENT_STORE", "true"}});
  REQUIRE(env.ok());
  REQUIRE_FALSE(env->use_agent_store);
}

TEST_CASE("ParseWorkerEnv: bad values are one-line errors naming the variable",
          "[worker][env]") {
  auto expect_error = [](std::map<std::string, std::string> vars,
                         const std::string& fragment) {
    auto env = Parse(vars);
    REQUIRE_FALSE(env.ok());
    INFO(env.status().message());
    REQUIRE(env.status().message().find(fragment) != std::string::npos);
    REQUIRE(env.status().message().find('\n') == std::string::npos);
  };
  expect_error({{"RANK", "x"}, {"WORLD_SIZE", "2"}},
               "RANK='x' is not an integer");
  expect_error({{"RANK", "2"},
                {"WORLD_SIZE", "2"},
                {"MASTER_ADDR", "a"},
                {"MASTER_PORT", "1"}},
               "RANK=2 is not below WORLD_SIZE=2");
  expect_error({{"RANK", "0"}}, "RANK is set but WORLD_SIZE is not");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "5"}},
               "missing MASTER_ADDR");
  expect_error({{"RANK", "0"},
                {"WORLD_SIZE", "2"},
                {"MASTER_ADDR", "h"},
                {"MASTER_PORT", "70000"}},
               "MASTER_PORT=70000 is out of range");
  expect_error({{"RANK", "0"},
                {"WORLD_SIZE", "2"},
                {"LOCAL_RANK", "3"},
                {"LOCAL_WORLD_SIZE", "2"},
                {"MASTER_ADDR", "h"},
                {"MASTER_PORT", "5"}},
               "LOCAL_RANK=3 is not below LOCAL_WORLD_SIZE=2");
}

TEST_CASE("ParseWorkerEnv: restart scope, generation and replacement",
          "[worker][env][restart_scope]") {
  const std::map<std::string, std::string> base = {{"RANK", "1"},
                                                   {"WORLD_SIZE", "2"},
                                                   {"MASTER_ADDR", "h"},
                                                   {"MASTER_PORT", "5"}};
  auto plain = Parse(base);
  REQUIRE(plain.ok());
  CHECK(plain->restart_scope == "group");
  CHECK(plain->generation == 0);
  CHECK_FALSE(plain->replacement);
  auto vars = base;
  vars["DDPRUN_RESTART_SCOPE"] = "failed";
  vars["DDPRUN_GENERATION"] = "3";
  vars["DDPRUN_REPLACEMENT"] = "1";
  auto env = Parse(vars);
  REQUIRE(env.ok());
  CHECK(env->restart_scope == "failed");
  CHECK(env->generation == 3);
  CHECK(env->replacement);
  vars["DDPRUN_REPLACEMENT"] = "0";
  vars["DDPRUN_RESTART_SCOPE"] = "group";
  env = Parse(vars);
  REQUIRE(env.ok());
  CHECK(env->restart_scope == "group");
  CHECK_FALSE(env->replacement);
}

TEST_CASE("ParseWorkerEnv: a bad restart scope contract is a one-line error",
          "[worker][env][restart_scope]") {
  auto expect_error = [](std::map<std::string, std::string> vars,
                         const std::string& fragment) {
    vars.insert({{"RANK", "0"},
                 {"WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "h"},
                 {"MASTER_PORT", "5"}});
    auto env = Parse(vars);
    REQUIRE_FALSE(env.ok());
    INFO(env.status().message());
    CHECK(env.status().message().find(fragment) != std::string::npos);
  };
  expect_error({{"DDPRUN_RESTART_SCOPE", "node"}},
               "DDPRUN_RESTART_SCOPE='node' is not group or failed");
  expect_error({{"DDPRUN_RESTART_SCOPE", "failed"},
                {"DDPRUN_REPLACEMENT", "yes"},
                {"DDPRUN_GENERATION", "1"}},
               "DDPRUN_REPLACEMENT='yes' is not 0 or 1");
  expect_error({{"DDPRUN_REPLACEMENT", "1"}, {"DDPRUN_GENERATION", "1"}},
               "DDPRUN_REPLACEMENT=1 needs DDPRUN_RESTART_SCOPE=failed");
  expect_error(
      {{"DDPRUN_RESTART_SCOPE", "failed"}, {"DDPRUN_REPLACEMENT", "1"}},
      "needs a DDPRUN_GENERATION above 0");
  expect_error({{"DDPRUN_GENERATION", "-1"}},
               "DDPRUN_GENERATION=-1 is out of range");
}

TEST_CASE("ParseGenerationRecord: the agent's record of a generation",
          "[worker][restart_scope]") {
  auto r = w::ParseGenerationRecord(
      3,
      " {\"replaced\": [2, 0], \"reason\": \"exit code \\\"137\\\"\", "
      "\"time\": 1.5e9, \"extra\": {\"a\": [true, null, \"x\"]}, "
      "\"source\": 1} ",
      4);
  REQUIRE(r.ok());
  CHECK(r->generation == 3);
  CHECK(r->replaced == std::vector<int>{0, 2});
  CHECK(r->source == 1);
  CHECK(r->reason == "exit code \"137\"");
  CHECK(w::GenerationRecordKey(3) == "/ddprun/generation/3");
  CHECK(w::GenerationHealedKey(3) == "/ddprun/generation/3/healed");
  CHECK(w::GenerationPrefix(3) == "ddprun/gen/3");
}

TEST_CASE("ParseGenerationRecord: a bad record is one line naming the key",
          "[worker][restart_scope]") {
  auto expect_error = [](const std::string& json, const std::string& fragment) {
    auto r = w::ParseGenerationRecord(2, json, 4);
    REQUIRE_FALSE(r.ok());
    INFO(r.status().message());
    CHECK(r.status().message().find("/ddprun/generation/2") !=
          std::string::npos);
    CHECK(r.status().message().find(fragment) != std::string::npos);
    CHECK(r.status().message().find('\n') == std::string::npos);
  };
  expect_error("", "expected '{'");
  expect_error("{}", "an empty object");
  expect_error("{\"replaced\":[1]}", "no \"source\" rank");
  expect_error("{\"source\":0}", "no \"replaced\" list");
  expect_error("{\"replaced\":[4],\"source\":0}",
               "replaced rank 4 is not in [0, 4)");
  expect_error("{\"replaced\":[1],\"source\":-1}",
               "source rank -1 is not in [0, 4)");
  expect_error("{\"replaced\":[1],\"source\":1}",
               "the source rank 1 is itself replaced");
  expect_error("{\"replaced\":[1.5],\"source\":0}", "expected an integer");
  expect_error("{\"replaced\":[1],\"source\":0} x", "text after the object");
  expect_error("{\"replaced\":[1],\"reason\":\"open", "unterminated string");
}

TEST_CASE("ParseGenerationNumber: a non-negative decimal",
          "[worker][restart_scope]") {
  CHECK(w::ParseGenerationNumber("0").value() == 0);
  CHECK(w::ParseGenerationNumber("12").value() == 12);
  for (const char* bad : {"", "-1", "1x", " 1", "+1"}) {
    CAPTURE(bad);
    CHECK_FALSE(w::ParseGenerationNumber(bad).ok());
  }
}

TEST_CASE("ErrorFileJson: torchrun's schema with escaping", "[worker][error]") {
  w::ErrorReport r;
  r.type = "std::runtime_error";
  r.message = "bad \"quote\"\nline2";
  r.context = "rank 0\tpid 7";
  std::string json = w::ErrorFileJson(r, 1700000000);
  REQUIRE(json ==
          "{\"message\": {\"message\": \"std::runtime_error: bad "
          "\\\"quote\\\"\\nline2\", \"extraInfo\": {\"py_callstack\": \"rank "
          "0\\tpid 7\", \"timestamp\": \"1700000000\"}}}\n");
}

TEST_CASE("DescribeException: worker error classes map to exit codes",
          "[worker][error]") {
  auto describe = [](auto ex) {
    try {
      throw ex;
    } catch (...) {
      return w::DescribeException(std::current_exception());
    }
  };
  REQUIRE(describe(w::ConfigError("x")).exit_code == w::kExitUsage);
  REQUIRE(describe(w::CollectiveError("x")).exit_code == w::kExitCollective);
  REQUIRE(describe(w::CollectiveError("x")).type == "CollectiveError");
  auto gloo = describe(std::runtime_error(
      "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed "
      "by peer [127.0.0.1]:1234"));
  REQUIRE(gloo.exit_code == w::kExitCollective);
  REQUIRE(gloo.type == "std::runtime_error");
  REQUIRE(describe(std::logic_error("bug")).exit_code == w::kExitFailure);
  REQUIRE(describe(42).type == "UnknownException");
}

TEST_CASE("RecommendForGpuMemory: the MIMIC-CXR table on 4 GPUs",
          "[worker][hardware]") {
  struct Row {
    double gb;
    int batch, accum;
  };
  for (Row r : {Row{24, 16, 4}, Row{80, 16, 4}, Row{16, 12, 5}, Row{12, 8, 8},
                Row{8, 4, 16}, Row{4, 2, 32}}) {
    CAPTURE(r.gb);
    auto s = w::RecommendForGpuMemory(r.gb, 4, 256);
    REQUIRE(s.per_device_batch == r.batch);
    REQUIRE(s.grad_accum_steps == r.accum);
    REQUIRE(s.device == "cuda");
  }
}

TEST_CASE("RecommendForGpuMemory: generalises to world size and target",
          "[worker][hardware]") {
  auto s = w::RecommendForGpuMemory(24, 8, 256);  // 16 x 2 x 8 = 256
  REQUIRE(s.grad_accum_steps == 2);
  REQUIRE(s.effective_batch == 256);
  s = w::RecommendForGpuMemory(24, 1, 64);  // 16 x 4 x 1
  REQUIRE(s.grad_accum_steps == 4);
  s = w::RecommendForGpuMemory(24, 64, 256);  // never below 1
  REQUIRE(s.grad_accum_steps == 1);
  REQUIRE(s.effective_batch == 16 * 64);
}

TEST_CASE("RecommendSettings: CPU-only machines get CPU settings",
          "[worker][hardware]") {
  w::HardwareInfo hw;
  hw.cpu_cores = 16;
  hw.ram_total_bytes = 64LL << 30;
  auto s = w::RecommendSettings(hw, 2, 2, 256);
  REQUIRE(s.device == "cpu");
  REQUIRE(s.per_device_batch == 8);
  REQUIRE(s.grad_accum_steps == 16);
  REQUIRE(s.cpu_threads == 8);
  REQUIRE_FALSE(s.mixed_precision);
  hw.ram_total_bytes = 8LL << 30;
  REQUIRE(w::RecommendSettings(hw, 1, 1, 256).per_device_batch == 4);
  // GPUs seen only by nvidia-smi cannot be used by a CPU Torch.
  hw.gpus.push_back({0, "H200", 140LL << 30, 9, 0});
  REQUIRE(w::RecommendSettings(hw, 1, 1, 256).device == "cpu");
  hw.torch_cuda = true;
  REQUIRE(w::RecommendSettings(hw, 1, 1, 256).device == "cuda");
}

TEST_CASE("ParseMemInfo: total and available bytes", "[worker][hardware]") {
  auto m = w::ParseMemInfo(
      "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   "
      "20480000 kB\n");
  REQUIRE(m.ok());
  REQUIRE(m->first == 24576000LL * 1024);
  REQUIRE(m->second == 20480000LL * 1024);
  REQUIRE_FALSE(w::ParseMemInfo("garbage").ok());
}

TEST_CASE("DetectHardware: this machine has cores and RAM",
          "[worker][hardware]") {
  w::HardwareInfo hw = w::DetectHardware();
  REQUIRE(hw.cpu_cores >= 1);
  REQUIRE(hw.ram_total_bytes > (256LL << 20));
  REQUIRE(hw.ram_available_bytes <= hw.ram_total_bytes);
}

TEST_CASE("ProgressMeter: epoch, step, loss, throughput and ETA",
          "[worker][metrics]") {
  w::World world;  // standalone
  w::ProgressMeter meter(world, 2, 10, std::chrono::hours(1));
  meter.Update(0, 1, 0.9, 32);  // first step: start of the clock
  // Real time on purpose: the rate is measured over it (64 samples in
  // >= 50 ms bound it from above).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  meter.Update(0, 3, 0.5, 32);
  meter.Update(1, 6, 0.25, 32);
  std::string line = meter.Line();
  INFO(line);
  REQUIRE(line.rfind("epoch 2/2 step 6/10 loss 0.2500 samples/s ", 0) == 0);
  // 64 samples in >= 50 ms.
  REQUIRE(meter.samples_per_second() > 0);
  REQUIRE(meter.samples_per_second() < 64 / 0.05 + 1);
  REQUIRE(line.find("eta 00:00:") != std::string::npos);
  REQUIRE(w::AllReduceMean(world, 2.5) == 2.5);
  REQUIRE(w::AllReduceWeightedMean(world, 2.5, 0) == 0);
}

TEST_CASE("ProgressMeter: the end of each epoch prints once, the last too",
          "[worker][metrics]") {
  w::World world;
  // Two epochs of two steps; an hour between timed lines, so only the ends
  // of epochs and the run's last step print.
  w::ProgressMeter meter(world, 2, 4, std::chrono::hours(1));
  const std::string epoch1 = CapturedStderr([&] {
    meter.Update(0, 1, 0.5, 8);
    meter.Update(0, 2, 0.4, 8);
    meter.Flush();  // end of epoch 1
  });
  INFO(epoch1);
  CHECK(CountLines(epoch1) == 1);
  CHECK(epoch1.rfind("epoch 1/2 step 2/4 loss 0.4000 ", 0) == 0);
  const std::string epoch2 = CapturedStderr([&] {
    meter.Update(1, 3, 0.3, 8);
    meter.Update(1, 4, 0.2, 8);  // the last step prints at once
    meter.Flush();  // end of epoch 2: the same step, not a second line
    meter.Flush();
  });
  INFO(epoch2);
  CHECK(CountLines(epoch2) == 1);
  CHECK(epoch2.rfind("epoch 2/2 step 4/4 loss 0.2000 ", 0) == 0);
}

TEST_CASE("ProgressMeter: a loss that rounds to zero prints unsigned",
          "[worker][metrics]") {
  w::World world;
  w::ProgressMeter meter(world, 1, 10, std::chrono::hours(1));
  meter.Update(0, 1, -0.0, 8);  // a survival batch without events
  CHECK(meter.Line().find(" loss 0.0000 ") != std::string::npos);
  meter.Update(0, 2, -0.00001, 8);
  CHECK(meter.Line().find(" loss 0.0000 ") != std::string::npos);
  meter.Update(0, 3, -0.25, 8);  // a real negative value keeps its sign
  CHECK(meter.Line().find(" loss -0.2500 ") != std::string::npos);
}

TEST_CASE("ProgressMeter: after only the first step there is no rate, not 0",
          "[worker][metrics]") {
  w::World world;
  w::ProgressMeter meter(world, 1, 1, std::chrono::hours(1));
  REQUIRE_FALSE(meter.rate_measured());
  meter.Update(0, 1, 0.5, 8);  // an epoch of one step (ddpm's stages)
  // Time passes on purpose: still no rate after it.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE_FALSE(meter.rate_measured());
  const std::string line = meter.Line();
  INFO(line);
  REQUIRE(line.find("samples/s - eta") != std::string::npos);
  meter.Update(0, 2, 0.4, 8);
  REQUIRE(meter.rate_measured());
  REQUIRE(meter.samples_per_second() > 0);
}

namespace {

w::BackendFacts Facts(const std::string& backend, int local_ranks, int gpus) {
  w::BackendFacts f;
  f.backend = backend;
  f.local_world_size = local_ranks;
  f.visible_gpus = gpus;
  f.torch_has_cuda = true;
  return f;
}

}  // namespace

TEST_CASE("ChooseBackend: NCCL with a GPU per local rank, Gloo otherwise",
          "[worker][backend]") {
  auto c = w::ChooseBackend(Facts("auto", 2, 2));
  REQUIRE(c.ok());
  CHECK(c->backend == "nccl");
  CHECK(c->device == "cuda");
  CHECK(c->why.empty());
  c = w::ChooseBackend(Facts("auto", 4, 0));
  REQUIRE(c.ok());
  CHECK(c->backend == "gloo");
  CHECK(c->device == "cpu");
  CHECK(c->why.empty());
  w::BackendFacts cpu_build = Facts("auto", 1, 0);
  cpu_build.torch_has_cuda = false;
  c = w::ChooseBackend(cpu_build);
  REQUIRE(c.ok());
  CHECK(c->backend == "gloo");
  CHECK(c->device == "cpu");
  // An explicit CPU device under auto is Gloo, not an NCCL error.
  w::BackendFacts on_cpu = Facts("auto", 1, 1);
  on_cpu.device = "cpu";
  c = w::ChooseBackend(on_cpu);
  REQUIRE(c.ok());
  CHECK(c->backend == "gloo");
  CHECK(c->device == "cpu");
}

TEST_CASE(
    "ChooseBackend: more local ranks than GPUs share them over Gloo "
    "under auto and are a usage error under nccl",
    "[worker][backend]") {
  auto c = w::ChooseBackend(Facts("auto", 2, 1));
  REQUIRE(c.ok());
  CHECK(c->backend == "gloo");
  CHECK(c->device == "cuda");
  CHECK(c->why.find("2 ranks on this node share 1 visible GPU") !=
        std::string::npos);
  c = w::ChooseBackend(Facts("nccl", 3, 2));
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == ddprun::StatusCode::kInvalidArgument);
  CHECK(c.status().message().find("3 ranks on this node see 2 visible GPUs") !=
        std::string::npos);
  CHECK(c.status().message().find("--nproc_per_node=2") != std::string::npos);
  CHECK(c.status().message().find("--backend gloo") != std::string::npos);
  // A launcher that gives each rank its own GPU (--virtual_local_rank).
  w::BackendFacts own = Facts("nccl", 2, 1);
  own.gpu_per_rank = true;
  c = w::ChooseBackend(own);
  REQUIRE(c.ok());
  CHECK(c->backend == "nccl");
  own.backend = "auto";
  c = w::ChooseBackend(own);
  REQUIRE(c.ok());
  CHECK(c->backend == "nccl");
  // Explicit gloo keeps the requested (auto: CPU) device.
  c = w::ChooseBackend(Facts("gloo", 2, 1));
  REQUIRE(c.ok());
  CHECK(c->backend == "gloo");
  CHECK(c->device == "cpu");
}

TEST_CASE("ChooseBackend: unknown names and impossible combinations",
          "[worker][backend]") {
  CHECK(w::ChooseBackend(Facts("mpi", 1, 1)).status().message() ==
        "unknown backend 'mpi' (expected auto, gloo or nccl)");
  w::BackendFacts f = Facts("nccl", 1, 1);
  f.device = "cpu";
  CHECK(w::ChooseBackend(f).status().message().find("device cpu needs "
                                                    "backend gloo") !=
        std::string::npos);
  CHECK(w::ChooseBackend(Facts("nccl", 1, 0))
            .status()
            .message()
            .find("no CUDA device is visible") != std::string::npos);
  w::BackendFacts no_cuda = Facts("nccl", 1, 0);
  no_cuda.torch_has_cuda = false;
  CHECK(w::ChooseBackend(no_cuda).status().message().find(
            "built without CUDA") != std::string::npos);
}
