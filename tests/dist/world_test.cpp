// Where a process sits in a launch, read from torchrun's and srun's environment: HYBRID_SHARD
// takes its node size from here, so a wrong parse would shard across nodes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "siamese/common/error.h"
#include "siamese/dist/world.h"

using siamese::dist::detect_world;
namespace dist = siamese::dist;

namespace {

// Sets `vars` for the length of a scope and clears every launcher variable around it.
class LaunchEnv {
 public:
  explicit LaunchEnv(const std::map<std::string, std::string>& vars) {
    clear();
    for (const auto& [name, value] : vars) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~LaunchEnv() { clear(); }

 private:
  static void clear() {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                             "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "SLURM_PROCID", "SLURM_NTASKS",
                             "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})
      ::unsetenv(name);
  }
};

}  // namespace

TEST(World, NodeSizeComesFromTheLauncher) {
  {
    const LaunchEnv env({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}});
    const auto w = dist::detect_world();
    EXPECT_EQ(w.launcher, "torchrun");
    EXPECT_EQ(w.rank, 5);
    EXPECT_EQ(w.local_size, 4);
  }
  const std::map<std::string, std::string> slurm = {
      {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"MASTER_ADDR", "node1"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    extra.insert(slurm.begin(), slurm.end());
    const LaunchEnv env(extra);
    const auto w = dist::detect_world();
    EXPECT_EQ(w.launcher, "slurm");
    return w.local_size;
  };
  EXPECT_EQ(with({{"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_TASKS_PER_NODE", "4(x2)"}}), 2);
  EXPECT_EQ(with({{"SLURM_TASKS_PER_NODE", "4(x2)"}}), 4);
  EXPECT_EQ(with({{"SLURM_TASKS_PER_NODE", "4"}}), 4);
  EXPECT_EQ(with({{"SLURM_TASKS_PER_NODE", "4,2(x2)"}}), 0);  // uneven nodes: unknown
  EXPECT_EQ(with({}), 0);
  {
    const LaunchEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "two"}});
    EXPECT_THROW(dist::detect_world(), siamese::Error);
  }
}
