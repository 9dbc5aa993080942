#include "agent/cli/slurm_env.h"

#include <cctype>

namespace ddprun::agent {
namespace {

Status Invalid(const std::string& source, const std::string& list,
               const std::string& why) {
  return InvalidArgumentError(source + ": invalid value '" + list + "' (" +
                              why + ")");
}

bool AllDigits(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;  // fits unsigned long long
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Splits at commas outside brackets. Returns false on unbalanced brackets.
bool SplitTopLevel(const std::string& s, std::vector<std::string>* out) {
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '[' && ++depth > 1) return false;
    if (c == ']' && --depth < 0) return false;
    if (c == ',' && depth == 0) {
      out->push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out->push_back(cur);
  return depth == 0;
}

// "01-03,07" -> {"01", "02", "03", "07"}; nullopt-like false on bad syntax.
bool ExpandRanges(const std::string& ranges, std::size_t max_hosts,
                  std::vector<std::string>* out, std::string* why) {
  std::vector<std::string> parts;
  SplitTopLevel(ranges, &parts);
  for (const std::string& part : parts) {
    const auto dash = part.find('-');
    const std::string lo = part.substr(0, dash);
    const std::string hi =
        dash == std::string::npos ? lo : part.substr(dash + 1);
    if (!AllDigits(lo) || !AllDigits(hi)) {
      *why = "'" + part + "' is not a number or range";
      return false;
    }
    const unsigned long long a = std::stoull(lo), b = std::stoull(hi);
    if (a > b) {
      *why = "range '" + part + "' descends";
      return false;
    }
    if (b - a >= max_hosts || out->size() + (b - a) >= max_hosts) {
      *why = "more than " + std::to_string(max_hosts) + " hosts";
      return false;
    }
    for (unsigned long long n = a; n <= b; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < lo.size()) {
        digits.insert(0, lo.size() - digits.size(), '0');
      }
      out->push_back(digits);
    }
  }
  return true;
}

// Appends the names of one entry ("pre[1-2]mid[3]post") to `out`.
bool ExpandEntry(const std::string& entry, std::size_t max_hosts,
                 std::vector<std::string>* out, std::string* why) {
  std::vector<std::string> names = {""};
  std::size_t pos = 0;
  while (pos < entry.size()) {
    const auto open = entry.find('[', pos);
    const std::string text = entry.substr(pos, open - pos);
    for (std::string& n : names) n += text;
    if (open == std::string::npos) break;
    const auto close = entry.find(']', open);
    if (close == open + 1) {
      *why = "empty brackets";
      return false;
    }
    std::vector<std::string> values;
    if (!ExpandRanges(entry.substr(open + 1, close - open - 1), max_hosts,
                      &values, why)) {
      return false;
    }
    if (names.size() * values.size() + out->size() > max_hosts) {
      *why = "more than " + std::to_string(max_hosts) + " hosts";
      return false;
    }
    std::vector<std::string> product;
    product.reserve(names.size() * values.size());
    for (const std::string& n : names) {
      for (const std::string& v : values) product.push_back(n + v);
    }
    names.swap(product);
    pos = close + 1;
  }
  out->insert(out->end(), names.begin(), names.end());
  return true;
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandSlurmNodelist(
    const std::string& source, const std::string& list, std::size_t max_hosts) {
  std::vector<std::string> entries;
  if (!SplitTopLevel(list, &entries)) {
    return Invalid(source, list, "unbalanced brackets");
  }
  std::vector<std::string> hosts;
  for (const std::string& entry : entries) {
    if (entry.empty() || entry.front() == '[') {
      return Invalid(source, list, "empty host name");
    }
    std::string why;
    if (!ExpandEntry(entry, max_hosts, &hosts, &why)) {
      return Invalid(source, list, why);
    }
  }
  return hosts;
}

int SlurmRendezvousPort(unsigned long long job_id) {
  return static_cast<int>(20000 + job_id % 10000);
}

StatusOr<std::string> SlurmRendezvousEndpoint(const std::string& nodelist,
                                              const std::string& job_id) {
  if (!AllDigits(job_id)) {
    return InvalidArgumentError("SLURM_JOB_ID: invalid value '" + job_id +
                                "' (must be a job number)");
  }
  DDP_ASSIGN_OR_RETURN(std::vector<std::string> hosts,
                       ExpandSlurmNodelist("SLURM_JOB_NODELIST", nodelist));
  return hosts.front() + ":" +
         std::to_string(SlurmRendezvousPort(std::stoull(job_id)));
}

}  // namespace ddprun::agent
