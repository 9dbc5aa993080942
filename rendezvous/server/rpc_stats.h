#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace grpc::experimental {
class ServerInterceptorFactoryInterface;
}

namespace ddprun::rendezvous {

// Counts and latencies of the rendezvous server's rpcs, per method and
// status code, for Prometheus (`ddprun-rendezvous --http_port`, /metrics).
// A latency runs from the request's metadata to the status sent: a Join
// parks until its round completes, so its latency is the rendezvous wait.
//
// Threading: Record() is lock-free (gRPC's threads call it once per rpc);
// Get() may run concurrently and sees each counter at some recent value.
class RpcStats {
 public:
  // The service's rpcs in proto order; anything else is "other".
  static constexpr std::array<const char*, 10> kMethods = {
      "Join",   "Heartbeat", "ReportFailure", "ReplaceRank", "ReportSuccess",
      "Leave",  "Close",     "Status",        "Stacks",      "other"};
  // Histogram bucket upper bounds, seconds (Prometheus `le`); +Inf implied.
  static constexpr std::array<double, 16> kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
      0.25,   0.5,   1,      2.5,   5,    10,    60,   600};
  static constexpr int kCodes = 17;  // grpc::StatusCode 0..16

  // `method` is gRPC's full name ("/ddprun.rendezvous.v1.Rendezvous/Join")
  // or the short one; `code` a grpc::StatusCode.
  void Record(const std::string& method, int code,
              std::chrono::steady_clock::duration latency);

  struct Method {
    std::string name;
    std::array<uint64_t, kCodes> calls{};        // by status code
    std::array<uint64_t, kBuckets.size()> le{};  // cumulative, per bucket
    uint64_t count = 0;
    double sum_seconds = 0;
  };
  // Every method that saw a call, in kMethods order.
  std::vector<Method> Get() const;

  // grpc's name of a status code ("OK", "RESOURCE_EXHAUSTED", ...).
  static const char* CodeName(int code);
  // The index in kMethods of `method` (full or short name).
  static size_t MethodIndex(const std::string& method);

  // An interceptor factory for grpc::ServerBuilder that records every rpc
  // into `stats` (which must outlive the server).
  static std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  InterceptorFactory(RpcStats* stats);

 private:
  struct Counters {
    std::array<std::atomic<uint64_t>, kCodes> calls{};
    std::array<std::atomic<uint64_t>, kBuckets.size()> buckets{};  // not
                                                                   // cumulative
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> sum_ns{0};
  };
  std::array<Counters, kMethods.size()> methods_;
};

}  // namespace ddprun::rendezvous
