#include "agent/frontends/deepspeed/deepspeed_remote.h"

#include <fstream>

namespace ddprun::agent {
namespace {

// runner.py's EXPORT_ENVS (+ the CUDA accelerator's export_envs) are name
// prefixes; nebula's are names (also compared as prefixes there).
constexpr const char* kExportPrefixes[] = {
    "MLFLOW", "PYTHON", "MV2", "UCX", "NCCL",
    // deepspeed/nebula/constants.py NEBULA_EXPORT_ENVS
    "DLTS_JOB_ID", "DLTS_NUM_WORKER", "NEBULA_PERSISTENT_STORAGE_PATH",
    "NEBULA_PERSISTENT_TIME_INTERVAL", "AML_RUN_ID", "AZUREML_RUN_TOKEN",
    "AZUREML_WORKSPACE_SCOPE", "AZUREML_EXPERIMENT_SCOPE",
    "AZUREML_RUN_HISTORY_SERVICE_ENDPOINT", "AZUREML_RUN_ID",
    "NEBULA_MEMORY_BUFFER_SIZE", "AZUREML_PARAMETER_ITPJOB_NAME",
    "FC_TASKROLE_NAME", "FC_TASK_INDEX", "MASTER_HOST", "LOCAL_HOST",
    "AZUREML_BLOB_ACCOUNT_NAME", "AZUREML_BLOB_ACCOUNT_KEY"};

std::string Strip(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n\f\v");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n\f\v");
  return s.substr(b, e - b + 1);
}

std::string PathJoin(const std::string& dir, const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;  // os.path.join rule
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

StatusOr<std::map<std::string, std::string>> DeepSpeedExports(
    const std::map<std::string, std::string>& env, const std::string& cwd,
    const std::string& home) {
  std::map<std::string, std::string> source = env;
  auto pp = source.find("PYTHONPATH");
  source["PYTHONPATH"] = pp == source.end() ? cwd : cwd + ":" + pp->second;
  std::map<std::string, std::string> exports;
  // On AISC compute, each node keeps its own NCCL_IB_HCA / UCX_NET_DEVICES.
  const bool aisc = env.count("AISC_JOB_NAME") != 0;
  for (const auto& [name, value] : source) {
    if (aisc && (name == "NCCL_IB_HCA" || name == "UCX_NET_DEVICES")) continue;
    for (const char* prefix : kExportPrefixes) {
      if (name.compare(0, std::char_traits<char>::length(prefix), prefix) ==
          0) {
        exports[name] = Strip(value);
        break;
      }
    }
  }
  auto file_it = env.find("DS_ENV_FILE");
  const std::string file_name =
      file_it == env.end() ? ".deepspeed_env" : file_it->second;
  for (const std::string& dir : {home, cwd}) {
    if (dir.empty()) continue;
    const std::string path = PathJoin(dir, file_name);
    std::ifstream in(path);
    if (!in) continue;
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (Strip(line).empty()) continue;
      const auto eq = line.find('=');
      if (eq == std::string::npos) {
        return InvalidArgumentError(path + ":" + std::to_string(line_no) +
                                    ": expected KEY=VALUE, got '" + line + "'");
      }
      exports[Strip(line.substr(0, eq))] = Strip(line.substr(eq + 1));
    }
  }
  return exports;
}

std::string ShellQuote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of(
                           "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
                           "vwxyz0123456789_-./=:,+@%") == std::string::npos) {
    return word;
  }
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

StatusOr<std::vector<std::string>> ShellSplit(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\'') {
      const auto end = text.find('\'', i + 1);
      if (end == std::string::npos) {
        return InvalidArgumentError("--launcher_args: no closing quotation");
      }
      word += text.substr(i + 1, end - i - 1);
      in_word = true;
      i = end;
    } else if (c == '"') {
      ++i;
      for (; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\' && i + 1 < text.size() &&
            (text[i + 1] == '"' || text[i + 1] == '\\' || text[i + 1] == '$' ||
             text[i + 1] == '`')) {
          ++i;
        }
        word += text[i];
      }
      if (i >= text.size()) {
        return InvalidArgumentError("--launcher_args: no closing quotation");
      }
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 >= text.size()) {
        return InvalidArgumentError("--launcher_args: no escaped character");
      }
      word += text[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(word);
  return words;
}

std::vector<std::string> DeepSpeedNodeArgs(const DeepSpeedArgs& args,
                                           const std::string& world_info,
                                           int node_rank,
                                           const std::string& master_addr,
                                           bool remote) {
  std::vector<std::string> out = {
      "--world_info=" + world_info, "--node_rank=" + std::to_string(node_rank),
      "--master_addr=" + master_addr,
      "--master_port=" + std::to_string(args.master_port)};
  if (args.no_python) out.push_back("--no_python");
  if (args.module) out.push_back("--module");
  if (args.no_local_rank) out.push_back("--no_local_rank");
  if (args.elastic_training) {
    out.push_back("--elastic_training");
    out.push_back("--max_elastic_nodes=" +
                  std::to_string(args.max_elastic_nodes));
    out.push_back("--min_elastic_nodes=" +
                  std::to_string(args.min_elastic_nodes));
  }
  if (args.quiet) out.push_back("--quiet");
  if (!args.log_level.empty()) out.push_back("--log_level=" + args.log_level);
  if (remote) out.push_back("--stop_on_stdin_eof");
  // "--" keeps a user script that starts with '-' from reading as a flag.
  out.push_back("--");
  out.push_back(args.user_script);
  out.insert(out.end(), args.user_args.begin(), args.user_args.end());
  return out;
}

std::string RemoteShellCommand(
    const std::string& cwd, const std::map<std::string, std::string>& exports,
    const std::vector<std::string>& argv, const std::string& venv_script) {
  std::string cmd;
  if (!venv_script.empty()) cmd = ". " + ShellQuote(venv_script) + " && ";
  cmd += "cd " + ShellQuote(cwd) + " &&";
  if (!exports.empty()) {
    cmd += " export";
    for (const auto& [k, v] : exports) cmd += " " + ShellQuote(k + "=" + v);
    cmd += " &&";
  }
  cmd += " exec";
  for (const auto& word : argv) cmd += " " + ShellQuote(word);
  return cmd;
}

StatusOr<std::vector<std::string>> SshArgv(const DeepSpeedArgs& args,
                                           const std::string& host,
                                           const std::string& command) {
  if (host.empty() || host[0] == '-') {
    return InvalidArgumentError("host '" + host +
                                "' would be an ssh option, not a host");
  }
  std::vector<std::string> argv = {"ssh", "-o", "BatchMode=yes"};
  DDP_ASSIGN_OR_RETURN(std::vector<std::string> extra,
                       ShellSplit(args.launcher_args));
  argv.insert(argv.end(), extra.begin(), extra.end());
  if (args.ssh_port.has_value()) {
    argv.push_back("-p");
    argv.push_back(std::to_string(*args.ssh_port));
  }
  argv.push_back(host);
  argv.push_back(command);
  return argv;
}

}  // namespace ddprun::agent
