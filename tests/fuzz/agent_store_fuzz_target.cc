// libFuzzer target over the agent store's wire side without sockets
// (agent/hosting/agent_store.h): first-byte sniffing (SniffFirstBytes), both
// TCPStore dialects (StoreDecoder), clients' sessions (StoreSession) and
// the keys (KeyStore), driven as the store's loop drives them: a client's
// bytes wait in a "kernel buffer" until its session wants input, are read
// in chunks of at most kReadChunk, and its queries run within the per-run
// budgets.
//
// Input: records [ctl][len][len bytes]. ctl % 4 picks one of 4 clients;
// (ctl / 4) % 8: 0-4 the client sends the bytes, 5 it reads every reply
// owed, 6 it disconnects (its next bytes open a new connection), 7 the
// store is Reset (every key dropped, every client disconnected). The store
// has small limits (values 256 bytes, 4 KiB in all, 64 keys per query) so
// that every limit is reached.
//
// The script runs twice: once with each record's bytes delivered whole,
// once split at pseudo-random points (from a hash of the input) into
// several deliveries, the store's loop running after each.
//
// Invariants (abort() on violation): no crash or sanitizer error; each
// session's input within one query plus one read, its unsent replies
// within the high-water mark plus one reply; the KeyStore's own accounting
// and wait index consistent (CheckInvariants); the store's contents equal a
// shadow map that applies each query that succeeded (so a refused query
// changed nothing) with torch's semantics; and both runs end alike: the
// same contents, the same bytes received by every client, the same
// connections closed for the same reasons.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/hosting/key_store.h"
#include "agent/hosting/store_protocol.h"
#include "agent/hosting/store_session.h"
#include "common/logging.h"

namespace ddprun::agent {
namespace {

constexpr int kClients = 4;
constexpr size_t kReadChunk = 96;

void Check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "agent_store fuzz invariant violated: %s\n",
               what.c_str());
  std::abort();
}

StoreSession::Options SessionOptions() {
  StoreSession::Options o;
  o.wire.max_key_bytes = 64;
  o.wire.max_value_bytes = 256;
  o.wire.max_count = 64;
  o.reply_high_water = 512;
  o.max_queries_per_run = 8;
  o.max_input_per_run = 128;
  return o;
}

// torch's semantics, plainly: what a query that succeeded did.
void ApplyToShadow(const StoreRequest& r,
                   std::map<std::string, std::string>* m) {
  switch (r.op) {
    case StoreOp::kSet:
      (*m)[r.keys[0]] = r.values[0];
      break;
    case StoreOp::kAppend:
      (*m)[r.keys[0]] += r.values[0];
      break;
    case StoreOp::kCompareSet: {
      auto it = m->find(r.keys[0]);
      if (it == m->end()) {
        if (r.values[0].empty()) (*m)[r.keys[0]] = r.values[1];
      } else if (it->second == r.values[0]) {
        it->second = r.values[1];
      }
      break;
    }
    case StoreOp::kAdd: {
      auto it = m->find(r.keys[0]);
      const int64_t v = it == m->end() ? 0 : std::stoll(it->second);
      (*m)[r.keys[0]] = std::to_string(static_cast<int64_t>(
          static_cast<uint64_t>(v) + static_cast<uint64_t>(r.delta)));
      break;
    }
    case StoreOp::kDelete:
      m->erase(r.keys[0]);
      break;
    case StoreOp::kMultiSet:
      for (size_t i = 0; i < r.keys.size(); ++i) (*m)[r.keys[i]] = r.values[i];
      break;
    default:
      break;  // no change
  }
}

struct Client {
  std::string kernel;  // sent, not yet read by the store
  bool sniffing = true;
  bool closed = false;  // by the store; further bytes are dropped
  std::unique_ptr<StoreSession> session;
  std::string received;  // every reply byte, and a mark per close
};

class Run {
 public:
  Run()
      : store_(KeyStore::Limits{256, 4096}, [this](KeyStore::WaiterId id) {
          clients_[id % kClients].session->WaitDone();
        }) {
    options_ = SessionOptions();
    options_.on_query = [this](const StoreRequest& r, const Status& s) {
      if (s.ok()) ApplyToShadow(r, &shadow_);
    };
  }

  void Send(int i, const char* data, size_t n) {
    Client& c = clients_[i];
    if (c.closed) return;
    c.kernel.append(data, n);
    Serve(i);
  }

  void Read(int i) {
    Client& c = clients_[i];
    if (!c.session) return;
    ReplyQueue* out = c.session->replies();
    while (!out->empty()) {
      iovec iov[8];
      const int n = out->Peek(iov, 8);
      for (int k = 0; k < n; ++k) {
        c.received.append(static_cast<const char*>(iov[k].iov_base),
                          iov[k].iov_len);
        out->Consume(iov[k].iov_len);
      }
    }
    Serve(i);
  }

  void Disconnect(int i) {
    Client& c = clients_[i];
    if (c.session) store_.CancelWait(c.session->id());
    c = Client{std::string(), true, false, nullptr, c.received + "|bye|"};
    ++generation_[i];
  }

  void Reset() {
    store_.Clear();
    shadow_.clear();
    for (int i = 0; i < kClients; ++i) {
      Client& c = clients_[i];
      c = Client{std::string(), true, false, nullptr, c.received + "|reset|"};
      ++generation_[i];
    }
    CheckStore();
  }

  std::string Transcript() const {
    std::string t;
    for (const Client& c : clients_) t += c.received + "\n--\n";
    store_.ForEach([&t](const std::string& k, const std::string& v) {
      t += k + "=" + v + ";";
    });
    return t;
  }

 private:
  // The store's loop for one client, until it waits for the client.
  void Serve(int i) {
    Client& c = clients_[i];
    if (c.closed) return;
    if (c.sniffing) {
      if (c.kernel.empty()) return;
      switch (SniffFirstBytes(c.kernel.data(), c.kernel.size())) {
        case FirstBytes::kNeedMore:
          return;
        case FirstBytes::kStore:
          c.sniffing = false;
          c.session = std::make_unique<StoreSession>(
              i + kClients * generation_[i], &options_);
          break;
        default:  // HTTP/2 (handed off), TLS, neither
          Close(i, "not a store client");
          return;
      }
    }
    StoreSession& s = *c.session;
    const size_t max_message =
        options_.wire.max_value_bytes + options_.wire.max_key_bytes + 64;
    for (;;) {
      while (s.WantsInput() && !c.kernel.empty()) {
        const size_t n = std::min(kReadChunk, c.kernel.size());
        s.Append(c.kernel.data(), n);
        c.kernel.erase(0, n);
        Check(s.buffered_input() <= max_message + kReadChunk,
              "a session holds more input than one query and one read");
      }
      if (s.replies()->size() > options_.reply_high_water) break;
      StatusOr<StoreSession::Progress> p = s.Run(&store_, Now());
      CheckStore();
      Check(s.replies()->size() <=
                options_.reply_high_water + s.max_reply_bytes() + 1,
            "unsent replies over the high-water mark plus one reply");
      if (!p.ok()) {
        Close(i, p.status().message());
        return;
      }
      if (*p == StoreSession::Progress::kReplyFull) break;
      if (*p == StoreSession::Progress::kNeedInput &&
          (c.kernel.empty() || !s.WantsInput())) {
        break;
      }
    }
  }

  void Close(int i, const std::string& reason) {
    Client& c = clients_[i];
    if (c.session) store_.CancelWait(c.session->id());
    c.closed = true;
    c.received += "|closed: " + reason + "|";
    c.kernel.clear();
  }

  void CheckStore() {
    const std::string bad = store_.CheckInvariants();
    Check(bad.empty(), "KeyStore: " + bad);
    std::map<std::string, std::string> contents;
    store_.ForEach([&contents](const std::string& k, const std::string& v) {
      contents[k] = v;
    });
    Check(contents == shadow_, "the store differs from the shadow map");
  }

  static StoreSession::TimePoint Now() { return StoreSession::TimePoint(); }

  StoreSession::Options options_;
  KeyStore store_;
  std::map<std::string, std::string> shadow_;
  Client clients_[kClients];
  uint64_t generation_[kClients] = {};
};

uint64_t Hash(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

std::string Play(const uint8_t* data, size_t size, bool split) {
  Run run;
  uint64_t rng = Hash(data, size) | 1;
  auto next = [&rng] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  size_t at = 0;
  while (at + 2 <= size) {
    const uint8_t ctl = data[at];
    const size_t len = std::min<size_t>(data[at + 1], size - at - 2);
    const char* payload = reinterpret_cast<const char*>(data + at + 2);
    at += 2 + len;
    const int client = ctl % kClients;
    switch ((ctl / kClients) % 8) {
      case 5:
        run.Read(client);
        break;
      case 6:
        run.Disconnect(client);
        break;
      case 7:
        run.Reset();
        break;
      default: {
        size_t sent = 0;
        while (sent < len) {
          size_t piece = len - sent;
          if (split && piece > 1) piece = 1 + next() % piece;
          run.Send(client, payload + sent, piece);
          sent += piece;
        }
        break;
      }
    }
  }
  return run.Transcript();
}

}  // namespace
}  // namespace ddprun::agent

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    ddprun::SetMinLogLevel(ddprun::LogLevel::kError);
    return true;
  }();
  (void)quiet;
  const std::string whole = ddprun::agent::Play(data, size, /*split=*/false);
  const std::string split = ddprun::agent::Play(data, size, /*split=*/true);
  ddprun::agent::Check(whole == split,
                       "delivering the bytes in pieces changed the outcome");
  return 0;
}
