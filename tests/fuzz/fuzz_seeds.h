#pragma once

// Seeds a fuzz target builds in code, beside its checked-in corpus
// (tests/fuzz/corpus/<name>/). Optional: a target defines this function
// to give the replay driver (fuzz_replay_main.cc) inputs that are easier to
// write as code than as bytes; `<name>_fuzz_replay --write_seeds DIR`
// writes them out for libFuzzer's corpus.

#include <string>
#include <vector>

std::vector<std::string> DdprunFuzzSeeds();
