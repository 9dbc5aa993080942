#include "agent/frontends/py_value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ddprun::agent {

bool PyValue::Truthy() const {
  switch (kind) {
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b;
    case Kind::kInt:
      return i != 0;
    case Kind::kFloat:
      return f != 0;
    case Kind::kStr:
      return !s.empty();
    case Kind::kList:
      return s != "[]";
  }
  return false;
}

std::string PyValue::ToString() const {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i);
    case Kind::kFloat:
      return PyFloatRepr(f);
    case Kind::kStr:
    case Kind::kList:
      return s;
  }
  return "";
}

std::string PyFloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // The shortest digits that read back as v (what repr() prints), as
  // d.ddddde[+-]X.
  char buf[64];
  for (int precision = 0; precision < 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string sci = buf;
  const auto e = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e + 1);
  std::string mantissa = sci.substr(0, e);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    out += exp;
  } else if (exponent < 0) {
    out = "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') +
          digits;
  } else {
    const std::size_t int_len = static_cast<std::size_t>(exponent) + 1;
    if (digits.size() <= int_len) {
      out = digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  return negative ? "-" + out : out;
}

}  // namespace ddprun::agent
