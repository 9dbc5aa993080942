// A gcc-buildable driver for LLVMFuzzerTestOneInput (rendezvous_fuzz_target
// .cc): replays a seed corpus, then pseudo-random mutations of it for a
// bounded time. CI runs it briefly through ctest; clang builds get the real
// libFuzzer binary instead (DDPRUN_BUILD_FUZZ).
//
//   rendezvous_fuzz_replay [--seconds S] [--seed N] CORPUS_DIR...
//   rendezvous_fuzz_replay --write_seeds DIR   (regenerates the seed corpus)
//
// Exit 0 when every input ran; an invariant violation aborts (non-zero).
#include <dirent.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ddprun/v1/rendezvous.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace v1 = ::ddprun::rendezvous::v1;

std::string Record(uint8_t op, const std::string& payload) {
  std::string r(1, static_cast<char>(op));
  r += static_cast<char>(payload.size() & 0xff);
  r += static_cast<char>(payload.size() >> 8);
  return r + payload;
}
std::string Msg(const google::protobuf::Message& m) {
  return m.SerializeAsString();
}
std::string Tick(uint8_t tenths) { return Record(7, std::string(1, tenths)); }

v1::JoinRequest Join(const std::string& node, int min, int max,
                     const std::string& addr, int64_t previous_round = 0) {
  v1::JoinRequest r;
  r.set_rdzv_id("job");
  r.mutable_config()->set_min_nodes(min);
  r.mutable_config()->set_max_nodes(max);
  r.mutable_config()->set_max_restarts(2);
  r.mutable_config()->set_bad_host_failures(2);
  r.mutable_config()->set_bad_host_cooldown_ms(5000);
  r.mutable_node()->set_node_id(node);
  r.mutable_node()->set_instance(7);
  r.mutable_node()->set_local_world_size(2);
  r.mutable_node()->set_node_rank_hint(-1);
  r.mutable_node()->set_addr(addr);
  r.mutable_node()->set_master_port(29500);
  r.mutable_previous()->set_round(previous_round);
  return r;
}

template <typename T>
T NodeCall(const std::string& node, int64_t round) {
  T r;
  r.set_rdzv_id("job");
  r.set_node_id(node);
  r.set_instance(7);
  r.set_round(round);
  return r;
}

std::vector<std::string> Seeds() {
  std::vector<std::string> seeds;
  const auto a = Join("a", 2, 2, "10.0.0.1"), b = Join("b", 2, 2, "10.0.0.2");
  v1::HeartbeatRequest hb;
  hb.set_rdzv_id("job");
  *hb.mutable_config() = a.config();
  *hb.mutable_node() = a.node();
  hb.mutable_current()->set_round(1);
  hb.mutable_current()->set_group_world_size(2);
  // A round, a worker failure, a second round, success.
  seeds.push_back(Record(0, Msg(a)) + Record(0, Msg(b)) + Record(1, Msg(hb)) +
                  Record(2, Msg(NodeCall<v1::ReportFailureRequest>("a", 1))) +
                  Record(0, Msg(Join("a", 2, 2, "10.0.0.1", 1))) +
                  Record(0, Msg(Join("b", 2, 2, "10.0.0.2", 1))) + Tick(5) +
                  Record(3, Msg(NodeCall<v1::ReportSuccessRequest>("a", 2))) +
                  Record(3, Msg(NodeCall<v1::ReportSuccessRequest>("b", 2))) +
                  Record(6, ""));
  // An elastic 1:3 round after the last call, a leave, a close.
  v1::LeaveRequest leave;
  leave.set_rdzv_id("job");
  leave.set_node_id("a");
  leave.set_instance(7);
  v1::CloseRequest close;
  close.set_rdzv_id("job");
  seeds.push_back(Record(0, Msg(Join("a", 1, 3, "10.0.0.1"))) + Tick(110) +
                  Record(0, Msg(Join("c", 1, 3, "10.0.0.3"))) +
                  Record(4, Msg(leave)) + Record(8, std::string(1, 1)) +
                  Record(5, Msg(close)) + Record(6, ""));
  // A server restart: the job rebuilt from a heartbeat, a node lost.
  hb.mutable_current()->set_round(3);
  seeds.push_back(Record(1, Msg(hb)) + Tick(40) + Record(6, ""));
  // Repeated failures of one host (bad-host policy), then its cool-down.
  std::string bad = Record(0, Msg(a)) + Record(0, Msg(b));
  for (int round = 1; round <= 2; ++round) {
    bad += Record(2, Msg(NodeCall<v1::ReportFailureRequest>("a", round))) +
           Record(0, Msg(Join("b", 2, 2, "10.0.0.2", round))) +
           Record(0, Msg(Join("a", 2, 2, "10.0.0.1", round)));
  }
  seeds.push_back(bad + Tick(60) + Record(6, ""));
  return seeds;
}

std::vector<std::string> ReadCorpus(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(dir + "/" + e->d_name, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    out.push_back(ss.str());
  }
  closedir(d);
  return out;
}

std::string Mutate(std::string s, const std::vector<std::string>& corpus,
                   std::mt19937_64& rng) {
  const int n = 1 + rng() % 8;
  for (int i = 0; i < n; ++i) {
    const size_t pos = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 6) {
      case 0:
        if (!s.empty()) s[pos] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:
        if (!s.empty()) s[pos] = static_cast<char>(rng());
        break;
      case 2:
        s.insert(pos, 1, static_cast<char>(rng()));
        break;
      case 3:
        if (!s.empty()) s.erase(pos, 1 + rng() % 4);
        break;
      case 4: {  // duplicate a chunk (repeats a request)
        const size_t len = s.empty() ? 0 : 1 + rng() % (s.size() - pos);
        s.insert(pos, s.substr(pos, len));
        break;
      }
      case 5: {  // splice with another corpus entry
        const std::string& other = corpus[rng() % corpus.size()];
        s = s.substr(0, pos) +
            other.substr(other.empty() ? 0 : rng() % other.size());
        break;
      }
    }
  }
  return s.substr(0, 8192);
}

void Run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                         input.size());
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  uint64_t seed = 1;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--write_seeds" && i + 1 < argc) {
      const std::string dir = argv[++i];
      const auto seeds = Seeds();
      for (size_t k = 0; k < seeds.size(); ++k) {
        std::ofstream(dir + "/seed" + std::to_string(k), std::ios::binary)
            << seeds[k];
      }
      std::printf("wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
      return 0;
    } else {
      dirs.push_back(arg);
    }
  }
  std::vector<std::string> corpus = Seeds();
  for (const auto& d : dirs) {
    const auto files = ReadCorpus(d);
    if (files.empty()) {
      std::fprintf(stderr, "rendezvous_fuzz_replay: no corpus in %s\n",
                   d.c_str());
      return 2;
    }
    corpus.insert(corpus.end(), files.begin(), files.end());
  }
  for (const auto& input : corpus) Run(input);
  std::mt19937_64 rng(seed);
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(seconds));
  uint64_t runs = corpus.size();
  while (std::chrono::steady_clock::now() < deadline) {
    Run(Mutate(corpus[rng() % corpus.size()], corpus, rng));
    ++runs;
  }
  std::printf(
      "rendezvous_fuzz_replay: %llu inputs (%zu corpus), seed %llu, "
      "no invariant violated\n",
      static_cast<unsigned long long>(runs), corpus.size(),
      static_cast<unsigned long long>(seed));
  return 0;
}
