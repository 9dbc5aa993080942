#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// torch's c10d TCPStore wire format, as the agent store reads it and its
// client writes it: no sockets, no key store (store_session.h runs what
// this decodes against a KeyStore; agent_store.h owns the sockets;
// store_client.h sends what AppendLegacyQuery encodes).
//
// Two dialects, told apart by a connection's first query:
// - torch >= 2.2 ("modern"): the connection opens with VALIDATE (type 0)
//   and the magic 0x3C85F7CE; types VALIDATE, SET, COMPARE_SET, GET, ADD,
//   CHECK, WAIT, GETNUMKEYS, DELETE_KEY, APPEND, MULTI_GET, MULTI_SET,
//   CANCEL_WAIT, PING = 0..13;
// - torch 1.13 / 2.0 ("legacy"): no handshake; SET, COMPARE_SET, GET, ADD,
//   CHECK, WAIT, GETNUMKEYS, WATCH_KEY, DELETE_KEY, APPEND, MULTI_GET,
//   MULTI_SET, CANCEL_WAIT = 0..12.
// Framing (both): one type byte, then its arguments; strings and byte
// vectors are a little-endian uint64 length and the bytes; counts are
// uint64, ADD's delta int64, PING's nonce and VALIDATE's magic uint32.

constexpr uint32_t kStoreValidateMagic = 0x3C85F7CE;

// A little-endian uint64 of the wire (a length, a count, ADD's int64) at
// `bytes`, which holds at least 8.
uint64_t StoreWireU64(const char* bytes);

// A key as torch's TCPStore client sends it: its keyPrefix_ "/" goes before
// every key (1.13 through 2.x), so a worker's "/ddprun/generation" is
// "//ddprun/generation" in the store. The agent names the workers' keys
// so whether it serves their store (worker_store_host.h) or reaches it
// over TCP (store_client.h): it sees what the workers see.
std::string TorchClientKey(const std::string& key);

// What a connection on the agent store's port opens with.
enum class FirstBytes {
  kNeedMore,  // a prefix of HTTP/2's client preface ("P", "PR", "PRI")
  kHttp2,     // "PRI ": gRPC, for the rendezvous server
  kStore,     // anything else that is not below: a TCPStore client
  kTls,       // a TLS handshake record (0x16)
  kUnknown,   // starts like the preface, then is not it
};

// Classifies the first `n` (> 0) bytes of a connection; the caller peeks
// them, so that an HTTP/2 connection is handed over unread. Deciding needs
// at most 4 bytes; the answer for a prefix is kNeedMore or final, so bytes
// split at any point give the same answer once they are all there.
FirstBytes SniffFirstBytes(const char* data, size_t n);

// The queries, whichever dialect numbered them.
enum class StoreOp {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kNumKeys,
  kWatchKey,
  kDelete,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
};
const char* StoreOpName(StoreOp op);

// A key as the store's log lines and errors show it: quoted, whole when
// short, else its start and its length (DDP_LOG escapes control
// characters).
std::string QuoteStoreKey(const std::string& key);

enum class StoreDialect { kUnknown, kLegacy, kModern };

// One decoded query. Which fields are set depends on `op`:
// SET, APPEND: keys[0], values[0]; COMPARE_SET: keys[0], values[0] (the
// expected value), values[1] (the desired one); GET, DELETE_KEY: keys[0];
// ADD: keys[0], delta; CHECK, WAIT, MULTI_GET: keys; MULTI_SET: keys and
// values pairwise; VALIDATE: u32 (the magic); PING: u32 (the nonce).
struct StoreRequest {
  StoreOp op = StoreOp::kNumKeys;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  int64_t delta = 0;
  uint32_t u32 = 0;
};

struct StoreWireLimits {
  size_t max_key_bytes = size_t{1} << 20;
  size_t max_value_bytes = size_t{256} << 20;
  // Keys in a CHECK, WAIT or MULTI_GET, pairs in a MULTI_SET.
  uint64_t max_count = uint64_t{1} << 20;
  // One whole query, type byte and every field; 0: max_value_bytes +
  // max_key_bytes + 64 (a SET of the largest value).
  size_t max_message_bytes = 0;
};

// Reads a connection's queries from its bytes, delivered in pieces split
// anywhere. Linear: each byte is scanned once when it arrives (a query's
// length fields are checked against the limits as soon as they are in, so
// an oversized query is refused before its bytes come) and copied once into
// its StoreRequest when the whole query is there; consumed bytes are
// dropped in one move, not per query. Memory: the bytes of at most one
// query that is not whole yet, plus what the caller appended after it; a
// decoded request is at most about 4x its query's bytes (a string header
// per key).
//
// Errors (INVALID_ARGUMENT, with a reason for the log line): an unknown
// type, WATCH_KEY, torch 2.1's per-query magic, a key, value, count or
// query over the limits. After an error the connection is to be closed;
// the decoder stays in error.
//
// Threading: not thread-safe (one connection's, used by one thread).
class StoreDecoder {
 public:
  explicit StoreDecoder(StoreWireLimits limits);

  void Append(const char* data, size_t n);

  // The next whole query into *request: true; false when more bytes are
  // needed first.
  StatusOr<bool> Next(StoreRequest* request);

  StoreDialect dialect() const { return dialect_; }
  // Bytes held: the unconsumed rest of what was appended.
  size_t buffered() const { return buf_.size() - start_; }
  // True when a whole query waits in the buffer (Next would not need
  // more bytes) or an error is pending.
  bool HasWholeQuery();
  const StoreWireLimits& limits() const { return limits_; }

 private:
  enum class Field : uint8_t { kU32, kI64, kKey, kValue, kCount };
  struct Shape {
    Field head[3];
    int num_head;
    Field group[2];  // repeated `count` times (the last head field)
    int num_group;
  };
  static const Shape* ShapeOf(StoreOp op);
  // Reads the dialect and the type byte if not yet done, then scans on
  // from where the last call stopped; *whole when the current query is.
  Status Advance(bool* whole);
  StatusOr<bool> Scan();
  Status DetectDialect(bool* ready);
  void Decode(StoreRequest* request) const;
  size_t Available() const { return buf_.size() - start_; }
  uint64_t ReadU64(size_t at) const;  // at: offset in the current query

  const StoreWireLimits limits_;
  const size_t max_message_;
  std::string buf_;
  size_t start_ = 0;  // where the current query begins in buf_
  StoreDialect dialect_ = StoreDialect::kUnknown;
  Status error_;
  // The current query's scan: its op and shape once the type byte is read,
  // bytes of it scanned whole, which field is next, repetitions left.
  bool have_op_ = false;
  StoreOp op_ = StoreOp::kNumKeys;
  const Shape* shape_ = nullptr;
  size_t scanned_ = 0;
  int field_ = 0;  // < num_head: in the head; else (field_ - num_head)
  uint64_t reps_left_ = 0;
};

// The client's side (store_client.h): appends `request` to *out as torch
// 1.13's client sends it, in the legacy dialect (no VALIDATE first), which
// AgentStore and torch 1.13's server read. Its fields as StoreRequest says
// for its op. INVALID_ARGUMENT, with nothing appended, for an op the legacy
// dialect lacks (VALIDATE, PING), for WATCH_KEY (AgentStore refuses it)
// and for fields missing for the op.
Status AppendLegacyQuery(const StoreRequest& request, std::string* out);

}  // namespace ddprun::agent
