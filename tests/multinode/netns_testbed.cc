#include "tests/multinode/netns_testbed.h"

#include <unistd.h>

#include <cstdlib>

namespace ddprun::multinode {
namespace {

int Sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

}  // namespace

NetnsTestbed::NetnsTestbed(const std::string& prefix, int subnet)
    : subnet_(subnet) {
  const std::string p = prefix + std::to_string(::getpid());
  sw_ = p + "sw";
  hosts_ = {p + "srv", p + "a", p + "b"};
  const std::string ip = kIpTool;
  ok_ = Sh(ip + " netns add " + sw_) == 0 &&
        Run(sw_, "link add br0 type bridge") && Run(sw_, "link set br0 up");
  for (size_t i = 0; ok_ && i < hosts_.size(); ++i) {
    const std::string h = hosts_[i], port = "p" + std::to_string(i);
    ok_ = Sh(ip + " netns add " + h) == 0 &&
          Sh(ip + " link add eth0 netns " + h + " type veth peer name " + port +
             " netns " + sw_) == 0 &&
          Run(sw_, "link set " + port + " master br0") &&
          Run(sw_, "link set " + port + " up") &&
          Run(h, "addr add " + Addr(i) + "/24 dev eth0") &&
          Run(h, "link set eth0 up") && Run(h, "link set lo up");
  }
}

NetnsTestbed::~NetnsTestbed() {
  for (const auto& h : hosts_) Sh(std::string(kIpTool) + " netns del " + h);
  Sh(std::string(kIpTool) + " netns del " + sw_);
}

std::string NetnsTestbed::Addr(size_t i) const {
  return "10.231." + std::to_string(subnet_) + "." + std::to_string(i + 1);
}

bool NetnsTestbed::Run(const std::string& ns, const std::string& args) const {
  return Sh(std::string(kIpTool) + " -n " + ns + " " + args) == 0;
}

std::vector<std::string> NetnsTestbed::Exec(size_t i) const {
  return {kIpTool, "netns", "exec", hosts_[i]};
}

}  // namespace ddprun::multinode
