#include "agent/hosting/store_session.h"

#include <utility>
#include <vector>

namespace ddprun::agent {

StoreSession::StoreSession(KeyStore::WaiterId id, const Options* options)
    : id_(id),
      options_(options),
      max_reply_(options->max_reply_bytes != 0
                     ? options->max_reply_bytes
                     : options->wire.max_value_bytes + 64),
      decoder_(options->wire) {}

bool StoreSession::WantsInput() {
  return replies_.size() <= options_->reply_high_water &&
         !decoder_.HasWholeQuery();
}

void StoreSession::WaitDone() {
  wait_deadline_ = TimePoint::max();
  replies_.PutU8(0);  // STOP_WAITING
}

StatusOr<StoreSession::Progress> StoreSession::Run(KeyStore* store,
                                                   TimePoint now) {
  const size_t before = decoder_.buffered();
  for (size_t queries = 0;; ++queries) {
    if (replies_.size() > options_->reply_high_water) {
      return Progress::kReplyFull;
    }
    if (queries >= options_->max_queries_per_run ||
        before - decoder_.buffered() >= options_->max_input_per_run) {
      return Progress::kMore;
    }
    StoreRequest request;
    DDP_ASSIGN_OR_RETURN(const bool got, decoder_.Next(&request));
    if (!got) return Progress::kNeedInput;
    Status s;
    if (options_->on_query) {
      StoreRequest seen = request;  // Execute moves values out
      s = Execute(request, store, now);
      options_->on_query(seen, s);
    } else {
      s = Execute(request, store, now);
    }
    if (!s.ok()) return s;
    identified_ = true;
  }
}

Status StoreSession::Execute(StoreRequest& r, KeyStore* store, TimePoint now) {
  switch (r.op) {
    case StoreOp::kValidate:
      if (r.u32 != kStoreValidateMagic) {
        return InvalidArgumentError("VALIDATE with a wrong magic number");
      }
      return Status::Ok();
    case StoreOp::kPing:
      replies_.PutU32(r.u32);
      return Status::Ok();
    case StoreOp::kSet:
      return store->Set(r.keys[0], std::move(r.values[0]));
    case StoreOp::kAppend:
      return store->Append(r.keys[0], r.values[0]);
    case StoreOp::kCompareSet: {
      DDP_ASSIGN_OR_RETURN(
          KeyStore::Value v,
          store->CompareSet(r.keys[0], r.values[0], std::move(r.values[1])));
      replies_.PutBytes(std::move(v));
      return Status::Ok();
    }
    case StoreOp::kGet: {
      KeyStore::Value v = store->Get(r.keys[0]);
      if (!v) {
        return NotFoundError("GET of a missing key " +
                             QuoteStoreKey(r.keys[0]));
      }
      replies_.PutBytes(std::move(v));
      return Status::Ok();
    }
    case StoreOp::kAdd: {
      DDP_ASSIGN_OR_RETURN(const int64_t sum, store->Add(r.keys[0], r.delta));
      replies_.PutI64(sum);
      return Status::Ok();
    }
    case StoreOp::kCheck: {
      bool ready = true;
      for (const std::string& k : r.keys) ready = ready && store->Contains(k);
      replies_.PutU8(ready ? 0 : 1);  // READY, NOT_READY
      return Status::Ok();
    }
    case StoreOp::kWait:
      if (store->Wait(id_, r.keys)) {
        wait_deadline_ = TimePoint::max();
        replies_.PutU8(0);  // STOP_WAITING
      } else {
        wait_deadline_ = now + options_->max_wait;
      }
      return Status::Ok();
    case StoreOp::kNumKeys:
      replies_.PutI64(static_cast<int64_t>(store->num_keys()));
      return Status::Ok();
    case StoreOp::kDelete:
      replies_.PutI64(store->Delete(r.keys[0]) ? 1 : 0);
      return Status::Ok();
    case StoreOp::kMultiGet:
      return MultiGet(r, store);
    case StoreOp::kMultiSet:
      return store->MultiSet(std::move(r.keys), std::move(r.values));
    case StoreOp::kCancelWait:
      store->CancelWait(id_);
      wait_deadline_ = TimePoint::max();
      replies_.PutU8(1);  // WAIT_CANCELED
      return Status::Ok();
    case StoreOp::kWatchKey:
      break;  // the decoder refuses it
  }
  return InvalidArgumentError(std::string(StoreOpName(r.op)) +
                              " is not served");
}

Status StoreSession::MultiGet(const StoreRequest& r, KeyStore* store) {
  // The whole reply is sized before any of it is queued: one query may not
  // make the connection owe more than max_reply_ (the same 1 MiB value
  // asked for a million times is a terabyte).
  std::vector<KeyStore::Value> values;
  values.reserve(r.keys.size());
  size_t bytes = 0;
  for (const std::string& k : r.keys) {
    KeyStore::Value v = store->Get(k);
    if (!v)
      return NotFoundError("MULTI_GET of a missing key " + QuoteStoreKey(k));
    bytes += 8 + v->size();
    if (bytes > max_reply_) {
      return ResourceExhaustedError(
          "a MULTI_GET of " + std::to_string(r.keys.size()) +
          " keys whose reply exceeds " + std::to_string(max_reply_) +
          " bytes (the limit of one reply)");
    }
    values.push_back(std::move(v));
  }
  for (KeyStore::Value& v : values) replies_.PutBytes(std::move(v));
  return Status::Ok();
}

}  // namespace ddprun::agent
