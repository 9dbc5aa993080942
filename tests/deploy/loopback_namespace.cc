#include "tests/deploy/loopback_namespace.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ddprun::deploy {
namespace {

// The calling thread's own namespace: namespaces are per thread, and the
// thread may not be the process's main one.
int OpenOwnNamespace(const char* kind) {
  const std::string path =
      "/proc/self/task/" + std::to_string(syscall(SYS_gettid)) + "/ns/" + kind;
  return open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

Status BringLoopbackUp() {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket for lo", errno);
  ifreq ifr{};
  strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  int rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags |= IFF_UP;
    rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
  }
  const int err = errno;
  close(fd);
  return rc == 0 ? Status() : ErrnoStatus("bringing lo up", err);
}

// Adds 127.0.0.2/8 to lo (RTM_NEWADDR over rtnetlink). glibc's
// getaddrinfo(AI_ADDRCONFIG) counts IPv4 as configured only when some
// address other than 127.0.0.1 exists, and SLURM resolves every name with
// AI_ADDRCONFIG: without a second address nothing resolves in here.
Status AddSecondLoopbackAddress() {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return ErrnoStatus("rtnetlink socket", errno);
  struct {
    nlmsghdr nh;
    ifaddrmsg ifa;
    char attrs[2 * RTA_SPACE(sizeof(in_addr))];
  } req{};
  req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(ifaddrmsg));
  req.nh.nlmsg_type = RTM_NEWADDR;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK;
  req.ifa.ifa_family = AF_INET;
  req.ifa.ifa_prefixlen = 8;
  req.ifa.ifa_scope = RT_SCOPE_HOST;
  req.ifa.ifa_index = if_nametoindex("lo");
  in_addr addr{};
  inet_pton(AF_INET, "127.0.0.2", &addr);
  for (unsigned short type : {IFA_LOCAL, IFA_ADDRESS}) {
    auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req) +
                                          NLMSG_ALIGN(req.nh.nlmsg_len));
    rta->rta_type = type;
    rta->rta_len = RTA_LENGTH(sizeof(addr));
    memcpy(RTA_DATA(rta), &addr, sizeof(addr));
    req.nh.nlmsg_len = NLMSG_ALIGN(req.nh.nlmsg_len) + RTA_SPACE(sizeof(addr));
  }
  Status result;
  char reply[512];
  if (send(fd, &req, req.nh.nlmsg_len, 0) < 0) {
    result = ErrnoStatus("RTM_NEWADDR 127.0.0.2 on lo", errno);
  } else if (recv(fd, reply, sizeof(reply), 0) <
             static_cast<ssize_t>(NLMSG_LENGTH(sizeof(nlmsgerr)))) {
    result = ErrnoStatus("RTM_NEWADDR reply", errno);
  } else {
    const auto* nh = reinterpret_cast<const nlmsghdr*>(reply);
    const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(nh));
    if (nh->nlmsg_type == NLMSG_ERROR && err->error != 0) {
      result = ErrnoStatus("adding 127.0.0.2 to lo", -err->error);
    }
  }
  close(fd);
  return result;
}

}  // namespace

StatusOr<std::unique_ptr<LoopbackNamespace>> LoopbackNamespace::Enter(
    const std::string& hostname) {
  const int old_net = OpenOwnNamespace("net");
  const int old_uts = OpenOwnNamespace("uts");
  if (old_net < 0 || old_uts < 0) {
    const int err = errno;
    if (old_net >= 0) close(old_net);
    if (old_uts >= 0) close(old_uts);
    return ErrnoStatus("opening this thread's namespaces", err);
  }
  // Owns the fds from here: a failure below restores and closes them.
  std::unique_ptr<LoopbackNamespace> ns(
      new LoopbackNamespace(old_net, old_uts));
  if (unshare(CLONE_NEWNET | CLONE_NEWUTS) != 0) {
    const int err = errno;
    if (err == EPERM) {
      return PermissionDeniedError(
          "unshare(CLONE_NEWNET|CLONE_NEWUTS): not permitted (needs "
          "CAP_SYS_ADMIN)");
    }
    return ErrnoStatus("unshare(CLONE_NEWNET|CLONE_NEWUTS)", err);
  }
  if (sethostname(hostname.data(), hostname.size()) != 0) {
    return ErrnoStatus("sethostname " + hostname, errno);
  }
  DDP_RETURN_IF_ERROR(BringLoopbackUp());
  DDP_RETURN_IF_ERROR(AddSecondLoopbackAddress());
  return ns;
}

LoopbackNamespace::~LoopbackNamespace() { Restore(); }

void LoopbackNamespace::Restore() {
  // Cannot fail for namespaces this thread was in, short of a kernel bug;
  // nothing useful to do in a destructor if it does.
  (void)setns(old_net_, CLONE_NEWNET);
  (void)setns(old_uts_, CLONE_NEWUTS);
  close(old_net_);
  close(old_uts_);
}

}  // namespace ddprun::deploy
