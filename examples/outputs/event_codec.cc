#include "examples/outputs/event_codec.h"

#include <cstring>

namespace ddprun::examples::outputs {
namespace {

enum WireType { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutKey(int field, WireType type, std::string* out) {
  PutVarint((static_cast<uint64_t>(field) << 3) | type, out);
}

template <typename T>
void PutFixed(int field, WireType type, T value, std::string* out) {
  PutKey(field, type, out);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only (x86,
  out->append(bytes, sizeof(T));          // arm64), as protobuf's wire is
}

void PutInt(int field, int64_t value, std::string* out) {
  PutKey(field, kVarint, out);
  PutVarint(static_cast<uint64_t>(value), out);
}

void PutBytes(int field, const std::string& bytes, std::string* out) {
  PutKey(field, kBytes, out);
  PutVarint(bytes.size(), out);
  out->append(bytes);
}

std::string EncodeValue(const EventValue& v) {
  std::string out;
  PutBytes(1, v.tag, &out);
  if (v.is_image) {
    std::string image;
    PutInt(1, v.image.height, &image);
    PutInt(2, v.image.width, &image);
    PutInt(3, v.image.colorspace, &image);
    PutBytes(4, v.image.png, &image);
    PutBytes(4, image, &out);
  } else {
    PutFixed(2, kFixed32, v.simple_value, &out);
  }
  return out;
}

// One field of a message: its number, wire type and payload.
struct Field {
  int number = 0;
  int type = 0;
  uint64_t varint = 0;  // kVarint
  std::string bytes;    // kBytes, or the raw little-endian kFixed32/64
};

// Reads fields of one message in order; Next() is false at the end and
// sets *error on a malformed field.
class FieldReader {
 public:
  explicit FieldReader(const std::string& data) : data_(data) {}

  bool Next(Field* f, std::string* error) {
    if (pos_ == data_.size()) return false;
    uint64_t key = 0;
    if (!Varint(&key)) return Fail("truncated field key", error);
    f->number = static_cast<int>(key >> 3);
    f->type = static_cast<int>(key & 7);
    switch (f->type) {
      case kVarint:
        if (!Varint(&f->varint)) return Fail("truncated varint", error);
        return true;
      case kFixed64:
        return Take(8, f, error);
      case kFixed32:
        return Take(4, f, error);
      case kBytes: {
        uint64_t n = 0;
        if (!Varint(&n)) return Fail("truncated length", error);
        return Take(n, f, error);
      }
      default:
        return Fail("unsupported wire type " + std::to_string(f->type), error);
    }
  }

 private:
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool Take(uint64_t n, Field* f, std::string* error) {
    if (n > data_.size() - pos_) return Fail("field runs past the end", error);
    f->bytes.assign(data_, pos_, n);
    pos_ += n;
    return true;
  }
  bool Fail(const std::string& why, std::string* error) {
    *error = why;
    pos_ = data_.size();
    return false;
  }

  const std::string& data_;
  size_t pos_ = 0;
};

template <typename T>
T FixedValue(const Field& f) {
  T v{};
  std::memcpy(&v, f.bytes.data(), sizeof(T));
  return v;
}

// Parses a Summary.Value; only scalars are kept (images are write-only
// here). Returns false with *error for a malformed one.
bool DecodeValue(const std::string& bytes, Event* event, std::string* error) {
  FieldReader r(bytes);
  EventValue v;
  bool scalar = false;
  for (Field f; r.Next(&f, error);) {
    if (f.number == 1 && f.type == kBytes) v.tag = f.bytes;
    if (f.number == 2 && f.type == kFixed32) {
      v.simple_value = FixedValue<float>(f);
      scalar = true;
    }
    if (f.number == 4 && f.type == kBytes) v.is_image = true;
  }
  if (!error->empty()) return false;
  if (scalar) event->values.push_back(v);
  return true;
}

}  // namespace

std::string EncodeEvent(const Event& event) {
  std::string out;
  PutFixed(1, kFixed64, event.wall_time, &out);
  PutInt(2, event.step, &out);
  if (!event.file_version.empty()) PutBytes(3, event.file_version, &out);
  if (!event.values.empty()) {
    std::string summary;
    for (const EventValue& v : event.values) {
      PutBytes(1, EncodeValue(v), &summary);
    }
    PutBytes(5, summary, &out);
  }
  if (event.session_log_status >= 0) {
    std::string log;
    PutInt(1, event.session_log_status, &log);
    PutBytes(7, log, &out);
  }
  return out;
}

StatusOr<Event> DecodeEvent(const std::string& bytes) {
  Event event;
  std::string error;
  FieldReader r(bytes);
  for (Field f; r.Next(&f, &error);) {
    if (f.number == 1 && f.type == kFixed64) {
      event.wall_time = FixedValue<double>(f);
    } else if (f.number == 2 && f.type == kVarint) {
      event.step = static_cast<int64_t>(f.varint);
    } else if (f.number == 3 && f.type == kBytes) {
      event.file_version = f.bytes;
    } else if (f.number == 5 && f.type == kBytes) {
      FieldReader values(f.bytes);
      for (Field v; values.Next(&v, &error);) {
        if (v.number == 1 && v.type == kBytes &&
            !DecodeValue(v.bytes, &event, &error)) {
          break;
        }
      }
    } else if (f.number == 7 && f.type == kBytes) {
      FieldReader log(f.bytes);
      event.session_log_status = 0;
      for (Field s; log.Next(&s, &error);) {
        if (s.number == 1 && s.type == kVarint) {
          event.session_log_status = static_cast<int>(s.varint);
        }
      }
    } else if (f.number <= 7 && f.number != 4 && f.number != 6) {
      error = "field " + std::to_string(f.number) + " has wire type " +
              std::to_string(f.type);
    }
    if (!error.empty()) break;
  }
  if (!error.empty()) {
    return Status(StatusCode::kDataLoss, "not an Event: " + error);
  }
  return event;
}

}  // namespace ddprun::examples::outputs
