#pragma once

// Three hosts (a server and two agents) in network namespaces of their own,
// joined by veth pairs to a bridge in a fourth namespace. The subnet
// 10.231.<subnet>.0/24 exists only inside these namespaces: nothing touches
// the root namespace's interfaces or routes. Needs root and `ip`.

#include <string>
#include <vector>

namespace ddprun::multinode {

inline const char* const kIpTool = "/usr/sbin/ip";

class NetnsTestbed {
 public:
  // `prefix` names the namespaces (with this process's pid appended, so
  // concurrent tests never collide); `subnet` picks 10.231.<subnet>.0/24.
  // Check ok() before use.
  NetnsTestbed(const std::string& prefix, int subnet);
  // Deletes the namespaces (and with them the veth ends and the bridge).
  ~NetnsTestbed();
  NetnsTestbed(const NetnsTestbed&) = delete;
  NetnsTestbed& operator=(const NetnsTestbed&) = delete;

  bool ok() const { return ok_; }
  // Host i: 0 the server, 1 and 2 the agents.
  const std::string& Host(size_t i) const { return hosts_[i]; }
  std::string Addr(size_t i) const;
  // `ip -n <ns> <args>` succeeded (e.g. Run(Host(2), "link set eth0 down")).
  bool Run(const std::string& ns, const std::string& args) const;
  // Command prefix that runs a program on host i.
  std::vector<std::string> Exec(size_t i) const;

 private:
  int subnet_;
  std::string sw_;
  std::vector<std::string> hosts_;
  bool ok_ = false;
};

}  // namespace ddprun::multinode
