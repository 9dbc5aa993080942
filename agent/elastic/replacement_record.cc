#include "agent/elastic/replacement_record.h"

#include <cerrno>
#include <cstdio>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/file_util.h"

namespace ddprun::agent {

std::string ReplacementRecord::FileName(int64_t generation) {
  return "replaced_g" + std::to_string(generation) + ".json";
}

std::string ReplacementRecord::MovedErrorFileName(int64_t generation) {
  return "error.replaced_g" + std::to_string(generation) + ".json";
}

ReplacementRecord::ReplacementRecord(std::string rank_dir,
                                     const ProcessFailure& failed,
                                     int64_t generation, std::string reason)
    : rank_dir_(std::move(rank_dir)),
      path_(rank_dir_ + "/" + FileName(generation)),
      rank_(failed.global_rank),
      local_rank_(failed.local_rank),
      generation_(generation),
      reason_(std::move(reason)),
      pid_(failed.pid),
      exitcode_(failed.exitcode),
      failed_at_(failed.timestamp),
      error_json_(failed.error_json) {}

Status ReplacementRecord::Begin() {
  DDP_RETURN_IF_ERROR(Write());
  // Moved after the record is written: the record already holds the
  // file's content, so a crash in between loses nothing.
  const std::string error_file = rank_dir_ + "/error.json";
  const std::string moved = rank_dir_ + "/" + MovedErrorFileName(generation_);
  if (std::rename(error_file.c_str(), moved.c_str()) != 0) {
    if (errno == ENOENT) return Status::Ok();  // the worker wrote none
    return ErrnoStatus("rename " + error_file + " to " + moved, errno);
  }
  moved_error_file_ = moved;
  return FsyncDir(rank_dir_);
}

Status ReplacementRecord::Healed(int source, double seconds) {
  heal_ = Heal::kHealed;
  source_ = source;
  seconds_ = seconds;
  return Write();
}

Status ReplacementRecord::HealFailed(const std::string& why) {
  heal_ = Heal::kFailed;
  failed_why_ = why;
  return Write();
}

Status ReplacementRecord::Write() const {
  // In the schema's order (docs/restart_scope.md), for a person reading it;
  // the failed process's error file keeps its own order too.
  using json = nlohmann::ordered_json;
  json record = json::object();
  record["rank"] = rank_;
  record["local_rank"] = local_rank_;
  record["generation"] = generation_;
  record["reason"] = reason_;
  record["pid"] = pid_;
  record["exitcode"] = exitcode_;
  record["failed_at"] = failed_at_;
  if (!error_json_.empty()) {
    // Already read and checked (depth, schema) by MakeProcessFailure.
    json error = json::parse(error_json_, nullptr, /*allow_exceptions=*/false);
    if (!error.is_discarded() && error.is_object()) {
      record["error"] = std::move(error);
    }
  }
  switch (heal_) {
    case Heal::kPending:
      record["heal"] = nullptr;
      break;
    case Heal::kHealed:
      record["heal"] = {{"source", source_}, {"seconds", seconds_}};
      break;
    case Heal::kFailed:
      record["heal"] = {{"failed", failed_why_}};
      break;
  }
  // A reason or an error file is a worker's words: bytes that are not
  // UTF-8 are replaced instead of throwing.
  const std::string text =
      record.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  return WriteFileAtomically(path_, {text});
}

}  // namespace ddprun::agent
