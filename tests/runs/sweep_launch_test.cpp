// `siamese sweep` as an orchestrator, through the real binary: the launch scripts it writes
// train as written (torchrun with 2 CPU ranks; a Slurm batch script with Slurm's variables
// set by hand, since this machine has no Slurm), --jobs trains runs side by side and a
// re-run skips what finished, and a sweep under a launcher is refused.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/process.h"
#include "support/run_files.h"
#include "support/temp_dir.h"

using siamese::testing::Limits;
using siamese::testing::TempDir;

namespace fs = std::filesystem;
using siamese::testing::losses;
using siamese::testing::read_all;

namespace {

// A distinct port per test process so parallel ctest runs do not collide.
int port(int offset) { return 21000 + static_cast<int>(::getpid() % 20000) + offset; }

// One or two tiny runs of the quickstart config (2 layers, 6 steps).
std::string write_sweep(const TempDir& dir, const std::string& learning_rates, int steps = 6) {
  return dir.write("sweep.yaml",
                   "base: " + std::string(SIAMESE_SOURCE_DIR) + "/configs/tiny/quickstart.yaml\n" +
                       "save_root: " + dir.file("runs") + "\n" +
                       "topologies: [hybrid_pre]\n"
                       "learning_rates: " +
                       learning_rates +
                       "\n"
                       "overrides: [--model.d_model=32, --model.n_heads=2, --model.n_layers=2,\n"
                       "  --model.max_sequence_length=32, --global_train_batch_size=4,\n"
                       "  --device_train_microbatch_size=2, --max_duration=" +
                       std::to_string(steps) +
                       ", --eval_interval=1000,\n"
                       "  --eval_subset_num_batches=1, --save_interval=1000]\n");
}

// `siamese sweep` of the test's sweep.yaml from its folder, as a user starts it (no launcher's
// RANK or WORLD_SIZE), its output in sweep.log.
Limits sweep_limits(const TempDir& dir) {
  Limits limits;
  limits.cwd = dir.file("");
  limits.env = {{"WORLD_SIZE", std::nullopt}, {"RANK", std::nullopt}};
  limits.timeout_seconds = 1800;
  return limits;
}

int run_sweep(const TempDir& dir, const std::string& args) {
  const std::vector<std::string> words =
      siamese::testing::words("sweep " + dir.file("sweep.yaml") + " " + args);
  return siamese::testing::run_siamese(words, dir.file("sweep.log"), sweep_limits(dir)).exit_code;
}

// A launch script the sweep wrote, run from / with `env`, its output in run.log.
int run_script(const TempDir& dir, const std::vector<std::string>& argv,
               const std::map<std::string, std::optional<std::string>>& env = {}) {
  Limits limits;
  limits.cwd = "/";
  limits.env = env;
  limits.timeout_seconds = 1800;
  return siamese::testing::run(argv, dir.file("run.log"), limits).exit_code;
}

nlohmann::json run_record(const fs::path& run) { return nlohmann::json::parse(read_all(run / "run.json")); }

}  // namespace

TEST(SweepLaunch, TorchrunScriptTrainsOnTwoRanksAsWritten) {
  TempDir dir;
  write_sweep(dir, "[3.0e-3]");
  ASSERT_EQ(run_sweep(dir, "--scripts scripts --launcher torchrun --nproc 2 --torchrun " +
                               std::string(SIAMESE_TORCHRUN)),
            0)
      << read_all(dir.file("sweep.log"));
  const fs::path script = dir.file("scripts/hybrid_pre-lr0.003.sh");
  const std::string text = read_all(script);
  EXPECT_NE(text.find("--standalone --nnodes 1 --nproc_per_node 2"), std::string::npos) << text;
  EXPECT_NE(read_all(dir.file("scripts/all.sh")).find(script.string()), std::string::npos);
  ASSERT_EQ(run_script(dir, {script.string()}), 0) << text << read_all(dir.file("run.log"));
  const fs::path run = dir.file("runs/hybrid_pre-lr0.003");
  EXPECT_EQ(losses(run).size(), 6u) << read_all(dir.file("run.log"));
  const auto record = run_record(run);
  EXPECT_EQ(record["world_size"], 2);
  EXPECT_EQ(record["launcher"], "torchrun");
  EXPECT_EQ(record["max_steps"], 6);
  // The machine the digits belong to: the CPU /proc/cpuinfo names and ATen's kernel level.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, cpu;
  while (cpu.empty() && std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) cpu = line.substr(line.find_first_not_of(' ', line.find(':') + 1));
  EXPECT_EQ(record["cpu"], cpu);
  EXPECT_FALSE(record["cpu_capability"].get<std::string>().empty());
}

// Without --torchrun the scripts call the clone's scripts/torchrun by its absolute path: the
// torchrun of the build's torch is not on PATH, and a bare `torchrun` exited 127.
TEST(SweepLaunch, TorchrunScriptsCallTheClonesScriptsTorchrunByDefault) {
  const std::string torchrun =
      (fs::canonical(SIAMESE_BINARY).parent_path().parent_path() / "scripts" / "torchrun").string();
  if (!fs::exists(torchrun)) GTEST_SKIP() << "the binary is not in a build folder of a clone";
  TempDir dir;
  write_sweep(dir, "[3.0e-3]");
  ASSERT_EQ(run_sweep(dir, "--scripts scripts --launcher torchrun --nproc 2"), 0)
      << read_all(dir.file("sweep.log"));
  const std::string text = read_all(dir.file("scripts/hybrid_pre-lr0.003.sh"));
  EXPECT_NE(text.find(torchrun + " --standalone"), std::string::npos) << text;
}

TEST(SweepLaunch, SlurmScriptTrainsOnTwoRanksWithSlurmsVariablesSetByHand) {
  TempDir dir;
  write_sweep(dir, "[3.0e-3]");
  ASSERT_EQ(run_sweep(dir,
                      "--scripts scripts --launcher slurm --nodes 1 --nproc 2 --gpus-per-node 0 "
                      "--partition cpu --account proj42 --time 1-00:00:00 --cpus-per-task 4"),
            0)
      << read_all(dir.file("sweep.log"));
  const fs::path script = dir.file("scripts/hybrid_pre-lr0.003.sh");
  const std::string text = read_all(script);
  for (const char* line :
       {"#SBATCH --job-name=hybrid_pre-lr0.003\n", "#SBATCH --nodes=1\n", "#SBATCH --ntasks-per-node=2\n",
        "#SBATCH --partition=cpu\n", "#SBATCH --account=proj42\n", "#SBATCH --time=1-00:00:00\n",
        "#SBATCH --cpus-per-task=4\n", "a shared filesystem", "srun --kill-on-bad-exit=1 "})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  EXPECT_EQ(text.find("#SBATCH --gpus-per-node"), std::string::npos) << text;  // CPU ranks
  // srun's part, as Slurm documents it: start SLURM_NTASKS copies of the command, each with
  // its SLURM_PROCID and SLURM_LOCALID. MASTER_ADDR is given because scontrol is absent.
  fs::create_directories(dir.file("bin"));
  dir.write(
      "bin/srun",
      "#!/bin/sh\nwhile [ \"${1#--}\" != \"$1\" ]; do shift; done\ni=0; pids=\"\"\n"
      "while [ $i -lt \"$SLURM_NTASKS\" ]; do SLURM_PROCID=$i SLURM_LOCALID=$i \"$@\" & pids=\"$pids $!\"; "
      "i=$((i+1)); done\nrc=0; for p in $pids; do wait $p || rc=$?; done; exit $rc\n");
  fs::permissions(dir.file("bin/srun"), fs::perms::owner_all);
  const std::map<std::string, std::optional<std::string>> slurm = {
      {"PATH", dir.file("bin") + ":" + std::getenv("PATH")},
      {"SLURM_JOB_ID", std::to_string(port(0) - 20000)},
      {"SLURM_JOB_NODELIST", "localhost"},
      {"SLURM_NNODES", "1"},
      {"SLURM_NTASKS", "2"},
      {"MASTER_ADDR", "127.0.0.1"}};
  ASSERT_EQ(run_script(dir, {"bash", script.string()}, slurm), 0) << text << read_all(dir.file("run.log"));
  const fs::path run = dir.file("runs/hybrid_pre-lr0.003");
  EXPECT_EQ(losses(run).size(), 6u) << read_all(dir.file("run.log"));
  const auto record = run_record(run);
  EXPECT_EQ(record["world_size"], 2);
  EXPECT_EQ(record["launcher"], "slurm");
  EXPECT_EQ(record["slurm_job_nodelist"], "localhost");
}

TEST(SweepLaunch, JobsTrainRunsSideBySideAndARerunSkipsWhatFinished) {
  TempDir dir;
  write_sweep(dir, "[1.0e-3, 3.0e-3]");
  ASSERT_EQ(run_sweep(dir, "--jobs 2"), 0) << read_all(dir.file("sweep.log"));
  for (const char* name : {"hybrid_pre-lr0.001", "hybrid_pre-lr0.003"}) {
    const fs::path run = dir.file(std::string("runs/") + name);
    EXPECT_EQ(losses(run).size(), 6u) << name << "\n" << read_all(run / "train.log");
    EXPECT_NE(read_all(run / "train.log").find("done: 6 steps"), std::string::npos);
  }
  const std::string first = read_all(dir.file("sweep.log"));
  EXPECT_NE(first.find("started hybrid_pre-lr0.001"), std::string::npos) << first;
  ASSERT_EQ(run_sweep(dir, "--jobs 2"), 0) << read_all(dir.file("sweep.log"));
  const std::string again = read_all(dir.file("sweep.log"));
  EXPECT_NE(again.find("hybrid_pre-lr0.001 finished already, skipped"), std::string::npos) << again;
  EXPECT_NE(again.find("hybrid_pre-lr0.003 finished already, skipped"), std::string::npos) << again;
  EXPECT_EQ(again.find("started"), std::string::npos) << again;
}

TEST(SweepLaunch, ASweepUnderALauncherIsRefused) {
  TempDir dir;
  write_sweep(dir, "[1.0e-3]");
  Limits launched = sweep_limits(dir);
  launched.env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}};
  EXPECT_NE(siamese::testing::run_siamese({"sweep", dir.file("sweep.yaml")}, dir.file("sweep.log"), launched)
                .exit_code,
            0);
  const std::string log = read_all(dir.file("sweep.log"));
  EXPECT_NE(log.find("every rank would run the whole sweep"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir.file("runs")));
}

// SIGTERM to a sweep reaches its children: each saves a checkpoint and stops, the sweep
// waits for them and exits non-zero (4, "stopped"), so nothing counts the runs as finished.
TEST(SweepLaunch, SigtermStopsEveryChildWithACheckpointAndExitsStopped) {
  TempDir dir;
  write_sweep(dir, "[1.0e-3, 2.0e-3]", 100000);
  siamese::testing::Child sweep({"sweep", dir.file("sweep.yaml"), "--jobs", "2"}, dir.file("sweep.log"),
                                sweep_limits(dir));
  const fs::path runs[] = {dir.file("runs/hybrid_pre-lr0.001"), dir.file("runs/hybrid_pre-lr0.002")};
  auto training = [&](const fs::path& run) { return !losses(run).empty(); };
  for (int i = 0; i < 1200 && !(training(runs[0]) && training(runs[1])); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(training(runs[0]) && training(runs[1])) << read_all(dir.file("sweep.log"));
  sweep.kill(SIGTERM);
  const auto stopped = sweep.wait();
  EXPECT_EQ(stopped.signal, 0) << stopped.output;
  EXPECT_EQ(stopped.exit_code, 4) << stopped.output;
  const std::string log = stopped.output;
  EXPECT_NE(log.find("stopped by signal"), std::string::npos) << log;
  for (const auto& run : runs) {
    bool saved = false;
    for (const auto& e : fs::directory_iterator(run))
      saved = saved || e.path().filename().string().rfind("step", 0) == 0;
    EXPECT_TRUE(saved) << run << ": no checkpoint\n" << read_all(run / "train.log");
    EXPECT_NE(read_all(run / "train.log").find("saving at step"), std::string::npos)
        << read_all(run / "train.log");
  }
}
