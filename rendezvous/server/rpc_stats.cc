#include "rendezvous/server/rpc_stats.h"

#include <grpcpp/support/server_interceptor.h>

#include <algorithm>

namespace ddprun::rendezvous {

namespace {

using grpc::experimental::InterceptionHookPoints;

// One per rpc (gRPC creates and deletes it): notes when the request's
// metadata arrived and records the call when its status is sent.
class StatsInterceptor : public grpc::experimental::Interceptor {
 public:
  StatsInterceptor(RpcStats* stats, const char* method)
      : stats_(stats), method_(method != nullptr ? method : "") {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      start_ = std::chrono::steady_clock::now();
    }
    if (m->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const auto now = std::chrono::steady_clock::now();
      stats_->Record(method_, m->GetSendStatus().error_code(),
                     start_ == std::chrono::steady_clock::time_point{}
                         ? std::chrono::steady_clock::duration::zero()
                         : now - start_);
    }
    m->Proceed();
  }

 private:
  RpcStats* const stats_;
  const std::string method_;
  std::chrono::steady_clock::time_point start_{};
};

class StatsFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit StatsFactory(RpcStats* stats) : stats_(stats) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new StatsInterceptor(stats_, info->method());
  }

 private:
  RpcStats* const stats_;
};

}  // namespace

size_t RpcStats::MethodIndex(const std::string& method) {
  const size_t slash = method.rfind('/');
  const std::string name =
      slash == std::string::npos ? method : method.substr(slash + 1);
  for (size_t i = 0; i + 1 < kMethods.size(); ++i) {
    if (name == kMethods[i]) return i;
  }
  return kMethods.size() - 1;
}

void RpcStats::Record(const std::string& method, int code,
                      std::chrono::steady_clock::duration latency) {
  Counters& c = methods_[MethodIndex(method)];
  if (code < 0 || code >= kCodes) code = 2;  // UNKNOWN
  c.calls[code].fetch_add(1, std::memory_order_relaxed);
  const double seconds = std::chrono::duration<double>(latency).count();
  for (size_t b = 0; b < kBuckets.size(); ++b) {
    if (seconds <= kBuckets[b]) {
      c.buckets[b].fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  c.sum_ns.fetch_add(
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(latency)
              .count()),
      std::memory_order_relaxed);
  // Last: a reader that sees the count sees its bucket (it reads count
  // first), so the +Inf bucket (count) never falls below a finite one.
  c.count.fetch_add(1, std::memory_order_release);
}

std::vector<RpcStats::Method> RpcStats::Get() const {
  std::vector<Method> out;
  for (size_t i = 0; i < kMethods.size(); ++i) {
    const Counters& c = methods_[i];
    Method m;
    m.count = c.count.load(std::memory_order_acquire);
    if (m.count == 0) continue;
    m.name = kMethods[i];
    for (int k = 0; k < kCodes; ++k) {
      m.calls[k] = c.calls[k].load(std::memory_order_relaxed);
    }
    uint64_t cumulative = 0;
    for (size_t b = 0; b < kBuckets.size(); ++b) {
      cumulative += c.buckets[b].load(std::memory_order_relaxed);
      m.le[b] = cumulative;
    }
    // Calls recorded after `count` was read: no bucket may exceed the
    // +Inf one (count).
    for (auto& le : m.le) le = std::min(le, m.count);
    m.sum_seconds = c.sum_ns.load(std::memory_order_relaxed) / 1e9;
    out.push_back(std::move(m));
  }
  return out;
}

const char* RpcStats::CodeName(int code) {
  static constexpr const char* kNames[kCodes] = {"OK",
                                                 "CANCELLED",
                                                 "UNKNOWN",
                                                 "INVALID_ARGUMENT",
                                                 "DEADLINE_EXCEEDED",
                                                 "NOT_FOUND",
                                                 "ALREADY_EXISTS",
                                                 "PERMISSION_DENIED",
                                                 "RESOURCE_EXHAUSTED",
                                                 "FAILED_PRECONDITION",
                                                 "ABORTED",
                                                 "OUT_OF_RANGE",
                                                 "UNIMPLEMENTED",
                                                 "INTERNAL",
                                                 "UNAVAILABLE",
                                                 "DATA_LOSS",
                                                 "UNAUTHENTICATED"};
  return code >= 0 && code < kCodes ? kNames[code] : "UNKNOWN";
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcStats::InterceptorFactory(RpcStats* stats) {
  return std::make_unique<StatsFactory>(stats);
}

}  // namespace ddprun::rendezvous
