#include "ddprun/worker/generation.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>

namespace ddprun::worker {
namespace {

// A reader of the JSON the record needs (objects, arrays, strings, numbers,
// true/false/null): the worker library does not link a JSON library, and
// the record is a few fields. Every Parse* returns false at the first
// problem, with why() saying what and where.
class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  const std::string& why() const { return why_; }

  bool Fail(const std::string& what) {
    if (why_.empty()) why_ = what + " at offset " + std::to_string(pos_);
    return false;
  }
  void Space() {
    while (pos_ < s_.size() &&
           std::isspace(static_cast<unsigned char>(s_[pos_])))
      ++pos_;
  }
  bool Peek(char c) {
    Space();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  bool Eat(char c) {
    if (!Peek(c)) return Fail(std::string("expected '") + c + "'");
    ++pos_;
    return true;
  }
  bool AtEnd() {
    Space();
    return pos_ == s_.size();
  }

  bool String(std::string* out) {
    if (!Eat('"')) return false;
    out->clear();
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) break;
        c = s_[pos_++];
        switch (c) {
          case 'n':
            c = '\n';
            break;
          case 't':
            c = '\t';
            break;
          case 'r':
            c = '\r';
            break;
          case 'b':
            c = '\b';
            break;
          case 'f':
            c = '\f';
            break;
          case 'u':
            // Kept as '?': the reason is only logged.
            if (pos_ + 4 > s_.size()) return Fail("a short \\u escape");
            pos_ += 4;
            c = '?';
            break;
          default:
            break;  // \" \\ \/
        }
      }
      out->push_back(c);
    }
    if (pos_ >= s_.size()) return Fail("an unterminated string");
    ++pos_;
    return true;
  }

  bool Integer(int64_t* out) {
    Space();
    const char* begin = s_.c_str() + pos_;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(begin, &end, 10);
    if (end == begin || errno != 0 ||
        (*end == '.' || *end == 'e' || *end == 'E')) {
      return Fail("expected an integer");
    }
    pos_ += static_cast<size_t>(end - begin);
    *out = v;
    return true;
  }

  // Any value, discarded (keys the worker does not read). Depth-limited.
  bool Skip(int depth = 0) {
    if (depth > 32) return Fail("nesting too deep");
    Space();
    if (pos_ >= s_.size()) return Fail("expected a value");
    const char c = s_[pos_];
    if (c == '"') {
      std::string ignored;
      return String(&ignored);
    }
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      if (Peek(close)) return Eat(close);
      do {
        if (c == '{') {
          std::string key;
          if (!String(&key) || !Eat(':')) return false;
        }
        if (!Skip(depth + 1)) return false;
      } while (Peek(',') && Eat(','));
      return Eat(close);
    }
    for (const char* word : {"true", "false", "null"}) {
      if (s_.compare(pos_, std::char_traits<char>::length(word), word) == 0) {
        pos_ += std::char_traits<char>::length(word);
        return true;
      }
    }
    const size_t begin = pos_;
    while (pos_ < s_.size() &&
           (std::isdigit(static_cast<unsigned char>(s_[pos_])) ||
            std::string("+-.eE").find(s_[pos_]) != std::string::npos)) {
      ++pos_;
    }
    return pos_ > begin ? true : Fail("expected a value");
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;
  std::string why_;
};

Status Invalid(int64_t generation, const std::string& what) {
  return InvalidArgumentError("the record of generation " +
                              std::to_string(generation) + " (" +
                              GenerationRecordKey(generation) + "): " + what);
}

}  // namespace

std::string GenerationRecordKey(int64_t generation) {
  return std::string(kGenerationKey) + "/" + std::to_string(generation);
}

std::string GenerationHealedKey(int64_t generation) {
  return GenerationRecordKey(generation) + "/healed";
}

std::string GenerationPrefix(int64_t generation) {
  return "ddprun/gen/" + std::to_string(generation);
}

StatusOr<GenerationRecord> ParseGenerationRecord(int64_t generation,
                                                 const std::string& json,
                                                 int world_size) {
  GenerationRecord record;
  record.generation = generation;
  JsonReader r(json);
  bool has_source = false, has_replaced = false;
  bool ok = r.Eat('{');
  if (ok && r.Peek('}')) ok = r.Eat('}') && r.Fail("an empty object");
  while (ok) {
    std::string key;
    ok = r.String(&key) && r.Eat(':');
    if (!ok) break;
    if (key == "replaced") {
      has_replaced = true;
      ok = r.Eat('[');
      if (ok && r.Peek(']')) {
        ok = r.Eat(']');
      } else {
        while (ok) {
          int64_t rank = 0;
          ok = r.Integer(&rank);
          if (ok && (rank < 0 || rank >= world_size)) {
            return Invalid(generation, "replaced rank " + std::to_string(rank) +
                                           " is not in [0, " +
                                           std::to_string(world_size) + ")");
          }
          if (ok) record.replaced.push_back(static_cast<int>(rank));
          if (ok && r.Peek(',')) {
            ok = r.Eat(',');
          } else {
            ok = ok && r.Eat(']');
            break;
          }
        }
      }
    } else if (key == "source") {
      int64_t source = 0;
      ok = r.Integer(&source);
      if (ok && (source < 0 || source >= world_size)) {
        return Invalid(generation, "source rank " + std::to_string(source) +
                                       " is not in [0, " +
                                       std::to_string(world_size) + ")");
      }
      record.source = static_cast<int>(source);
      has_source = ok;
    } else if (key == "reason") {
      ok = r.String(&record.reason);
    } else {
      ok = r.Skip();
    }
    if (!ok) break;
    if (r.Peek(',')) {
      ok = r.Eat(',');
      continue;
    }
    ok = r.Eat('}') && (r.AtEnd() || r.Fail("text after the object"));
    break;
  }
  if (!ok) return Invalid(generation, r.why() + " in '" + json + "'");
  if (!has_replaced) return Invalid(generation, "no \"replaced\" list");
  if (!has_source) return Invalid(generation, "no \"source\" rank");
  std::sort(record.replaced.begin(), record.replaced.end());
  record.replaced.erase(
      std::unique(record.replaced.begin(), record.replaced.end()),
      record.replaced.end());
  if (std::binary_search(record.replaced.begin(), record.replaced.end(),
                         record.source)) {
    return Invalid(generation, "the source rank " +
                                   std::to_string(record.source) +
                                   " is itself replaced");
  }
  return record;
}

StatusOr<int64_t> ParseGenerationNumber(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 ||
      v < 0 || !std::isdigit(static_cast<unsigned char>(text[0]))) {
    return InvalidArgumentError(std::string(kGenerationKey) + " holds '" +
                                text + "', not a generation number");
  }
  return static_cast<int64_t>(v);
}

}  // namespace ddprun::worker
