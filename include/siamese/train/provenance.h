#pragma once
// What produced a run, written by rank 0 to <save_folder>/run.json at every (re)start: the
// code (git commit, -dirty for uncommitted changes), the command line, LibTorch / CUDA / NCCL
// versions, the world (size, launcher, hosts), the optimizer's parameter groups, the parent of
// a decay branch, a data mixture's plan and the planned length in steps, which `siamese report` uses to tell
// a finished run from one that stopped early.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace siamese::train {

struct LaunchFacts {
  int64_t max_steps = 0;
  int64_t start_step = 0;  // > 0 when resumed
  int world_size = 1;
  std::string decay_from;  // the stable run's checkpoint a decay branch starts from, or empty
  nlohmann::json param_groups = nlohmann::json::array();  // train::groups_json
  nlohmann::json mixture = nullptr;  // data.source_mixture's plan (data::MixturePlan::to_json)
};

void write_provenance(const std::filesystem::path& save_folder, const LaunchFacts& facts);

// The process's own command line, recorded once by main().
void record_command_line(int argc, char** argv);
const std::vector<std::string>& command_line();

}  // namespace siamese::train
