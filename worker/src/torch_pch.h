// Precompiled header of the worker runtime's Torch translation units: the
// narrow Torch headers they use, parsed once per build instead of once per
// file (each costs seconds and ~1 GB of compiler memory).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
