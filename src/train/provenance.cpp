#include "siamese/train/provenance.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "siamese/common/build_info.h"
#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "siamese/dist/world.h"

namespace siamese::train {

namespace fs = std::filesystem;

namespace {

std::vector<std::string>& stored_command_line() {
  static std::vector<std::string> args;
  return args;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The CPU's name as the kernel reports it ("AMD EPYC ...", "Intel(R) Xeon(R) ..."); empty
// where /proc/cpuinfo has none.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? "" : line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "";
}

}  // namespace

void record_command_line(int argc, char** argv) { stored_command_line().assign(argv, argv + argc); }

const std::vector<std::string>& command_line() { return stored_command_line(); }

void write_provenance(const fs::path& save_folder, const LaunchFacts& facts) {
  const BuildInfo b = build_info();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const nlohmann::json j = {
      {"started_at", utc_now()},
      {"max_steps", facts.max_steps},
      {"start_step", facts.start_step},
      {"decay_from", facts.decay_from},
      {"param_groups", facts.param_groups},
      {"mixture", facts.mixture},
      {"command_line", command_line()},
      {"working_directory", fs::current_path().string()},
      {"git_commit", b.git_commit},
      {"libtorch", b.torch},
      {"cuda_compiled", b.cuda_compiled},
      {"cuda_runtime", b.cuda_runtime},
      {"cudnn", b.cudnn},
      {"nccl", b.nccl},
      {"cuda_devices", b.cuda_devices},
      {"world_size", facts.world_size},
      {"launcher", dist::detect_world().launcher},
      {"host", host},
      // Both change step times, and the thread count changes the bits of reductions.
      {"intra_op_threads", at::get_num_threads()},
      // The CPU and the kernels chosen for it: MKL and ATen pick other code paths by vendor
      // and instruction set, so a run's digits hold on this kind of CPU only
      // (docs/results.md, "What varies between machines").
      {"cpu", cpu_model()},
      {"cpu_capability", at::get_cpu_capability()},
      {"mkl_cbwr", env_or_empty("MKL_CBWR")},
      {"aten_cpu_capability", env_or_empty("ATEN_CPU_CAPABILITY")},
      {"omp_wait_policy", env_or_empty("OMP_WAIT_POLICY")},
      {"gomp_spincount", env_or_empty("GOMP_SPINCOUNT")},
      // Every host of a Slurm job; under torchrun the ranks' hosts are those of the launch.
      {"slurm_job_nodelist", env_or_empty("SLURM_JOB_NODELIST")},
      {"slurm_job_id", env_or_empty("SLURM_JOB_ID")},
  };
  fs::create_directories(save_folder);
  write_file_atomically(save_folder / "run.json", j.dump(2) + "\n");
}

}  // namespace siamese::train
