// A minimal agent for process tests: joins through GrpcRendezvousClient,
// prints one line per round and per event on stdout, and re-joins after
// every membership change or restart request, until killed.
//
//   rdzv_test_agent ENDPOINT NODE_ID MIN MAX
//   stdout: "JOINED round=R group_rank=G group_world_size=N"
//           "EVENT <type> <reason>"
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/mutex.h"
#include "tests/rendezvous/sync_client.h"

using ddprun::rendezvous::RendezvousEvent;

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s ENDPOINT NODE_ID MIN MAX\n", argv[0]);
    return 2;
  }
  ddprun::rendezvous::GrpcClientOptions options;
  options.endpoint = argv[1];  // default heartbeat: 1 s, timeout 3 s
  auto client = ddprun::rendezvous::testing::SyncClient::Grpc(options);
  if (!client.ok()) {
    fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  ddprun::Mutex mu;
  ddprun::CondVar cv;
  bool rejoin = false;
  (*client)->SetEventHandler([&](const RendezvousEvent& e) {
    printf("EVENT %d %s\n", static_cast<int>(e.type), e.reason.c_str());
    fflush(stdout);
    ddprun::MutexLock lock(&mu);
    rejoin = true;
    cv.NotifyAll();
  });
  ddprun::rendezvous::JoinRequest request;
  request.run_id = "proc";
  request.node_id = argv[2];
  request.local_addr = "127.0.0.1";
  request.min_nodes = atoi(argv[3]);
  request.max_nodes = atoi(argv[4]);
  while (true) {
    auto r = (*client)->Join(
        request, std::chrono::steady_clock::now() + std::chrono::seconds(60));
    if (!r.ok()) {
      printf("ERROR %s\n", r.status().ToString().c_str());
      return 1;
    }
    printf("JOINED round=%lld group_rank=%d group_world_size=%d\n",
           static_cast<long long>(r->round), r->group_rank,
           r->group_world_size);
    fflush(stdout);
    ddprun::MutexLock lock(&mu);
    while (!rejoin) cv.Wait(&mu);  // "workers run" until an event
    rejoin = false;
  }
}
