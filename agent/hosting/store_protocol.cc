#include "agent/hosting/store_protocol.h"

#include <algorithm>
#include <cstring>

namespace ddprun::agent {
namespace {

// Past this, a fully consumed buffer gives its memory back (one large SET
// would otherwise keep its capacity for the connection's life).
constexpr size_t kKeepCapacity = size_t{4} << 20;

// Legacy query types: the index is the type byte.
constexpr StoreOp kLegacyOps[] = {
    StoreOp::kSet,       StoreOp::kCompareSet, StoreOp::kGet,
    StoreOp::kAdd,       StoreOp::kCheck,      StoreOp::kWait,
    StoreOp::kNumKeys,   StoreOp::kWatchKey,   StoreOp::kDelete,
    StoreOp::kAppend,    StoreOp::kMultiGet,   StoreOp::kMultiSet,
    StoreOp::kCancelWait};
constexpr size_t kNumLegacyOps = sizeof(kLegacyOps) / sizeof(kLegacyOps[0]);

bool LegacyOp(uint8_t t, StoreOp* op) {
  if (t >= kNumLegacyOps) return false;
  *op = kLegacyOps[t];
  return true;
}

void PutU64(uint64_t v, std::string* out) {
  for (size_t i = 0; i < 8; ++i) {
    out->push_back(static_cast<char>(v >> (8 * i)));
  }
}

void PutBytes(const std::string& s, std::string* out) {
  PutU64(s.size(), out);
  out->append(s);
}

bool ModernOp(uint8_t t, StoreOp* op) {
  static const StoreOp kOps[] = {
      StoreOp::kValidate,   StoreOp::kSet,      StoreOp::kCompareSet,
      StoreOp::kGet,        StoreOp::kAdd,      StoreOp::kCheck,
      StoreOp::kWait,       StoreOp::kNumKeys,  StoreOp::kDelete,
      StoreOp::kAppend,     StoreOp::kMultiGet, StoreOp::kMultiSet,
      StoreOp::kCancelWait, StoreOp::kPing};
  if (t >= sizeof(kOps) / sizeof(kOps[0])) return false;
  *op = kOps[t];
  return true;
}

std::string OverLimit(const char* what, uint64_t n, uint64_t limit,
                      const char* unit) {
  return std::string(what) + " of " + std::to_string(n) + unit + " (limit " +
         std::to_string(limit) + ")";
}

}  // namespace

uint64_t StoreWireU64(const char* bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) {
    v |= uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  return v;
}

std::string TorchClientKey(const std::string& key) { return "/" + key; }

Status AppendLegacyQuery(const StoreRequest& r, std::string* out) {
  size_t type = 0;
  while (type < kNumLegacyOps && kLegacyOps[type] != r.op) ++type;
  if (type == kNumLegacyOps || r.op == StoreOp::kWatchKey) {
    return InvalidArgumentError(std::string(StoreOpName(r.op)) +
                                " is not sent in torch 1.13's dialect");
  }
  size_t keys = 0;
  size_t values = 0;
  switch (r.op) {
    case StoreOp::kSet:
    case StoreOp::kAppend:
      keys = values = 1;
      break;
    case StoreOp::kCompareSet:
      keys = 1;
      values = 2;
      break;
    case StoreOp::kGet:
    case StoreOp::kAdd:
    case StoreOp::kDelete:
      keys = 1;
      break;
    case StoreOp::kMultiSet:
      values = r.keys.size();
      break;
    default:  // CHECK, WAIT, MULTI_GET: any number of keys; the rest none
      break;
  }
  if (r.keys.size() < keys || r.values.size() < values) {
    return InvalidArgumentError(std::string("a ") + StoreOpName(r.op) +
                                " query without its keys or values");
  }
  out->push_back(static_cast<char>(type));
  switch (r.op) {
    case StoreOp::kSet:
    case StoreOp::kAppend:
    case StoreOp::kCompareSet:
      PutBytes(r.keys[0], out);
      for (size_t i = 0; i < values; ++i) PutBytes(r.values[i], out);
      break;
    case StoreOp::kGet:
    case StoreOp::kDelete:
      PutBytes(r.keys[0], out);
      break;
    case StoreOp::kAdd:
      PutBytes(r.keys[0], out);
      PutU64(static_cast<uint64_t>(r.delta), out);
      break;
    case StoreOp::kCheck:
    case StoreOp::kWait:
    case StoreOp::kMultiGet:
      PutU64(r.keys.size(), out);
      for (const std::string& k : r.keys) PutBytes(k, out);
      break;
    case StoreOp::kMultiSet:
      PutU64(r.keys.size(), out);
      for (size_t i = 0; i < r.keys.size(); ++i) {
        PutBytes(r.keys[i], out);
        PutBytes(r.values[i], out);
      }
      break;
    default:  // GETNUMKEYS, CANCEL_WAIT: the type alone
      break;
  }
  return Status::Ok();
}

FirstBytes SniffFirstBytes(const char* data, size_t n) {
  static const char kPreface[] = "PRI ";
  if (n == 0) return FirstBytes::kNeedMore;
  if (data[0] == 'P') {
    const size_t m = std::min<size_t>(n, 4);
    if (std::memcmp(data, kPreface, m) != 0) return FirstBytes::kUnknown;
    return m < 4 ? FirstBytes::kNeedMore : FirstBytes::kHttp2;
  }
  if (data[0] == 0x16) return FirstBytes::kTls;
  return FirstBytes::kStore;
}

const char* StoreOpName(StoreOp op) {
  switch (op) {
    case StoreOp::kValidate:
      return "VALIDATE";
    case StoreOp::kSet:
      return "SET";
    case StoreOp::kCompareSet:
      return "COMPARE_SET";
    case StoreOp::kGet:
      return "GET";
    case StoreOp::kAdd:
      return "ADD";
    case StoreOp::kCheck:
      return "CHECK";
    case StoreOp::kWait:
      return "WAIT";
    case StoreOp::kNumKeys:
      return "GETNUMKEYS";
    case StoreOp::kWatchKey:
      return "WATCH_KEY";
    case StoreOp::kDelete:
      return "DELETE_KEY";
    case StoreOp::kAppend:
      return "APPEND";
    case StoreOp::kMultiGet:
      return "MULTI_GET";
    case StoreOp::kMultiSet:
      return "MULTI_SET";
    case StoreOp::kCancelWait:
      return "CANCEL_WAIT";
    case StoreOp::kPing:
      return "PING";
  }
  return "?";
}

std::string QuoteStoreKey(const std::string& key) {
  constexpr size_t kShown = 80;
  if (key.size() <= kShown) return "'" + key + "'";
  return "'" + key.substr(0, kShown) + "...' (" + std::to_string(key.size()) +
         " bytes)";
}

StoreDecoder::StoreDecoder(StoreWireLimits limits)
    : limits_(limits),
      max_message_(limits.max_message_bytes != 0
                       ? limits.max_message_bytes
                       : limits.max_value_bytes + limits.max_key_bytes + 64) {}

void StoreDecoder::Append(const char* data, size_t n) {
  // Drop consumed queries once they are at least half the buffer: each
  // byte moves at most once more than it is appended (linear overall).
  if (start_ > 0 && start_ >= buf_.size() - start_) {
    buf_.erase(0, start_);
    start_ = 0;
  }
  buf_.append(data, n);
}

uint64_t StoreDecoder::ReadU64(size_t at) const {
  return StoreWireU64(&buf_[start_ + at]);
}

Status StoreDecoder::DetectDialect(bool* ready) {
  *ready = false;
  if (Available() < 1) return Status::Ok();
  const uint8_t type = static_cast<uint8_t>(buf_[start_]);
  if (type == (kStoreValidateMagic & 0xff)) {
    // torch 2.1 wrote the magic before every query.
    if (Available() < 4) return Status::Ok();
    uint32_t magic = 0;
    for (size_t i = 0; i < 4; ++i) {
      magic |= uint32_t(static_cast<unsigned char>(buf_[start_ + i]))
               << (8 * i);
    }
    if (magic == kStoreValidateMagic) {
      return InvalidArgumentError(
          "torch 2.1's TCPStore dialect (a magic number before every query) "
          "is not served");
    }
    dialect_ = StoreDialect::kLegacy;
  } else if (type == 0) {
    // VALIDATE + magic (torch >= 2.2), or a legacy SET.
    if (Available() < 5) return Status::Ok();
    uint32_t magic = 0;
    for (size_t i = 0; i < 4; ++i) {
      magic |= uint32_t(static_cast<unsigned char>(buf_[start_ + 1 + i]))
               << (8 * i);
    }
    dialect_ = magic == kStoreValidateMagic ? StoreDialect::kModern
                                            : StoreDialect::kLegacy;
  } else {
    dialect_ = StoreDialect::kLegacy;
  }
  *ready = true;
  return Status::Ok();
}

StatusOr<bool> StoreDecoder::Scan() {
  constexpr size_t kMinGroupBytes = 8;  // a key's length at least
  for (;;) {
    Field f;
    if (field_ < shape_->num_head) {
      f = shape_->head[field_];
    } else if (reps_left_ > 0) {
      f = shape_->group[field_ - shape_->num_head];
    } else {
      return true;
    }
    size_t need = 0;
    switch (f) {
      case Field::kU32:
        need = 4;
        break;
      case Field::kI64:
        need = 8;
        break;
      case Field::kCount: {
        if (Available() < scanned_ + 8) return false;
        const uint64_t count = ReadU64(scanned_);
        if (count > limits_.max_count) {
          return InvalidArgumentError(
              OverLimit("a count", count, limits_.max_count, ""));
        }
        const size_t room =
            max_message_ > scanned_ + 8 ? max_message_ - scanned_ - 8 : 0;
        if (count > room / kMinGroupBytes) {
          return InvalidArgumentError("a count of " + std::to_string(count) +
                                      " cannot fit in a query of " +
                                      std::to_string(max_message_) + " bytes");
        }
        reps_left_ = count;
        need = 8;
        break;
      }
      case Field::kKey:
      case Field::kValue: {
        if (Available() < scanned_ + 8) return false;
        const uint64_t n = ReadU64(scanned_);
        const bool key = f == Field::kKey;
        const size_t limit =
            key ? limits_.max_key_bytes : limits_.max_value_bytes;
        if (n > limit) {
          return InvalidArgumentError(
              OverLimit(key ? "a key" : "a value", n, limit, " bytes"));
        }
        need = 8 + static_cast<size_t>(n);
        break;
      }
    }
    if (need > max_message_ - scanned_) {
      return InvalidArgumentError("a " + std::string(StoreOpName(op_)) +
                                  " query of more than " +
                                  std::to_string(max_message_) + " bytes");
    }
    if (Available() < scanned_ + need) return false;
    scanned_ += need;
    ++field_;
    if (shape_->num_group > 0 &&
        field_ == shape_->num_head + shape_->num_group) {
      --reps_left_;
      field_ = shape_->num_head;
    }
  }
}

const StoreDecoder::Shape* StoreDecoder::ShapeOf(StoreOp op) {
  using F = Field;
  static const Shape kNone = {{}, 0, {}, 0};
  static const Shape kU32 = {{F::kU32}, 1, {}, 0};
  static const Shape kKey = {{F::kKey}, 1, {}, 0};
  static const Shape kKeyValue = {{F::kKey, F::kValue}, 2, {}, 0};
  static const Shape kCompareSet = {{F::kKey, F::kValue, F::kValue}, 3, {}, 0};
  static const Shape kAdd = {{F::kKey, F::kI64}, 2, {}, 0};
  static const Shape kKeys = {{F::kCount}, 1, {F::kKey}, 1};
  static const Shape kPairs = {{F::kCount}, 1, {F::kKey, F::kValue}, 2};
  switch (op) {
    case StoreOp::kValidate:
    case StoreOp::kPing:
      return &kU32;
    case StoreOp::kSet:
    case StoreOp::kAppend:
      return &kKeyValue;
    case StoreOp::kCompareSet:
      return &kCompareSet;
    case StoreOp::kGet:
    case StoreOp::kDelete:
    case StoreOp::kWatchKey:
      return &kKey;
    case StoreOp::kAdd:
      return &kAdd;
    case StoreOp::kCheck:
    case StoreOp::kWait:
    case StoreOp::kMultiGet:
      return &kKeys;
    case StoreOp::kMultiSet:
      return &kPairs;
    case StoreOp::kNumKeys:
    case StoreOp::kCancelWait:
      return &kNone;
  }
  return &kNone;
}

Status StoreDecoder::Advance(bool* whole) {
  *whole = false;
  if (!error_.ok()) return error_;
  if (!have_op_) {
    if (dialect_ == StoreDialect::kUnknown) {
      bool ready = false;
      DDP_RETURN_IF_ERROR(DetectDialect(&ready));
      if (!ready) return Status::Ok();
    }
    if (Available() < 1) return Status::Ok();
    const uint8_t type = static_cast<uint8_t>(buf_[start_]);
    const bool modern = dialect_ == StoreDialect::kModern;
    if (!(modern ? ModernOp(type, &op_) : LegacyOp(type, &op_))) {
      return InvalidArgumentError(
          "query type " + std::to_string(type) + " is not served (" +
          (modern ? "torch >= 2.2 dialect" : "torch 1.13 dialect") + ")");
    }
    if (op_ == StoreOp::kWatchKey) {
      return InvalidArgumentError(
          "WATCH_KEY (torch 1.13's watch_key) is not served");
    }
    shape_ = ShapeOf(op_);
    have_op_ = true;
    scanned_ = 1;
    field_ = 0;
    reps_left_ = 0;
  }
  DDP_ASSIGN_OR_RETURN(*whole, Scan());
  return Status::Ok();
}

bool StoreDecoder::HasWholeQuery() {
  bool whole = false;
  Status s = Advance(&whole);
  if (!s.ok()) error_ = s;
  return whole || !error_.ok();
}

StatusOr<bool> StoreDecoder::Next(StoreRequest* request) {
  bool whole = false;
  Status s = Advance(&whole);
  if (!s.ok()) {
    error_ = s;
    return s;
  }
  if (!whole) return false;
  Decode(request);
  start_ += scanned_;
  have_op_ = false;
  if (start_ == buf_.size()) {
    start_ = 0;
    if (buf_.capacity() > kKeepCapacity) {
      std::string().swap(buf_);
    } else {
      buf_.clear();
    }
  }
  return true;
}

void StoreDecoder::Decode(StoreRequest* request) const {
  *request = StoreRequest();
  request->op = op_;
  size_t at = 1;
  auto bytes = [&](std::vector<std::string>* out) {
    const size_t n = static_cast<size_t>(ReadU64(at));
    out->emplace_back(buf_, start_ + at + 8, n);
    at += 8 + n;
  };
  uint64_t count = 0;
  for (int i = 0; i < shape_->num_head; ++i) {
    switch (shape_->head[i]) {
      case Field::kU32:
        for (size_t b = 0; b < 4; ++b) {
          request->u32 |=
              uint32_t(static_cast<unsigned char>(buf_[start_ + at + b]))
              << (8 * b);
        }
        at += 4;
        break;
      case Field::kI64: {
        const uint64_t u = ReadU64(at);
        std::memcpy(&request->delta, &u, sizeof(u));
        at += 8;
        break;
      }
      case Field::kCount:
        count = ReadU64(at);
        at += 8;
        break;
      case Field::kKey:
        bytes(&request->keys);
        break;
      case Field::kValue:
        bytes(&request->values);
        break;
    }
  }
  if (shape_->num_group == 0) return;
  // The whole query is here: `count` is backed by its bytes.
  request->keys.reserve(count);
  if (shape_->num_group == 2) request->values.reserve(count);
  for (uint64_t r = 0; r < count; ++r) {
    bytes(&request->keys);
    if (shape_->num_group == 2) bytes(&request->values);
  }
}

}  // namespace ddprun::agent
