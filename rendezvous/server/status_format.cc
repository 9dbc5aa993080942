#include "rendezvous/server/status_format.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include <google/protobuf/util/json_util.h>

#include "common/logging.h"

namespace ddprun::rendezvous {
namespace {

std::string Lower(std::string name, const std::string& prefix) {
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  return name;
}

std::string JobState(v1::JobStatus::State s) {
  return Lower(v1::JobStatus::State_Name(s), "STATE_");
}

std::string NodeState(v1::NodeStatus::State s) {
  return Lower(v1::NodeStatus::State_Name(s), "STATE_");
}

}  // namespace

std::string FormatStatusTable(const v1::StatusResponse& status) {
  std::string out;
  char line[512];
  if (status.jobs().empty()) return "no jobs\n";
  for (const v1::JobStatus& job : status.jobs()) {
    snprintf(line, sizeof(line),
             "job %s: %s, round %lld, nnodes %u:%u, restarts %d/%u\n",
             EscapeControlChars(job.rdzv_id()).c_str(),
             JobState(job.state()).c_str(), static_cast<long long>(job.round()),
             job.config().min_nodes(), job.config().max_nodes(),
             job.restart_count(), job.config().max_restarts());
    out += line;
    // Ids and reasons come from the network: escaped, so that they cannot
    // forge table lines or drive the terminal.
    if (!job.reason().empty()) {
      out += "  last event: " + EscapeControlChars(job.reason()) + "\n";
    }
    // Ranks replaced alone (--restart_scope failed) and lost nodes' places
    // kept open, newest 5 events.
    std::vector<std::pair<const char*, const v1::JobEvent*>> replaced;
    for (const v1::JobEvent& e : job.events()) {
      if (e.kind() == v1::JobEvent::KIND_RANK_REPLACED) {
        replaced.emplace_back("replaced: ", &e);
      } else if (e.kind() == v1::JobEvent::KIND_RANK_HEALED) {
        replaced.emplace_back("healed:   ", &e);
      } else if (e.kind() == v1::JobEvent::KIND_PLACE_OPEN) {
        replaced.emplace_back("open:     ", &e);
      }
    }
    const size_t first = replaced.size() > 5 ? replaced.size() - 5 : 0;
    for (size_t i = first; i < replaced.size(); ++i) {
      out += std::string("  ") + replaced[i].first +
             EscapeControlChars(replaced[i].second->reason()) + "\n";
    }
    std::vector<const v1::NodeStatus*> nodes;
    for (const auto& n : job.nodes()) nodes.push_back(&n);
    std::sort(nodes.begin(), nodes.end(), [](auto* a, auto* b) {
      const int ra = a->group_rank() < 0 ? 1 << 30 : a->group_rank();
      const int rb = b->group_rank() < 0 ? 1 << 30 : b->group_rank();
      return ra != rb ? ra < rb : a->node_id() < b->node_id();
    });
    snprintf(line, sizeof(line), "  %-32s %-9s %5s %6s %5s %-20s %9s\n", "NODE",
             "STATE", "GRANK", "RANK0", "NPROC", "ADDR", "HEARTBEAT");
    out += line;
    for (const v1::NodeStatus* n : nodes) {
      const std::string grank =
          n->group_rank() < 0 ? "-" : std::to_string(n->group_rank());
      const std::string rank0 =
          n->rank_offset() < 0 ? "-" : std::to_string(n->rank_offset());
      snprintf(line, sizeof(line), "  %-32s %-9s %5s %6s %5u %-20s %7.1f s\n",
               EscapeControlChars(n->node_id()).c_str(),
               NodeState(n->state()).c_str(), grank.c_str(), rank0.c_str(),
               n->local_world_size(), EscapeControlChars(n->addr()).c_str(),
               n->heartbeat_age_ms() / 1000.0);
      out += line;
      // Step rates of the ranks that count steps (stragglers stand out).
      if (n->rank_rates_size() > 0) {
        std::string rates = "    steps/s:";
        for (const v1::RankRate& r : n->rank_rates()) {
          if (r.steps_per_s() < 0) {
            snprintf(line, sizeof(line), " rank %d -", r.rank());
          } else {
            snprintf(line, sizeof(line), " rank %d %.2f", r.rank(),
                     r.steps_per_s());
          }
          rates += line;
        }
        out += rates + "\n";
      }
    }
  }
  return out;
}

std::string FormatStatusJson(const v1::StatusResponse& status) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(status, &json, options);
  return json;
}

}  // namespace ddprun::rendezvous
