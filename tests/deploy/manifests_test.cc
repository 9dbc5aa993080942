// The Kubernetes manifests under docker/k8s are checked without a cluster:
// they parse, carry what a GPU training pod needs, and their ddprun command
// lines are accepted by ddprun's own parser.
#include <yaml-cpp/yaml.h>

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include "agent/cli/cli_parser.h"

namespace ddprun {
namespace {

namespace fs = std::filesystem;

const fs::path kK8sDir = fs::path(DDPRUN_SOURCE_DIR) / "docker" / "k8s";

std::vector<YAML::Node> LoadDocs(const std::string& file) {
  return YAML::LoadAllFromFile((kK8sDir / file).string());
}

YAML::Node FindKind(const std::vector<YAML::Node>& docs,
                    const std::string& kind) {
  for (const auto& d : docs) {
    if (d["kind"] && d["kind"].as<std::string>() == kind) return d;
  }
  FAIL("no " << kind << " document");
  return {};
}

// The pod template's first container.
YAML::Node Container(const YAML::Node& workload) {
  YAML::Node c = workload["spec"]["template"]["spec"]["containers"][0];
  REQUIRE(c.IsMap());
  return c;
}

std::vector<std::string> Strings(const YAML::Node& seq) {
  std::vector<std::string> out;
  for (const auto& n : seq) out.push_back(n.as<std::string>());
  return out;
}

// Parses a container's ddprun arguments with ddprun's parser. The trainer
// path only exists inside the image, so it is replaced by /bin/true, and
// `--nproc_per_node=gpu` (which needs a GPU on this machine) by `auto`, the
// same syntax class; everything else is parsed as written.
agent::LaunchOptions ParseContainerArgs(
    const YAML::Node& container, std::map<std::string, std::string> env) {
  REQUIRE(Strings(container["command"]) == std::vector<std::string>{"ddprun"});
  std::vector<std::string> args = Strings(container["args"]);
  bool saw_gpu = false;
  for (auto& a : args) {
    if (a == "--nproc_per_node=gpu") {
      a = "--nproc_per_node=auto";
      saw_gpu = true;
    }
  }
  CHECK(saw_gpu);
  auto entry = std::find_if(args.begin(), args.end(), [](const std::string& a) {
    return a.rfind("/usr/local/bin/", 0) == 0;
  });
  REQUIRE(entry != args.end());
  *entry = "/bin/true";
  env["PATH"] = "/usr/bin:/bin";
  auto parsed = agent::ParseCommandLine(args, env, /*legacy=*/false);
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  return parsed->options;
}

void CheckGpuPod(const YAML::Node& workload) {
  YAML::Node pod = workload["spec"]["template"]["spec"];
  YAML::Node c = Container(workload);
  CHECK(c["resources"]["limits"]["nvidia.com/gpu"].as<int>() >= 1);
  // The token comes from the Secret, never inline.
  bool token_from_secret = false;
  for (const auto& e : c["env"]) {
    if (e["name"].as<std::string>() == "DDPRUN_RDZV_TOKEN") {
      token_from_secret =
          e["valueFrom"]["secretKeyRef"]["name"].as<std::string>() ==
          "ddprun-rdzv-token";
    }
  }
  CHECK(token_from_secret);
  // NCCL and DataLoader workers need a large /dev/shm: an in-memory emptyDir.
  std::string shm_volume;
  for (const auto& m : c["volumeMounts"]) {
    if (m["mountPath"].as<std::string>() == "/dev/shm") {
      shm_volume = m["name"].as<std::string>();
    }
  }
  REQUIRE_FALSE(shm_volume.empty());
  bool shm_in_memory = false;
  for (const auto& v : pod["volumes"]) {
    if (v["name"].as<std::string>() == shm_volume) {
      shm_in_memory = v["emptyDir"]["medium"].as<std::string>() == "Memory";
    }
  }
  CHECK(shm_in_memory);
  CHECK(pod["securityContext"]["runAsNonRoot"].as<bool>());
}

// "host:port" the training pods must use: the rendezvous Service's DNS name.
std::string RendezvousServiceEndpoint() {
  auto docs = LoadDocs("rendezvous.yaml");
  YAML::Node svc = FindKind(docs, "Service");
  return svc["metadata"]["name"].as<std::string>() + "." +
         svc["metadata"]["namespace"].as<std::string>() +
         ".svc:" + std::to_string(svc["spec"]["ports"][0]["port"].as<int>());
}

TEST_CASE("Manifests: every file parses and names kind and name", "[deploy]") {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(kK8sDir)) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    INFO(entry.path().string());
    auto docs = YAML::LoadAllFromFile(entry.path().string());
    REQUIRE_FALSE(docs.empty());
    for (const auto& d : docs) {
      CHECK(d["apiVersion"].IsScalar());
      CHECK(d["kind"].IsScalar());
      if (d["kind"].as<std::string>() != "Kustomization") {
        CHECK(d["metadata"]["name"].IsScalar());
      }
    }
  }
  CHECK(files >= 5);
}

TEST_CASE("Manifests: kustomization names only files that exist", "[deploy]") {
  YAML::Node k = YAML::LoadFile((kK8sDir / "kustomization.yaml").string());
  REQUIRE(k["resources"].size() >= 4);
  for (const auto& r : k["resources"]) {
    INFO(r.as<std::string>());
    CHECK(fs::exists(kK8sDir / r.as<std::string>()));
  }
}

TEST_CASE("Manifests: rendezvous serves its port with the Secret's token",
          "[deploy]") {
  auto docs = LoadDocs("rendezvous.yaml");
  YAML::Node dep = FindKind(docs, "Deployment");
  YAML::Node svc = FindKind(docs, "Service");
  YAML::Node c = Container(dep);
  auto args = Strings(c["args"]);
  auto port_it = std::find(args.begin(), args.end(), "--port");
  REQUIRE(port_it != args.end());
  REQUIRE(port_it + 1 != args.end());
  const int port = std::stoi(*(port_it + 1));
  CHECK(c["ports"][0]["containerPort"].as<int>() == port);
  CHECK(svc["spec"]["ports"][0]["targetPort"].as<std::string>() ==
        c["ports"][0]["name"].as<std::string>());
  // The token from the Secret, in the environment as the agents get it (a
  // Secret volume's file is readable by others: ddprun refuses it).
  CHECK(std::find(args.begin(), args.end(), "--token_file") == args.end());
  REQUIRE(c["env"][0]["name"].as<std::string>() == "DDPRUN_RDZV_TOKEN");
  CHECK(c["env"][0]["valueFrom"]["secretKeyRef"]["name"].as<std::string>() ==
        "ddprun-rdzv-token");
  CHECK(c["env"][0]["valueFrom"]["secretKeyRef"]["key"].as<std::string>() ==
        "token");
}

TEST_CASE("Manifests: Indexed Job pods take the node rank from the index",
          "[deploy]") {
  auto docs = LoadDocs("train-indexed-job.yaml");
  YAML::Node job = FindKind(docs, "Job");
  CHECK(job["spec"]["completionMode"].as<std::string>() == "Indexed");
  CheckGpuPod(job);
  agent::LaunchOptions o =
      ParseContainerArgs(Container(job), {{"JOB_COMPLETION_INDEX", "1"}});
  CHECK(o.rdzv_backend == "grpc");
  CHECK(o.rdzv_endpoint == RendezvousServiceEndpoint());
  CHECK(o.node_rank == 1);
  CHECK(o.min_nodes == 1);
  CHECK(o.max_nodes == job["spec"]["completions"].as<int>());
  CHECK(o.max_restarts >= 1);
  CHECK(o.no_python);
}

TEST_CASE("Manifests: StatefulSet pods take the node rank from the ordinal",
          "[deploy]") {
  auto docs = LoadDocs("train-statefulset.yaml");
  YAML::Node sts = FindKind(docs, "StatefulSet");
  CheckGpuPod(sts);
  // The ordinal reaches ddprun as PET_NODE_RANK via the downward API.
  bool ordinal_env = false;
  for (const auto& e : Container(sts)["env"]) {
    if (e["name"].as<std::string>() == "PET_NODE_RANK") {
      ordinal_env =
          e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>().find(
              "pod-index") != std::string::npos;
    }
  }
  CHECK(ordinal_env);
  agent::LaunchOptions o =
      ParseContainerArgs(Container(sts), {{"PET_NODE_RANK", "1"}});
  CHECK(o.rdzv_backend == "grpc");
  CHECK(o.rdzv_endpoint == RendezvousServiceEndpoint());
  CHECK(o.node_rank == 1);
  CHECK(o.max_nodes == sts["spec"]["replicas"].as<int>());
  CHECK(o.no_python);
}

// Every document of every manifest (the kustomization aside).
std::vector<YAML::Node> AllDocs(const fs::path& dir) {
  std::vector<YAML::Node> all;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml" ||
        entry.path().filename() == "kustomization.yaml") {
      continue;
    }
    for (const auto& d : YAML::LoadAllFromFile(entry.path().string())) {
      all.push_back(d);
    }
  }
  return all;
}

bool IsWorkload(const YAML::Node& d) {
  const std::string kind = d["kind"].as<std::string>();
  return kind == "Deployment" || kind == "Job" || kind == "StatefulSet";
}

std::set<std::string> NamesOfKind(const std::vector<YAML::Node>& docs,
                                  const std::string& kind) {
  std::set<std::string> names;
  for (const auto& d : docs) {
    if (d["kind"].as<std::string>() == kind) {
      names.insert(d["metadata"]["name"].as<std::string>());
    }
  }
  return names;
}

// A path a container argument refers to ("--x=/p", "/p"), or "".
std::string PathOf(const std::string& arg) {
  const auto eq = arg.find('=');
  const std::string value = arg.rfind("--", 0) == 0 && eq != std::string::npos
                                ? arg.substr(eq + 1)
                                : arg;
  return value.rfind('/', 0) == 0 ? value : "";
}

// In `docs`: every volumeMount names a volume of its pod, every claimed PVC
// and every referenced Secret is defined in `docs`, and every path a
// container argument names lies in one of its mounts (except the image's
// own /usr/).
void CheckStorageWiring(const std::vector<YAML::Node>& docs) {
  const std::set<std::string> pvcs = NamesOfKind(docs, "PersistentVolumeClaim");
  const std::set<std::string> secrets = NamesOfKind(docs, "Secret");
  int workloads = 0;
  for (const auto& d : docs) {
    if (!IsWorkload(d)) continue;
    ++workloads;
    INFO(d["kind"].as<std::string>() << " " << d["metadata"]["name"]);
    YAML::Node pod = d["spec"]["template"]["spec"];
    std::set<std::string> volumes;
    for (const auto& v : pod["volumes"]) {
      volumes.insert(v["name"].as<std::string>());
      if (v["persistentVolumeClaim"]) {
        const auto claim =
            v["persistentVolumeClaim"]["claimName"].as<std::string>();
        INFO("claim " << claim);
        CHECK(pvcs.count(claim) == 1);
      }
      if (v["secret"]) {
        const auto secret = v["secret"]["secretName"].as<std::string>();
        INFO("secret " << secret);
        CHECK(secrets.count(secret) == 1);
      }
    }
    for (const auto& c : pod["containers"]) {
      std::vector<std::string> mounts;
      for (const auto& m : c["volumeMounts"]) {
        INFO("mount " << m["mountPath"]);
        CHECK(volumes.count(m["name"].as<std::string>()) == 1);
        mounts.push_back(m["mountPath"].as<std::string>());
      }
      for (const auto& e : c["env"]) {
        if (e["valueFrom"] && e["valueFrom"]["secretKeyRef"]) {
          const auto secret =
              e["valueFrom"]["secretKeyRef"]["name"].as<std::string>();
          INFO("env secret " << secret);
          CHECK(secrets.count(secret) == 1);
        }
      }
      std::vector<std::string> words = Strings(c["command"]);
      for (const auto& a : Strings(c["args"])) words.push_back(a);
      for (const std::string& word : words) {
        const std::string path = PathOf(word);
        if (path.empty() || path.rfind("/usr/", 0) == 0) continue;
        INFO("path " << path);
        CHECK(std::any_of(mounts.begin(), mounts.end(),
                          [&path](const std::string& m) {
                            return path == m || path.rfind(m + "/", 0) == 0;
                          }));
      }
    }
  }
  CHECK(workloads >= 1);
}

TEST_CASE("Manifests: mounts, claims and argument paths fit together",
          "[deploy]") {
  std::vector<YAML::Node> docs = AllDocs(kK8sDir);
  // The token Secret comes from the kustomization's generator (below).
  YAML::Node secret;
  secret["kind"] = "Secret";
  secret["metadata"]["name"] = "ddprun-rdzv-token";
  docs.push_back(secret);
  CheckStorageWiring(docs);
}

// Runs `cmd` through the shell; stdout into *out. Returns the exit code.
int Shell(const std::string& cmd, std::string* out) {
  const fs::path file = fs::temp_directory_path() /
                        ("ddprun_shell_" + std::to_string(::getpid()));
  const int rc = std::system((cmd + " >" + file.string() + " 2>&1").c_str());
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  fs::remove(file);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// The env file the kustomization's one secretGenerator reads.
std::string TokenEnvFile(const YAML::Node& kustomization) {
  REQUIRE(kustomization["secretGenerator"].size() == 1);
  YAML::Node gen = kustomization["secretGenerator"][0];
  REQUIRE(gen["envs"].size() == 1);
  return gen["envs"][0].as<std::string>();
}

TEST_CASE("Manifests: the kustomization ships no token", "[deploy]") {
  YAML::Node k = YAML::LoadFile((kK8sDir / "kustomization.yaml").string());
  // No resource is a Secret with a value in the repository.
  for (const auto& r : k["resources"]) {
    for (const auto& d :
         YAML::LoadAllFromFile((kK8sDir / r.as<std::string>()).string())) {
      INFO(r.as<std::string>());
      CHECK(d["kind"].as<std::string>() != "Secret");
    }
  }
  // The Secret is generated from a git-ignored env file, not from literals.
  const std::string env_file = TokenEnvFile(k);
  YAML::Node gen = k["secretGenerator"][0];
  CHECK(gen["name"].as<std::string>() == "ddprun-rdzv-token");
  CHECK_FALSE(gen["literals"]);
  std::ifstream ignore(fs::path(DDPRUN_SOURCE_DIR) / ".gitignore");
  std::stringstream ignored;
  ignored << ignore.rdbuf();
  CHECK(ignored.str().find("/docker/k8s/" + env_file + "\n") !=
        std::string::npos);
}

// kubectl is no package CI installs: a skip there too.
TEST_CASE("Manifests: `kubectl kustomize` builds only with the token file",
          "[deploy]") {
  std::string out;
  if (Shell("command -v kubectl", &out) != 0) {
    DDPRUN_SKIP("kubectl not found, `kubectl kustomize` not run");
  }
  const std::string env_file =
      TokenEnvFile(YAML::LoadFile((kK8sDir / "kustomization.yaml").string()));
  char tmpl[] = "/tmp/ddprun_kustomize_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const fs::path dir(tmpl);
  for (const auto& entry : fs::directory_iterator(kK8sDir)) {
    if (entry.path().extension() == ".yaml") {
      fs::copy_file(entry.path(), dir / entry.path().filename());
    }
  }
  // Without the token file the build stops (nothing deploys a known token).
  const int without = Shell("kubectl kustomize " + dir.string(), &out);
  CHECK(without != 0);
  CHECK(out.find(env_file) != std::string::npos);
  std::ofstream(dir / env_file) << "token=s3cr3t\n";
  const int with = Shell("kubectl kustomize " + dir.string(), &out);
  fs::remove_all(dir);
  INFO(out);
  REQUIRE(with == 0);
  std::vector<YAML::Node> built = YAML::LoadAll(out);
  YAML::Node secret = FindKind(built, "Secret");
  CHECK(secret["metadata"]["name"].as<std::string>() == "ddprun-rdzv-token");
  CHECK(secret["data"]["token"].as<std::string>() == "czNjcjN0");  // s3cr3t
  // What kubectl would apply is wired together on its own.
  CheckStorageWiring(built);
}

}  // namespace
}  // namespace ddprun
