// `siamese sweep` as an orchestrator, through the real binary: the launch scripts it writes
// train as written (torchrun with 2 CPU ranks; a Slurm batch script with Slurm's variables
// set by hand, since this machine has no Slurm), --jobs trains runs side by side and a
// re-run skips what finished, and a sweep under a launcher is refused.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "support/run_files.h"
#include "support/temp_dir.h"

using siamese::testing::TempDir;

namespace fs = std::filesystem;
using siamese::testing::losses;
using siamese::testing::read_all;

namespace {

// A distinct port per test process so parallel ctest runs do not collide.
int port(int offset) { return 21000 + static_cast<int>(::getpid() % 20000) + offset; }

int shell(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// One or two tiny runs of the quickstart config (2 layers, 6 steps).
std::string write_sweep(const TempDir& dir, const std::string& learning_rates) {
  return dir.write("sweep.yaml",
                   "base: " + std::string(SIAMESE_SOURCE_DIR) + "/configs/tiny/quickstart.yaml\n" +
                       "save_root: " + dir.file("runs") + "\n" +
                       "topologies: [hybrid_pre]\n"
                       "learning_rates: " +
                       learning_rates +
                       "\n"
                       "overrides: [--model.d_model=32, --model.n_heads=2, --model.n_layers=2,\n"
                       "  --model.max_sequence_length=32, --global_train_batch_size=4,\n"
                       "  --device_train_microbatch_size=2, --max_duration=6, --eval_interval=1000,\n"
                       "  --eval_subset_num_batches=1, --save_interval=1000]\n");
}

std::string sweep_cmd(const TempDir& dir, const std::string& args) {
  return "cd " + dir.file("") + " && env -u WORLD_SIZE -u RANK OMP_NUM_THREADS=1 " + SIAMESE_BINARY +
         " sweep " + dir.file("sweep.yaml") + " " + args + " > " + dir.file("sweep.log") + " 2>&1";
}

nlohmann::json run_record(const fs::path& run) { return nlohmann::json::parse(read_all(run / "run.json")); }

}  // namespace

TEST(SweepLaunch, TorchrunScriptTrainsOnTwoRanksAsWritten) {
  TempDir dir;
  write_sweep(dir, "[3.0e-3]");
  ASSERT_EQ(shell(sweep_cmd(dir, "--scripts scripts --launcher torchrun --nproc 2 --torchrun " +
                                     std::string(SIAMESE_TORCHRUN))),
            0)
      << read_all(dir.file("sweep.log"));
  const fs::path script = dir.file("scripts/hybrid_pre-lr0.003.sh");
  const std::string text = read_all(script);
  EXPECT_NE(text.find("--standalone --nnodes 1 --nproc_per_node 2"), std::string::npos) << text;
  EXPECT_NE(read_all(dir.file("scripts/all.sh")).find(script.string()), std::string::npos);
  ASSERT_EQ(shell("cd / && OMP_NUM_THREADS=1 " + script.string() + " > " + dir.file("run.log") + " 2>&1"), 0)
      << text << read_all(dir.file("run.log"));
  const fs::path run = dir.file("runs/hybrid_pre-lr0.003");
  EXPECT_EQ(losses(run).size(), 6u) << read_all(dir.file("run.log"));
  const auto record = run_record(run);
  EXPECT_EQ(record["world_size"], 2);
  EXPECT_EQ(record["launcher"], "torchrun");
  EXPECT_EQ(record["max_steps"], 6);
}

TEST(SweepLaunch, SlurmScriptTrainsOnTwoRanksWithSlurmsVariablesSetByHand) {
  TempDir dir;
  write_sweep(dir, "[3.0e-3]");
  ASSERT_EQ(shell(sweep_cmd(dir, "--scripts scripts --launcher slurm --nodes 1 --nproc 2 --gpus-per-node 0")),
            0)
      << read_all(dir.file("sweep.log"));
  const fs::path script = dir.file("scripts/hybrid_pre-lr0.003.sh");
  const std::string text = read_all(script);
  for (const char* line : {"#SBATCH --job-name=hybrid_pre-lr0.003\n", "#SBATCH --nodes=1\n",
                           "#SBATCH --ntasks-per-node=2\n", "srun --kill-on-bad-exit=1 "})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  EXPECT_EQ(text.find("--gpus-per-node"), std::string::npos) << text;  // CPU ranks
  // srun's part, as Slurm documents it: start SLURM_NTASKS copies of the command, each with
  // its SLURM_PROCID and SLURM_LOCALID. MASTER_ADDR is given because scontrol is absent.
  fs::create_directories(dir.file("bin"));
  dir.write(
      "bin/srun",
      "#!/bin/sh\nwhile [ \"${1#--}\" != \"$1\" ]; do shift; done\ni=0; pids=\"\"\n"
      "while [ $i -lt \"$SLURM_NTASKS\" ]; do SLURM_PROCID=$i SLURM_LOCALID=$i \"$@\" & pids=\"$pids $!\"; "
      "i=$((i+1)); done\nrc=0; for p in $pids; do wait $p || rc=$?; done; exit $rc\n");
  fs::permissions(dir.file("bin/srun"), fs::perms::owner_all);
  const std::string env = "PATH=" + dir.file("bin") +
                          ":$PATH SLURM_JOB_ID=" + std::to_string(port(0) - 20000) +
                          " SLURM_JOB_NODELIST=localhost SLURM_NNODES=1 SLURM_NTASKS=2 MASTER_ADDR=127.0.0.1 "
                          "OMP_NUM_THREADS=1";
  ASSERT_EQ(shell("cd / && " + env + " bash " + script.string() + " > " + dir.file("run.log") + " 2>&1"), 0)
      << text << read_all(dir.file("run.log"));
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
  ASSERT_EQ(shell(sweep_cmd(dir, "--jobs 2")), 0) << read_all(dir.file("sweep.log"));
  for (const char* name : {"hybrid_pre-lr0.001", "hybrid_pre-lr0.003"}) {
    const fs::path run = dir.file(std::string("runs/") + name);
    EXPECT_EQ(losses(run).size(), 6u) << name << "\n" << read_all(run / "train.log");
    EXPECT_NE(read_all(run / "train.log").find("done: 6 steps"), std::string::npos);
  }
  const std::string first = read_all(dir.file("sweep.log"));
  EXPECT_NE(first.find("started hybrid_pre-lr0.001"), std::string::npos) << first;
  ASSERT_EQ(shell(sweep_cmd(dir, "--jobs 2")), 0) << read_all(dir.file("sweep.log"));
  const std::string again = read_all(dir.file("sweep.log"));
  EXPECT_NE(again.find("hybrid_pre-lr0.001 finished already, skipped"), std::string::npos) << again;
  EXPECT_NE(again.find("hybrid_pre-lr0.003 finished already, skipped"), std::string::npos) << again;
  EXPECT_EQ(again.find("started"), std::string::npos) << again;
}

TEST(SweepLaunch, ASweepUnderALauncherIsRefused) {
  TempDir dir;
  write_sweep(dir, "[1.0e-3]");
  const int rc = shell("cd " + dir.file("") + " && RANK=0 WORLD_SIZE=2 " + SIAMESE_BINARY + " sweep " +
                       dir.file("sweep.yaml") + " > " + dir.file("sweep.log") + " 2>&1");
  EXPECT_NE(rc, 0);
  const std::string log = read_all(dir.file("sweep.log"));
  EXPECT_NE(log.find("every rank would run the whole sweep"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir.file("runs")));
}
