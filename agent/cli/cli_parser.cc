#include "agent/cli/cli_parser.h"

#include <cctype>
#include <limits>
#include <optional>
#include <sstream>

#include "agent/cli/cli_entrypoint.h"
#include "agent/cli/cli_flags.h"
#include "agent/cli/cli_values.h"
#include "agent/cli/log_line_prefix.h"
#include "agent/cli/nproc_resolver.h"
#include "agent/cli/option_tokenizer.h"
#include "agent/cli/slurm_env.h"
#include "rendezvous/options/rendezvous_options.h"

namespace ddprun::agent {
namespace {

// One flag value and where it came from ("--nnodes" or "PET_NNODES").
struct RawValue {
  std::string text;
  std::string source;
  bool from_cli = false;
};
using RawValues = std::map<std::string, RawValue>;  // by FlagSpec::dest

struct Tokens {
  bool help = false;
  bool version = false;
  RawValues cli;
  bool has_entrypoint = false;
  std::string entrypoint;
  std::vector<std::string> rest;
};

// The torchrun flag table as the tokenizer reads it: "--dest" and "-x".
const std::vector<OptionSpec>& TorchrunSpecs() {
  static const std::vector<OptionSpec>* specs = [] {
    auto* out = new std::vector<OptionSpec>;
    for (const FlagSpec& f : AllFlags()) {
      OptionSpec spec;
      spec.dest = f.dest;
      spec.names.push_back(std::string("--") + f.dest);
      if (f.short_name) spec.names.push_back(std::string("-") + f.short_name);
      spec.kind = f.kind == FlagKind::kHelp ? OptionKind::kHelp
                  : f.kind == FlagKind::kBool || f.kind == FlagKind::kVersion
                      ? OptionKind::kFlag
                      : OptionKind::kValue;
      out->push_back(spec);
    }
    return out;
  }();
  return *specs;
}

StatusOr<Tokens> Tokenize(const std::vector<std::string>& args) {
  DDP_ASSIGN_OR_RETURN(TokenizedArgs t, TokenizeOptions(args, TorchrunSpecs(),
                                                        /*allow_abbrev=*/true));
  Tokens out;
  out.help = t.help;
  for (const FlagSpec& flag : AllFlags()) {
    if (!t.Has(flag.dest)) continue;
    if (flag.kind == FlagKind::kVersion) {
      out.version = true;
      continue;
    }
    out.cli[flag.dest] = {
        flag.kind == FlagKind::kBool ? "1" : t.Get(flag.dest, ""),
        std::string("--") + flag.dest, true};
  }
  out.has_entrypoint = t.has_entrypoint;
  out.entrypoint = t.entrypoint;
  out.rest = t.rest;
  return out;
}

// Command line first, then non-empty PET_<DEST> variables.
RawValues MergeEnv(RawValues values,
                   const std::map<std::string, std::string>& env) {
  for (const FlagSpec& flag : AllFlags()) {
    if (flag.kind == FlagKind::kHelp || flag.kind == FlagKind::kVersion ||
        values.count(flag.dest)) {
      continue;
    }
    const std::string pet = PetEnvName(flag);
    auto it = env.find(pet);
    if (it != env.end() && !it->second.empty()) {
      values[flag.dest] = {it->second, pet, false};
    }
  }
  return values;
}

// Defaults from the scheduler, below PET_*: `srun ddprun ...` with one task
// per node (SLURM_STEP_ID set, SLURM_NTASKS == SLURM_NNODES) gives nnodes,
// node_rank (SLURM_NODEID, else SLURM_PROCID), rdzv_id and rdzv_endpoint
// (first host of SLURM_JOB_NODELIST, port 20000 + SLURM_JOB_ID % 10000); a
// Kubernetes Indexed Job gives node_rank from JOB_COMPLETION_INDEX. Not
// applied under --standalone (one node by definition) or when a value is
// already set. A malformed SLURM_JOB_NODELIST / SLURM_JOB_ID is an error
// only when the endpoint is taken from it.
Status AddSchedulerDefaults(const std::map<std::string, std::string>& env,
                            RawValues* values) {
  auto get = [&env](const char* name) -> std::string {
    auto it = env.find(name);
    return it == env.end() ? "" : it->second;
  };
  auto add = [values](const char* dest, const std::string& text,
                      const char* source) {
    if (!text.empty() && !values->count(dest)) {
      (*values)[dest] = {text, source, false};
    }
  };
  auto standalone = values->find("standalone");
  if (standalone != values->end()) {
    auto on =
        ParseBoolValue(standalone->second.source, standalone->second.text);
    if (!on.ok() || *on) return Status::Ok();  // a bad value: reported later
  }
  const std::string nnodes = get("SLURM_NNODES");
  if (!get("SLURM_STEP_ID").empty() && !nnodes.empty() &&
      get("SLURM_NTASKS") == nnodes) {
    add("nnodes", nnodes, "SLURM_NNODES");
    add("node_rank", get("SLURM_NODEID"), "SLURM_NODEID");
    add("node_rank", get("SLURM_PROCID"), "SLURM_PROCID");
    add("rdzv_id", get("SLURM_JOB_ID"), "SLURM_JOB_ID");
    const std::string nodelist = get("SLURM_JOB_NODELIST");
    if (!values->count("rdzv_endpoint") && !nodelist.empty()) {
      DDP_ASSIGN_OR_RETURN(
          std::string endpoint,
          SlurmRendezvousEndpoint(nodelist, get("SLURM_JOB_ID")));
      add("rdzv_endpoint", endpoint, "SLURM_JOB_NODELIST");
    }
  }
  add("node_rank", get("JOB_COMPLETION_INDEX"), "JOB_COMPLETION_INDEX");
  return Status::Ok();
}

// Typed access to the merged values; each getter returns the default when
// the flag was given nowhere.
class Values {
 public:
  explicit Values(RawValues raw) : raw_(std::move(raw)) {}

  const RawValue* Find(const std::string& dest) const {
    auto it = raw_.find(dest);
    return it == raw_.end() ? nullptr : &it->second;
  }
  bool Has(const std::string& dest) const { return Find(dest) != nullptr; }
  std::string Text(const std::string& dest, const std::string& def) const {
    const RawValue* v = Find(dest);
    return v ? v->text : def;
  }
  std::string Source(const std::string& dest) const {
    const RawValue* v = Find(dest);
    return v ? v->source : "--" + dest;
  }
  StatusOr<bool> Bool(const std::string& dest) const {
    const RawValue* v = Find(dest);
    if (v == nullptr) return false;
    return ParseBoolValue(v->source, v->text);
  }
  // An integer >= min_value, or `def` when absent.
  StatusOr<long> Int(const std::string& dest, long def, long min_value) const {
    const RawValue* v = Find(dest);
    if (v == nullptr) return def;
    DDP_ASSIGN_OR_RETURN(long n, ParseIntValue(v->source, v->text));
    if (n < min_value) {
      return OutOfRange(*v, "at least " + std::to_string(min_value));
    }
    if (n > std::numeric_limits<int>::max()) return OutOfRange(*v, "smaller");
    return n;
  }
  // A finite number >= min_value (> min_value when strict), or `def`.
  StatusOr<double> Double(const std::string& dest, double def, double min_value,
                          bool strict) const {
    const RawValue* v = Find(dest);
    if (v == nullptr) return def;
    DDP_ASSIGN_OR_RETURN(double d, ParseDoubleValue(v->source, v->text));
    if (d < min_value || (strict && d == min_value)) {
      std::ostringstream bound;
      bound << (strict ? "greater than " : "at least ") << min_value;
      return OutOfRange(*v, bound.str());
    }
    return d;
  }

 private:
  static Status OutOfRange(const RawValue& v, const std::string& bound) {
    return InvalidArgumentError(v.source + ": invalid value '" + v.text +
                                "' (must be " + bound + ")");
  }

  RawValues raw_;
};

Status CheckChoice(const Values& v, const std::string& dest,
                   const std::vector<std::string>& choices) {
  const RawValue* raw = v.Find(dest);
  if (raw == nullptr) return Status::Ok();
  std::string list;
  for (const std::string& c : choices) {
    if (raw->text == c) return Status::Ok();
    list += (list.empty() ? "" : ", ") + c;
  }
  return InvalidArgumentError(raw->source + ": invalid value '" + raw->text +
                              "' (choose from " + list + ")");
}

// Flags that ddprun accepts for compatibility but does not act on.
Status CheckNoEffectFlags(const Values& v, std::vector<std::string>* warnings) {
  DDP_RETURN_IF_ERROR(CheckChoice(v, "event_log_handler",
                                  {"null", "console", "dynamic_rendezvous"}));
  // torchrun loads the name from the `torchrun.logs_specs` entry points,
  // where only `default` (DefaultLogsSpecs) is registered; any other name
  // is a ValueError there.
  if (const RawValue* raw = v.Find("logs_specs")) {
    if (raw->text != "default") {
      return InvalidArgumentError(
          raw->source + ": unknown logs spec '" + raw->text +
          "' (torchrun: could not find entrypoint under "
          "'torchrun.logs_specs[" +
          raw->text + "]'); only 'default' exists");
    }
  }
  for (const FlagSpec& flag : AllFlags()) {
    const RawValue* raw = v.Find(flag.dest);
    if (!flag.no_effect || raw == nullptr) continue;
    const std::string dest = flag.dest;
    if ((dest == "event_log_handler" && raw->text == "null") ||
        (dest == "logs_specs" && raw->text == "default")) {
      continue;  // the default: nothing is lost
    }
    warnings->push_back(raw->source + "=" + raw->text +
                        " is accepted for torchrun compatibility but has no "
                        "effect in ddprun");
  }
  return Status::Ok();
}

// The typed --rdzv_conf: the one place it is read. $DDPRUN_RDZV_TOKEN
// counts only where a rendezvous server is used.
Status FillRendezvousOptions(const Values& v,
                             const std::map<std::string, std::string>& env,
                             LaunchOptions* o,
                             std::vector<std::string>* warnings) {
  std::string source = "--rdzv_conf";
  rendezvous::RdzvConf conf;
  if (const RawValue* raw = v.Find("rdzv_conf")) {
    source = raw->source;
    DDP_ASSIGN_OR_RETURN(conf, ParseRdzvConf(raw->source, raw->text));
  }
  std::optional<std::string> env_token;
  auto token = env.find("DDPRUN_RDZV_TOKEN");
  if (token != env.end() && ModeOf(*o) != RendezvousMode::kLocal) {
    env_token = token->second;
  }
  // Every backend: a typo is an error even where the key would be unused.
  DDP_ASSIGN_OR_RETURN(o->rendezvous, rendezvous::ParseRendezvousOptions(
                                          source, conf, env_token, warnings));
  return Status::Ok();
}

Status FillRendezvous(const Values& v,
                      const std::map<std::string, std::string>& env,
                      LaunchOptions* o, std::vector<std::string>* warnings) {
  DDP_ASSIGN_OR_RETURN(o->standalone, v.Bool("standalone"));
  DDP_RETURN_IF_ERROR(CheckChoice(
      v, "rdzv_backend", {"static", "c10d", "grpc", "etcd", "etcd-v2"}));
  o->rdzv_backend = v.Text("rdzv_backend", "static");
  if (o->rdzv_backend == "etcd" || o->rdzv_backend == "etcd-v2") {
    return InvalidArgumentError(v.Source("rdzv_backend") + "=" +
                                o->rdzv_backend +
                                " is not supported by ddprun, use grpc");
  }
  o->rdzv_endpoint = v.Text("rdzv_endpoint", "");
  if (!o->rdzv_endpoint.empty()) {
    DDP_RETURN_IF_ERROR(
        ParseHostPort(v.Source("rdzv_endpoint"), o->rdzv_endpoint).status());
  }
  o->rdzv_id = v.Text("rdzv_id", "none");
  if (o->rdzv_id.empty()) {
    return InvalidArgumentError("--rdzv_id: must not be empty");
  }
  DDP_RETURN_IF_ERROR(FillRendezvousOptions(v, env, o, warnings));
  if (!o->standalone) return Status::Ok();
  for (const char* dest : {"rdzv_backend", "rdzv_endpoint", "rdzv_id"}) {
    if (const RawValue* raw = v.Find(dest)) {
      warnings->push_back("--standalone ignores " + raw->source + "=" +
                          raw->text);
    }
  }
  if (o->min_nodes > 1) {
    return InvalidArgumentError(
        "--standalone runs a single-node job, but --nnodes asks for at "
        "least " +
        std::to_string(o->min_nodes) + " nodes");
  }
  o->rdzv_backend = "c10d";
  o->rdzv_endpoint = "localhost:0";
  o->rdzv_id = RandomUuid4();
  return Status::Ok();
}

Status FillAddressing(const Values& v, LaunchOptions* o) {
  const bool is_static = o->rdzv_backend == "static";
  DDP_ASSIGN_OR_RETURN(long node_rank, v.Int("node_rank", 0, 0));
  o->node_rank = static_cast<int>(node_rank);
  o->node_rank_given = v.Has("node_rank");
  if (is_static && o->node_rank >= o->max_nodes) {
    return InvalidArgumentError(
        v.Source("node_rank") + ": invalid value '" +
        std::to_string(o->node_rank) + "' (must be below --nnodes=" +
        std::to_string(o->max_nodes) + " with the static backend)");
  }
  o->master_addr = v.Text("master_addr", "127.0.0.1");
  if (o->master_addr.empty() ||
      o->master_addr.find_first_of(" \t") != std::string::npos) {
    return InvalidArgumentError(v.Source("master_addr") +
                                ": invalid address '" + o->master_addr + "'");
  }
  o->local_addr = v.Text("local_addr", "");
  const bool several_static = is_static && o->max_nodes > 1;
  if (const RawValue* port = v.Find("master_port")) {
    DDP_ASSIGN_OR_RETURN(int p, ParsePort(port->source, port->text, true));
    if (p == 0 && several_static) {
      return InvalidArgumentError(
          port->source +
          "=0 (pick a free port) needs --nnodes=1: other static nodes could "
          "not learn the port");
    }
    if (p != 0) o->master_port = p;
  } else if (o->legacy_launch || several_static) {
    o->master_port = 29500;
  }
  if (is_static && !o->rdzv_endpoint.empty() && !v.Has("master_addr") &&
      !v.Has("master_port")) {
    DDP_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(v.Source("rdzv_endpoint"),
                                                    o->rdzv_endpoint));
    o->master_addr =
        hp.host.find(':') != std::string::npos ? "[" + hp.host + "]" : hp.host;
    if (hp.port > 0) o->master_port = hp.port;
  }
  return Status::Ok();
}

Status FillLogs(const Values& v, const std::map<std::string, std::string>& env,
                LaunchOptions* o) {
  o->log_dir = v.Text("log_dir", "");
  auto prefix = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
  if (prefix != env.end() && !prefix->second.empty()) {
    o->log_line_prefix_template = prefix->second;
    DDP_RETURN_IF_ERROR(
        LogLinePrefix(o->log_line_prefix_template, PrefixValues{}).status());
  }
  if (const RawValue* r = v.Find("redirects")) {
    DDP_ASSIGN_OR_RETURN(o->redirects, ParseStdSpec(r->source, r->text));
  }
  if (const RawValue* t = v.Find("tee")) {
    DDP_ASSIGN_OR_RETURN(o->tee, ParseStdSpec(t->source, t->text));
  }
  // torch: "An empty filters list won't duplicate any lines".
  for (auto [dest, out] :
       {std::pair{"duplicate_stdout_filters", &o->duplicate_stdout_filters},
        std::pair{"duplicate_stderr_filters", &o->duplicate_stderr_filters}}) {
    const RawValue* raw = v.Find(dest);
    if (raw == nullptr || raw->text.empty()) continue;
    DDP_ASSIGN_OR_RETURN(*out, ParseFilterList(raw->source, raw->text));
  }
  DDP_RETURN_IF_ERROR(CheckChoice(
      v, "numa_binding", {"node", "socket", "exclusive", "core-complex"}));
  o->numa_binding = v.Text("numa_binding", "");
  if (const RawValue* f = v.Find("local_ranks_filter")) {
    if (!f->text.empty()) {
      DDP_ASSIGN_OR_RETURN(o->local_ranks_filter,
                           ParseRankSet(f->source, f->text));
    }
  }
  return Status::Ok();
}

Status FillShutdown(const Values& v,
                    const std::map<std::string, std::string>& env,
                    LaunchOptions* o) {
  const std::string signals =
      v.Text("signals_to_handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  DDP_ASSIGN_OR_RETURN(o->signals_to_handle,
                       ParseSignalList(v.Source("signals_to_handle"), signals));
  double shutdown_default = 30.0;
  auto it = env.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
  if (it != env.end() && !it->second.empty()) {
    DDP_ASSIGN_OR_RETURN(
        shutdown_default,
        ParseDoubleValue("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", it->second));
    if (shutdown_default < 0) {
      return InvalidArgumentError(
          "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: invalid value '" + it->second +
          "' (must be at least 0)");
    }
  }
  DDP_ASSIGN_OR_RETURN(
      o->shutdown_timeout_s,
      v.Double("shutdown_timeout", shutdown_default, 0, false));
  DDP_ASSIGN_OR_RETURN(o->exit_barrier_timeout_s,
                       v.Double("exit_barrier_timeout", 300.0, 0, false));
  DDP_ASSIGN_OR_RETURN(o->watchdog_timeout_s,
                       v.Double("watchdog_timeout", 0.0, 0, false));
  DDP_ASSIGN_OR_RETURN(o->straggler_factor,
                       v.Double("straggler_factor", 2.0, 0, false));
  if (o->straggler_factor > 0 && o->straggler_factor <= 1) {
    return InvalidArgumentError(
        v.Source("straggler_factor") + ": invalid value '" +
        v.Text("straggler_factor", "") +
        "' (must be more than 1, or 0 to turn the warnings off)");
  }
  DDP_ASSIGN_OR_RETURN(o->straggler_time_s,
                       v.Double("straggler_time", 30.0, 0, true));
  return Status::Ok();
}

// --health_check*, --max_restarts_without_progress (ddprun additions).
Status FillHealth(const Values& v, LaunchOptions* o) {
  DDP_ASSIGN_OR_RETURN(o->health_check, v.Bool("health_check"));
  o->health_check_cmd = v.Text("health_check_cmd", "");
  if (const RawValue* raw = v.Find("health_check_paths")) {
    if (!raw->text.empty()) {
      std::stringstream ss(raw->text);
      for (std::string path; std::getline(ss, path, ',');) {
        if (path.empty()) {
          return InvalidArgumentError(raw->source + ": invalid value '" +
                                      raw->text + "' (an empty path)");
        }
        o->health_check_paths.push_back(path);
      }
    }
  }
  DDP_ASSIGN_OR_RETURN(o->health_check_gpu_mem_mb,
                       v.Double("health_check_gpu_mem_mb", 1024, 0, false));
  DDP_ASSIGN_OR_RETURN(o->health_check_shm_mb,
                       v.Double("health_check_shm_mb", 256, 0, false));
  DDP_ASSIGN_OR_RETURN(o->health_check_timeout_s,
                       v.Double("health_check_timeout", 30, 0, true));
  DDP_ASSIGN_OR_RETURN(long progress,
                       v.Int("max_restarts_without_progress", 0, 0));
  o->max_restarts_without_progress = static_cast<int>(progress);
  const std::string scope = v.Text("restart_scope", "group");
  if (scope == "group") {
    o->restart_scope = LaunchOptions::RestartScope::kGroup;
  } else if (scope == "failed") {
    o->restart_scope = LaunchOptions::RestartScope::kFailed;
  } else {
    return InvalidArgumentError(v.Source("restart_scope") +
                                ": invalid choice '" + scope +
                                "' (choose from group, failed)");
  }
  DDP_ASSIGN_OR_RETURN(o->heal_timeout_s,
                       v.Double("heal_timeout", 120.0, 0, true));
  DDP_ASSIGN_OR_RETURN(o->standby_workers, v.Bool("standby_workers"));
  if (o->standby_workers &&
      o->restart_scope != LaunchOptions::RestartScope::kFailed) {
    return InvalidArgumentError(
        v.Source("standby_workers") +
        " needs --restart_scope failed (a standby takes over a rank replaced "
        "alone; under --restart_scope group every worker restarts)");
  }
  return Status::Ok();
}

// --http_*: the live view. A token given but empty is an error (it would
// turn the check off); DDPRUN_HTTP_TOKEN / DDPRUN_HTTP_ADMIN_TOKEN are read
// when neither the flag nor PET_* gives one, as ddprun-rendezvous does.
Status FillLiveView(const Values& v,
                    const std::map<std::string, std::string>& env,
                    LaunchOptions* o) {
  if (const RawValue* port = v.Find("http_port")) {
    DDP_ASSIGN_OR_RETURN(o->http_port,
                         ParsePort(port->source, port->text, true));
  }
  o->http_host = v.Text("http_host", "127.0.0.1");
  if (o->http_host.empty()) {
    return InvalidArgumentError(v.Source("http_host") + ": empty address");
  }
  const std::pair<const char*, std::string*> tokens[] = {
      {"http_token", &o->http_token},
      {"http_admin_token", &o->http_admin_token}};
  for (const auto& [dest, value] : tokens) {
    std::string source = v.Source(dest);
    if (v.Has(dest)) {
      *value = v.Text(dest, "");
    } else {
      std::string name = std::string("DDPRUN_") + dest;
      for (char& c : name) c = static_cast<char>(std::toupper(c));
      auto it = env.find(name);
      if (it == env.end()) continue;
      source = name;
      *value = it->second;
    }
    if (value->empty()) {
      return InvalidArgumentError(source +
                                  ": empty token (give a non-empty one, or "
                                  "none)");
    }
  }
  return Status::Ok();
}

Status FillEntrypoint(const Values& v, const Tokens& tokens,
                      const std::map<std::string, std::string>& env,
                      LaunchOptions* o) {
  DDP_ASSIGN_OR_RETURN(o->module, v.Bool("module"));
  DDP_ASSIGN_OR_RETURN(o->no_python, v.Bool("no_python"));
  DDP_ASSIGN_OR_RETURN(o->run_path, v.Bool("run_path"));
  if (o->no_python && o->module && !o->run_path) {
    return InvalidArgumentError(
        "--no_python and -m/--module cannot be used together");
  }
  if (!tokens.has_entrypoint || tokens.entrypoint.empty()) {
    return InvalidArgumentError(
        "missing entrypoint: usage is ddprun [options] TRAINING_SCRIPT "
        "[args...]");
  }
  o->entrypoint = tokens.entrypoint;
  o->entrypoint_args = tokens.rest;
  return CheckEntrypoint(*o, env);
}

}  // namespace

StatusOr<CommandLine> ParseCommandLine(
    const std::vector<std::string>& args,
    const std::map<std::string, std::string>& env, bool legacy,
    const AcceleratorCounter& count_accelerators) {
  CommandLine cl;
  DDP_ASSIGN_OR_RETURN(Tokens tokens, Tokenize(args));
  if (tokens.help) {
    cl.show_help = true;
    return cl;
  }
  if (tokens.version) {
    cl.show_version = true;
    return cl;
  }
  RawValues raw = MergeEnv(tokens.cli, env);
  DDP_RETURN_IF_ERROR(AddSchedulerDefaults(env, &raw));
  const Values v(std::move(raw));
  LaunchOptions& o = cl.options;

  DDP_ASSIGN_OR_RETURN(bool legacy_flag, v.Bool("legacy_launch"));
  o.legacy_launch = legacy || legacy_flag;
  if (const RawValue* use_env = v.Find("use_env")) {
    if (o.legacy_launch) {
      DDP_ASSIGN_OR_RETURN(o.use_env, v.Bool("use_env"));
    } else if (use_env->from_cli) {
      return InvalidArgumentError(
          "unknown flag --use_env (only torch.distributed.launch mode has "
          "it: run ddprun-launch or add --legacy_launch)");
    }
  }

  DDP_ASSIGN_OR_RETURN(NodeRange nodes, ParseNnodes(v.Source("nnodes"),
                                                    v.Text("nnodes", "1:1")));
  o.min_nodes = nodes.min_nodes;
  o.max_nodes = nodes.max_nodes;
  o.nproc_per_node_spec = v.Text("nproc_per_node", "1");
  const bool symbolic = o.nproc_per_node_spec == "cpu" ||
                        o.nproc_per_node_spec == "gpu" ||
                        o.nproc_per_node_spec == "auto";
  DDP_ASSIGN_OR_RETURN(
      o.nproc_per_node,
      ResolveNprocPerNode(v.Source("nproc_per_node"), o.nproc_per_node_spec,
                          symbolic ? ProbeHostDevices() : HostDevices{}, env,
                          count_accelerators));

  DDP_RETURN_IF_ERROR(FillRendezvous(v, env, &o, &cl.warnings));

  DDP_ASSIGN_OR_RETURN(long restarts, v.Int("max_restarts", 0, 0));
  o.max_restarts = static_cast<int>(restarts);
  DDP_ASSIGN_OR_RETURN(o.monitor_interval_s,
                       v.Double("monitor_interval", 0.1, 0, true));
  DDP_RETURN_IF_ERROR(
      CheckChoice(v, "start_method", {"spawn", "fork", "forkserver"}));
  o.start_method = v.Text("start_method", "spawn");
  o.role = v.Text("role", "default");
  if (o.role.empty()) return InvalidArgumentError("--role: must not be empty");

  DDP_RETURN_IF_ERROR(FillLogs(v, env, &o));
  DDP_RETURN_IF_ERROR(FillAddressing(v, &o));
  DDP_RETURN_IF_ERROR(FillShutdown(v, env, &o));
  DDP_RETURN_IF_ERROR(FillLiveView(v, env, &o));
  DDP_ASSIGN_OR_RETURN(o.virtual_local_rank, v.Bool("virtual_local_rank"));
  if (const RawValue* tv = v.Find("torch_version")) {
    DDP_ASSIGN_OR_RETURN(o.torch_version,
                         ParseTorchVersion(tv->source, tv->text));
  }
  DDP_ASSIGN_OR_RETURN(o.retry_usage_errors, v.Bool("retry_usage_errors"));
  DDP_RETURN_IF_ERROR(FillHealth(v, &o));
  DDP_RETURN_IF_ERROR(CheckNoEffectFlags(v, &cl.warnings));
  DDP_RETURN_IF_ERROR(FillEntrypoint(v, tokens, env, &o));
  if (o.standby_workers && !o.no_python &&
      (o.module ||
       (o.entrypoint.size() > 3 &&
        o.entrypoint.compare(o.entrypoint.size() - 3, 3, ".py") == 0))) {
    return InvalidArgumentError(
        v.Source("standby_workers") +
        ": Python entrypoints are not supported (a standby waits in "
        "ddprun::worker::RunMain, the C++ worker runtime)");
  }
  // torch.distributed.launch's launch(): the program would get
  // --local-rank=N as its first argument.
  if (o.legacy_launch && o.no_python && !o.use_env) {
    return InvalidArgumentError(
        "When using the '--no-python' flag, you must also set the "
        "'--use-env' flag.");
  }
  return cl;
}

}  // namespace ddprun::agent
