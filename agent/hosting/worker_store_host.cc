#include "agent/hosting/worker_store_host.h"

#include <unistd.h>

#include <utility>

#include "agent/hosting/rendezvous_factory.h"
#include "agent/hosting/store_protocol.h"
#include "common/logging.h"

namespace ddprun::agent {

WorkerStoreHost::WorkerStoreHost(RendezvousHost* static_host)
    : static_host_(static_host) {}

WorkerStoreHost::~WorkerStoreHost() = default;

StatusOr<bool> WorkerStoreHost::StartRound(
    const rendezvous::RendezvousResult& round) {
  serving_ = false;
  own_.reset();  // the previous round's workers are gone
  if (round.group_rank != 0) return false;
  if (static_host_ != nullptr) {
    serving_ = true;
    return true;
  }
  AgentStore::Options options;
  // Only TCPStore clients come here: no rendezvous shares this port.
  options.on_http2 = [](int fd) { ::close(fd); };
  auto store = std::make_unique<AgentStore>(std::move(options));
  const std::string host = HostedBindAddress(round.master_addr);
  StatusOr<int> port = store->Start(host, round.master_port);
  if (!port.ok()) {
    return Status(port.status().code(),
                  "--restart_scope failed: serving the workers' store on " +
                      host + ":" + std::to_string(round.master_port) + ": " +
                      port.status().message());
  }
  DDP_LOG(DEBUG) << "the workers' store is served by this agent on " << host
                 << ":" << *port;
  own_ = std::move(store);
  serving_ = true;
  return true;
}

void WorkerStoreHost::Set(const std::string& key, std::string value) {
  if (!serving_) return;
  if (own_ != nullptr) {
    own_->Set(TorchClientKey(key), std::move(value));
  } else if (static_host_ != nullptr) {
    static_host_->SetStoreKey(TorchClientKey(key), std::move(value));
  }
}

std::optional<std::string> WorkerStoreHost::Get(const std::string& key) const {
  if (!serving_) return std::nullopt;
  if (own_ != nullptr) return own_->Get(TorchClientKey(key));
  if (static_host_ != nullptr) {
    return static_host_->GetStoreKey(TorchClientKey(key));
  }
  return std::nullopt;
}

}  // namespace ddprun::agent
