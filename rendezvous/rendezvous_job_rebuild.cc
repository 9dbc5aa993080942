#include "common/logging.h"
#include "rendezvous/rendezvous_job.h"

// RendezvousJob's rebuild after a server restart or a failover to another
// hosting agent: the job adopts the round its nodes report and waits for
// the rest of them. Split from rendezvous_job.cc to keep files small.
namespace ddprun::rendezvous {

void RendezvousJob::AdoptRunningRound(const v1::Assignment& current) {
  round_ = current.round();
  budget_.Adopt(current.restart_count());
  phase_ = Phase::kRunning;
  rebuild_ = Rebuild{current.round(), current.group_world_size(), 0,
                     clock_->Now() + heartbeat_timeout_};
  deadline_moved_ = true;
  reason_ = "rebuilt after a rendezvous server restart";
}

void RendezvousJob::NoteReregistered(std::vector<Outcome>* out) {
  if (!rebuild_ || ++rebuild_->registered < rebuild_->expected) return;
  DDP_LOG(INFO) << "rendezvous '" << id_ << "' rebuilt: all "
                << rebuild_->expected << " nodes of round " << rebuild_->round
                << " re-registered";
  rebuild_.reset();
  deadline_moved_ = true;
  MaybeSucceed(out);  // every node may be in the exit barrier already
}

}  // namespace ddprun::rendezvous
