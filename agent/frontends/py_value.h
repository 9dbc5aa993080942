#pragma once

#include <string>

namespace ddprun::agent {

// A value as Python's `accelerate launch` holds it (an argparse value, a
// YAML/JSON config value), kept to reproduce what the launcher writes into
// its workers' environment: str() of the value.
struct PyValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kList };
  Kind kind = Kind::kNone;
  bool b = false;
  long long i = 0;
  double f = 0;
  std::string s;  // kStr: the string; kList: its Python repr

  static PyValue None() { return PyValue{}; }
  static PyValue Bool(bool v) {
    PyValue p;
    p.kind = Kind::kBool;
    p.b = v;
    return p;
  }
  static PyValue Int(long long v) {
    PyValue p;
    p.kind = Kind::kInt;
    p.i = v;
    return p;
  }
  static PyValue Float(double v) {
    PyValue p;
    p.kind = Kind::kFloat;
    p.f = v;
    return p;
  }
  static PyValue Str(std::string v) {
    PyValue p;
    p.kind = Kind::kStr;
    p.s = std::move(v);
    return p;
  }
  static PyValue List(std::string repr) {
    PyValue p;
    p.kind = Kind::kList;
    p.s = std::move(repr);
    return p;
  }

  bool is_none() const { return kind == Kind::kNone; }
  // Python truthiness.
  bool Truthy() const;
  // Python str(): "None", "True", "42", "0.1", "1e-05", the string itself.
  std::string ToString() const;
};

// Python's repr() of a float ("0.1", "100000000.0", "1e-05", "inf").
std::string PyFloatRepr(double v);

}  // namespace ddprun::agent
