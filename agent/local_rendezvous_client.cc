#include "agent/local_rendezvous_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ddprun::agent {

StatusOr<int> FindFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  struct sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    return UnavailableError(std::string("cannot bind a free port: ") +
                            std::strerror(err));
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

LocalRendezvousClient::LocalRendezvousClient(Options options)
    : options_(std::move(options)) {}

StatusOr<RendezvousResult> LocalRendezvousClient::Join(
    const JoinRequest& request, Clock::TimePoint deadline) {
  max_restarts_ = request.max_restarts;
  RendezvousResult result;
  result.round = next_round_++;
  result.group_rank = 0;
  result.group_world_size = 1;
  result.rank_offset = 0;
  result.world_size = request.local_world_size;
  result.role_rank_offset = 0;
  result.role_world_size = request.local_world_size;
  result.master_addr = options_.master_addr;
  if (options_.master_port.has_value()) {
    result.master_port = *options_.master_port;
  } else {
    DDP_ASSIGN_OR_RETURN(result.master_port, FindFreePort());
  }
  result.restart_count = restarts_used_;
  return result;
}

StatusOr<bool> LocalRendezvousClient::ReportFailure(int64_t round,
                                                    const std::string& reason,
                                                    bool retry) {
  if (!retry || restarts_used_ >= max_restarts_) return false;
  ++restarts_used_;
  return true;
}

Status LocalRendezvousClient::ReportSuccess(int64_t round,
                                            Clock::Duration barrier_timeout) {
  return Status::Ok();
}

}  // namespace ddprun::agent
