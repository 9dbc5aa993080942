#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/process.h"

namespace ddprun::examples::testing {

// Output (stdout and stderr interleaved) and exit code (124 when the
// deadline stopped it) of a command.
using ddprun::testing::CommandResult;
using ddprun::testing::FreeLoopbackPort;

// Runs `command` through /bin/sh with a wall-clock limit of `timeout_s` and
// OMP_NUM_THREADS=1 (tests/support's RunShell: at the limit its process
// group gets SIGTERM, 5 s later SIGKILL).
CommandResult RunCommand(const std::string& command, int timeout_s);

// A fresh empty directory under /tmp, unique to this process and `tag`.
std::string FreshDir(const std::string& tag);

// Path of a built binary (DDPRUN_BIN_DIR/name).
std::string Bin(const std::string& name);

// Every line of <dir>/metrics.jsonl as JSON (empty if missing).
std::vector<nlohmann::json> ReadMetrics(const std::string& output_dir);

// Runs `<trainer>_trainer --make_synthetic DIR <args>` once per process
// (later calls return the cached path) and returns DIR/<file>; throws
// std::runtime_error with the output when generation fails.
std::string SyntheticData(const std::string& trainer, const std::string& args,
                          const std::string& file);

// The folder holding `path` ("a/b/config.json" -> "a/b"): a data set's
// folder from the file SyntheticData() returns.
std::string DirOf(const std::string& path);

// Writes `text` to `path`.
void WriteText(const std::string& path, const std::string& text);

// <dir>/events.out.tfevents.* in name (creation) order.
std::vector<std::string> EventFiles(const std::string& dir);

// An event file as tests/outputs/read_tfevents.py reads it (every record's
// CRCs checked; {"records": [...], "truncated": bool}); throws
// std::runtime_error when the reader fails.
nlohmann::json ReadEvents(const std::string& path);

// Width and height from a PNG file's header, {-1, -1} when it is not one.
std::pair<int, int> PngSize(const std::string& path);

// The lines of `output` that contain `needle`, in order.
std::vector<std::string> LinesWith(const std::string& output,
                                   const std::string& needle);

// The baseline of a learning bar (issue 27): runs `command` (a trainer
// command line that writes to `output_dir`) with `--learning_rate 0`
// appended, i.e. the same seed, data and model that never learns (its batch
// norm statistics still follow the data), and returns its last metrics
// line. A learning test's score must beat this one, measured in the same
// test, by a margin taken from a measured seed sweep. Throws
// std::runtime_error with the output when the run fails.
nlohmann::json UntrainedMetrics(const std::string& command,
                                const std::string& output_dir, int timeout_s);

// The learning bars' margins over UntrainedMetrics, each with the seed
// sweep it was chosen from (one run per --seed, 2026-11-28).

// survival_trainer, --n 128 --seed 3 data, 3 epochs of batch 8: validation
// C-index on 1 rank (--seed 0-7) trained 0.73-0.82, untrained (--lr 0, 1
// epoch) 0.31-0.65, trained minus untrained of the same seed 0.13-0.48; on
// 2 ranks (--seed 0-4) trained 0.73-0.84. A 3-epoch --lr 0 run scores
// within 0.03 of the 1-rank 1-epoch baseline (1 or 2 ranks, --seed 0-2).
constexpr double kSurvivalCindexGain = 0.06;

// vqa_trainer, the mimic layout's 40 studies (--n 40 --image_size 32
// --seed 7), 2 epochs with --amp (on this CPU --mixed_precision fp16 gives
// the same numbers), --seed 0-4: the second epoch's training loss 2.13-2.38
// trained against 2.50-2.74 untrained (the same batches), 0.25-0.48 below;
// validation mean AUROC 0.53-0.76 against 0.41-0.48, 0.11-0.33 above.
// --lr 0 moves the loss by <= 0.008 between epochs and the AUROC not at all.
constexpr double kVqaLossGain = 0.1;
constexpr double kVqaAurocGain = 0.05;

// segmentation_trainer, --n 128 --seed 5 data, 4 epochs at --image_size 48,
// --seed 0-4: validation Dice trained 0.41-0.63, untrained (--lr 0, 1
// epoch) 0.02-0.11, trained minus untrained 0.34-0.61 (the old bar, > 0.5,
// failed --seed 1 and 4). --lr 0 for 4 epochs instead of 1 moves the Dice
// by < 0.001 (--seed 0 and 4).
constexpr double kSegmentationDiceGain = 0.2;

}  // namespace ddprun::examples::testing

namespace ddprun::examples::testing {

// Pid of the live process whose command line contains `marker` and whose
// environment has RANK=<rank> (a worker started by a launcher), or -1.
int FindWorkerPid(const std::string& marker, int rank);

// Largest step among <dir>/ckpt-<step>.pt files, or -1 when none.
long long NewestCheckpointStep(const std::string& dir);

// Runs `command` (a ddprun job whose trainer writes to `output_dir`) and,
// once a checkpoint of step >= `min_step` exists, kill -9s the worker of
// rank 1. Reports the run and the newest step saved before the kill.
struct FaultRun {
  CommandResult result;
  long long saved_step = -1;
  bool killed = false;
  // Step from the "resumed from checkpoint at step N" log line, or -1.
  long long resumed_step = -1;
};
FaultRun RunAndKillRank1(const std::string& command,
                         const std::string& output_dir, long long min_step,
                         int timeout_s);

}  // namespace ddprun::examples::testing

#ifdef DDPRUN_LAUNCHER_BIN
namespace ddprun::examples::testing {
// "ddprun --standalone --nproc_per_node=2 <flags> --no_python " (the
// trainer command follows).
inline std::string Launch(const std::string& flags) {
  return std::string(DDPRUN_LAUNCHER_BIN) +
         " --standalone --nproc_per_node=2 " + flags + " --no_python ";
}
}  // namespace ddprun::examples::testing
#endif
