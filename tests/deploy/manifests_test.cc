// The Kubernetes manifests under docker/k8s are checked without a cluster:
// they parse, carry what a GPU training pod needs, and their ddprun command
// lines are accepted by ddprun's own parser.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/cli_parser.h"

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

TEST_CASE("Manifests: rendezvous serves its port with the mounted token",
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
  // The token file lies in the Secret volume's mount.
  auto tf = std::find(args.begin(), args.end(), "--token_file");
  REQUIRE(tf != args.end());
  const std::string mount = c["volumeMounts"][0]["mountPath"].as<std::string>();
  CHECK((tf + 1)->rfind(mount + "/", 0) == 0);
  CHECK(dep["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"]
            .as<std::string>() == "ddprun-rdzv-token");
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

}  // namespace
}  // namespace ddprun
