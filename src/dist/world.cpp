#include "siamese/dist/world.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "siamese/common/error.h"

namespace siamese::dist {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int env_int(const char* name, int fallback) {
  auto v = env(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    int x = std::stoi(*v, &used);
    if (used == v->size() && x >= 0) return x;
  } catch (const std::exception&) {
  }
  throw Error("environment variable " + std::string(name) + "=\"" + *v + "\" is not a non-negative integer",
              "environment", "unset it or give a number; it is set by torchrun or srun");
}

// Slurm's tasks per node: SLURM_NTASKS_PER_NODE where the job asked for a number, else the
// first count of SLURM_TASKS_PER_NODE ("4(x2)", or "4,2" for an uneven job: 0, unknown).
int slurm_tasks_per_node() {
  if (env("SLURM_NTASKS_PER_NODE")) return env_int("SLURM_NTASKS_PER_NODE", 0);
  const auto spec = env("SLURM_TASKS_PER_NODE");
  if (!spec || spec->find(',') != std::string::npos) return 0;
  try {
    const int n = std::stoi(*spec);
    return n > 0 ? n : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

World detect_world() {
  World w;
  if (env("RANK") || env("WORLD_SIZE")) {
    w.launcher = "torchrun";
    w.rank = env_int("RANK", 0);
    w.size = env_int("WORLD_SIZE", 1);
    w.local_rank = env_int("LOCAL_RANK", 0);
    w.local_size = env_int("LOCAL_WORLD_SIZE", 0);  // unset: unknown, as under a heterogeneous Slurm job
    auto agent = env("TORCHELASTIC_USE_AGENT_STORE");
    w.agent_hosts_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    w.launcher = "slurm";
    w.rank = env_int("SLURM_PROCID", 0);
    w.size = env_int("SLURM_NTASKS", 1);
    w.local_rank = env_int("SLURM_LOCALID", 0);
    w.local_size = slurm_tasks_per_node();
  }
  if (auto addr = env("MASTER_ADDR")) w.master_addr = *addr;
  w.master_port = env_int("MASTER_PORT", w.master_port);
  if (w.size < 1 || w.rank >= w.size) {
    throw Error("rank " + std::to_string(w.rank) + " is outside world size " + std::to_string(w.size),
                "environment (" + w.launcher + ")", "check RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS");
  }
  if (w.size > 1 && w.launcher == "slurm" && !env("MASTER_ADDR")) {
    throw Error("Slurm launch without MASTER_ADDR", "environment",
                "export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1) "
                "and MASTER_PORT before srun (README: Distributed training)");
  }
  return w;
}

void die_with_launcher() {
  if (!env("TORCHELASTIC_RUN_ID")) return;
  // The agent is our parent (it starts workers with Popen). If it dies between the two reads
  // of the parent, the signal was not yet armed: the parent changed, so die now.
  const pid_t agent = ::getppid();
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    spdlog::warn(
        "cannot tie this rank to torchrun's agent ({}): if the agent is killed, stop the ranks yourself",
        std::strerror(errno));
    return;
  }
  if (::getppid() != agent) ::raise(SIGKILL);
}

namespace {
std::atomic<bool> g_joined{false};
}  // namespace

bool joined_ranks() { return g_joined.load(); }
void mark_joined_ranks() { g_joined.store(true); }

void report_exit(int code) {
  const auto dir = env("SIAMESE_EXIT_DIR");
  const auto local_rank = env("LOCAL_RANK");
  if (!dir || !local_rank) return;
  // Written whole under a temporary name, then renamed: the wrapper never reads half a line.
  const std::string path = *dir + "/" + *local_rank;
  if (std::FILE* f = std::fopen((path + ".tmp").c_str(), "w")) {
    std::fprintf(f, "%d %s\n", code, env("LOCAL_WORLD_SIZE").value_or("0").c_str());
    if (std::fclose(f) == 0) std::rename((path + ".tmp").c_str(), path.c_str());
  }
}

}  // namespace siamese::dist
