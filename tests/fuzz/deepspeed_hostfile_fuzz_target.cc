// libFuzzer target over the `deepspeed` launcher's resource model
// (agent/frontends/deepspeed/deepspeed_hosts.h): the hostfile, the
// --include/--exclude filters over it, and the --world_info string each
// node's launch decodes.
//
// Input: a hostfile. Its comment lines "#include SPEC", "#exclude SPEC"
// and "#world_info B64" (comments to the hostfile parser) also give the
// filter and a world info string to decode.
//
// Invariants (abort() on violation): a parsed hostfile lists each host
// once, a host being one word, with 0..999999 slots; a filtered result
// keeps the hostfile's order and only hosts and slots the hostfile has, each
// host with slots; the world info of a filtered result (ASCII hosts, as
// deepspeed's are) decodes to that result; decoding any string either
// fails or gives hosts with slot lists.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "agent/frontends/deepspeed/deepspeed_hosts.h"
#include "fuzz_check.h"

namespace ddprun::agent {
namespace {

using fuzz::Check;

// The value of the comment line "#<key> VALUE" in `text`, "" without one.
std::string Directive(const std::string& text, const std::string& key) {
  const std::string tag = "#" + key + " ";
  size_t at = text.rfind(tag);
  if (at == std::string::npos || (at > 0 && text[at - 1] != '\n')) return "";
  at += tag.size();
  return text.substr(at, text.find('\n', at) - at);
}

bool Ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x80;
  });
}

}  // namespace
}  // namespace ddprun::agent

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddprun::agent;
  using ddprun::StatusOr;
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (StatusOr<ActiveResources> decoded =
          DecodeWorldInfo(Directive(text, "world_info"));
      decoded.ok()) {
    Check(!decoded->empty(), "decoded world info without hosts");
    for (const auto& [host, slots] : *decoded) {
      Check(!slots.empty(), "a decoded host without slots");
    }
  }
  StatusOr<ResourcePool> pool = ParseHostfile("hostfile", text);
  if (!pool.ok()) return 0;
  Check(!pool->empty(), "a hostfile without hosts");
  for (size_t i = 0; i < pool->size(); ++i) {
    const auto& [host, count] = (*pool)[i];
    Check(!host.empty() && host.find_first_of(" \t\n\r") == std::string::npos,
          "a host that is not one word");
    Check(count >= 0 && count <= 999999, "a slot count out of range");
    for (size_t j = 0; j < i; ++j) {
      Check((*pool)[j].first != host, "a host listed twice");
    }
  }
  StatusOr<ActiveResources> active = FilterResources(
      *pool, Directive(text, "include"), Directive(text, "exclude"));
  if (!active.ok()) return 0;
  size_t next = 0;  // in the hostfile's order
  for (const auto& [host, slots] : *active) {
    Check(!slots.empty(), "a chosen host without slots");
    while (next < pool->size() && (*pool)[next].first != host) ++next;
    Check(next < pool->size(), "a chosen host out of the hostfile's order");
    for (int slot : slots) {
      Check(slot >= 0 && slot < (*pool)[next].second,
            "a chosen slot the host does not have");
    }
    ++next;
  }
  if (active->empty()) return 0;
  const std::string encoded = EncodeWorldInfo(*active);
  StatusOr<ActiveResources> back = DecodeWorldInfo(encoded);
  Check(back.ok(), "our own world info does not decode");
  bool ascii = true;
  for (const auto& entry : *active) ascii = ascii && Ascii(entry.first);
  if (ascii) Check(*back == *active, "the world info decodes to another set");
  return 0;
}
