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
#include <map>
#include <sstream>
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
std::string write_sweep(const TempDir& dir, const std::string& learning_rates, int steps = 6,
                        const std::string& topologies = "[hybrid_pre]") {
  return dir.write("sweep.yaml",
                   "base: " + std::string(SIAMESE_SOURCE_DIR) + "/configs/tiny/quickstart.yaml\n" +
                       "save_root: " + dir.file("runs") + "\n" + "topologies: " + topologies +
                       "\n"
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

// --max-restarts in a Slurm script: srun has no restart loop, so after a crash the job requeues
// itself (scontrol requeue, as Slurm's --requeue jobs do), and the requeued job, run again with
// SLURM_RESTART_COUNT 1, resumes from the newest intact checkpoint to the losses of a run that
// never crashed. The srun and scontrol here do what Slurm documents and no more: srun starts
// SLURM_NTASKS copies (and on its first call kills them all with SIGKILL once step4 exists, a
// lost node), scontrol writes down what it was asked. Every checkpoint is kept: with the
// quickstart's one, step4 lived two steps, and a loaded CI machine polled past it and hung.
TEST(SweepLaunch, ACrashedSlurmJobRequeuesItselfAndResumes) {
  const std::string srun =
      "#!/bin/sh\nwhile [ \"${1#--}\" != \"$1\" ]; do shift; done\ni=0; pids=\"\"\n"
      "while [ $i -lt \"$SLURM_NTASKS\" ]; do SLURM_PROCID=$i SLURM_LOCALID=$i \"$@\" & pids=\"$pids $!\"; "
      "i=$((i+1)); done\n"
      "if [ ! -e \"$CRASH_MARK\" ]; then touch \"$CRASH_MARK\"; "
      "n=0; while [ ! -d \"$CRASH_AFTER\" ] && [ $n -lt 6000 ]; do sleep 0.05; n=$((n+1)); done; "
      "kill -9 $pids; fi\n"
      "rc=0; for p in $pids; do wait $p || rc=$?; done; exit $rc\n";
  const auto slurm_run = [&](TempDir& dir, bool crash) {
    dir.write("sweep.yaml",
              "base: " + std::string(SIAMESE_SOURCE_DIR) + "/configs/tiny/quickstart.yaml\n" +
                  "save_root: " + dir.file("runs") +
                  "\ntopologies: [hybrid_pre]\nlearning_rates: [3.0e-3]\n"
                  "overrides: [--model.d_model=32, --model.n_heads=2, --model.n_layers=2,\n"
                  "  --model.max_sequence_length=32, --global_train_batch_size=4,\n"
                  "  --device_train_microbatch_size=2, --max_duration=16, --eval_interval=1000,\n"
                  "  --eval_subset_num_batches=1, --save_interval=2,\n"
                  "  --save_num_checkpoints_to_keep=-1]\n");
    EXPECT_EQ(run_sweep(dir,
                        "--scripts scripts --launcher slurm --nodes 1 --nproc 2 --gpus-per-node 0 "
                        "--max-restarts 2"),
              0)
        << read_all(dir.file("sweep.log"));
    fs::create_directories(dir.file("bin"));
    dir.write("bin/srun", srun);
    dir.write("bin/scontrol", "#!/bin/sh\necho \"$@\" >> \"$SCONTROL_LOG\"\n");
    fs::permissions(dir.file("bin/srun"), fs::perms::owner_all);
    fs::permissions(dir.file("bin/scontrol"), fs::perms::owner_all);
    if (!crash) dir.write("crashed", "");
    return std::map<std::string, std::optional<std::string>>{
        {"PATH", dir.file("bin") + ":" + std::getenv("PATH")},
        {"SLURM_JOB_ID", std::to_string(port(0) - 20000)},
        {"SLURM_JOB_NODELIST", "localhost"},
        {"SLURM_NNODES", "1"},
        {"SLURM_NTASKS", "2"},
        {"MASTER_ADDR", "127.0.0.1"},
        {"CRASH_MARK", dir.file("crashed")},
        {"CRASH_AFTER", dir.file("runs/hybrid_pre-lr0.003/step4")},
        {"SCONTROL_LOG", dir.file("scontrol.log")}};
  };
  TempDir clean, crashed;
  const fs::path script = "scripts/hybrid_pre-lr0.003.sh";
  auto env = slurm_run(clean, false);
  const std::string text = read_all(clean.file(script.string()));
  for (const char* line : {"#SBATCH --requeue\n", "#SBATCH --open-mode=append\n", "scontrol requeue"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  // srun returns 137 when --kill-on-bad-exit kills the ranks still running: a crash's code.
  EXPECT_EQ(text.find("--kill-on-bad-exit"), std::string::npos) << text;
  ASSERT_EQ(run_script(clean, {"bash", clean.file(script.string())}, env), 0)
      << read_all(clean.file("run.log"));
  EXPECT_FALSE(fs::exists(clean.file("scontrol.log")));

  env = slurm_run(crashed, true);
  EXPECT_EQ(run_script(crashed, {"bash", crashed.file(script.string())}, env), 137)
      << read_all(crashed.file("run.log"));
  EXPECT_EQ(read_all(crashed.file("scontrol.log")), "requeue " + *env["SLURM_JOB_ID"] + "\n");
  EXPECT_NE(read_all(crashed.file("run.log")).find("requeueing job"), std::string::npos);
  env["SLURM_RESTART_COUNT"] = "1";
  ASSERT_EQ(run_script(crashed, {"bash", crashed.file(script.string())}, env), 0)
      << read_all(crashed.file("run.log"));
  EXPECT_NE(read_all(crashed.file("run.log")).find("resumed from"), std::string::npos);
  const auto resumed = losses(crashed.file("runs/hybrid_pre-lr0.003"));
  EXPECT_EQ(resumed.size(), 16u);
  EXPECT_EQ(resumed, losses(clean.file("runs/hybrid_pre-lr0.003")));

  // Bad input is not requeued: 3 tasks do not divide the global batch of 4, and every rank
  // refuses it (exit 2).
  TempDir bad;
  env = slurm_run(bad, false);
  env["SLURM_NTASKS"] = "3";
  EXPECT_EQ(run_script(bad, {"bash", bad.file(script.string())}, env), 2) << read_all(bad.file("run.log"));
  EXPECT_FALSE(fs::exists(bad.file("scontrol.log"))) << read_all(bad.file("scontrol.log"));
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

// Before the first run: one measured step of each distinct model (runs of one topology at
// two learning rates share it), the steps and total, and one warning for the runs that end
// inside their warmup (6 steps of the quickstart's 50). --no-estimate starts at once.
TEST(SweepLaunch, ASweepSaysWhatItCostsAndWhichRunsEndInsideTheirWarmupBeforeTheFirstRun) {
  TempDir dir;
  write_sweep(dir, "[1.0e-3, 3.0e-3]", 6, "[pre, hybrid_pre]");
  ASSERT_EQ(run_sweep(dir, ""), 0) << read_all(dir.file("sweep.log"));
  const std::string log = read_all(dir.file("sweep.log"));
  const auto first_run = log.find("run 1 of 4");
  ASSERT_NE(first_run, std::string::npos) << log;
  for (const std::string expected :
       {"measuring a step of each distinct model of the 4 runs to train",
        "pre-lr0.001 and 1 more run of its model: ", "hybrid_pre-lr0.001 and 1 more run of its model: ",
        " s a step, 12 steps, about ", "of training steps for 4 runs of 2 models",
        "4 of 4 runs end inside their warmup and never train at the learning rate they are named for "
        "(pre-lr0.001, pre-lr0.003, hybrid_pre-lr0.001, hybrid_pre-lr0.003); pre-lr0.001: the run ends at 6 "
        "steps, inside scheduler.t_warmup 50"}) {
    const auto at = log.find(expected);
    EXPECT_NE(at, std::string::npos) << expected << "\n" << log;
    EXPECT_LT(at, first_run) << expected;
  }
  ASSERT_EQ(run_sweep(dir, "--no-estimate --set scheduler.t_warmup=2 --out " + dir.file("again")), 0)
      << read_all(dir.file("sweep.log"));
  const std::string again = read_all(dir.file("sweep.log"));
  EXPECT_EQ(again.find("measuring"), std::string::npos) << again;
  EXPECT_EQ(again.find("inside their warmup"), std::string::npos) << again;
  EXPECT_NE(again.find("run 4 of 4"), std::string::npos) << again;
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

namespace {

// `siamese sweep sweep.yaml ARGS...` with the words as given (newlines and all).
siamese::testing::Outcome sweep_with(const TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"sweep", dir.file("sweep.yaml")};
  argv.insert(argv.end(), args.begin(), args.end());
  return siamese::testing::run_siamese(argv, dir.file("sweep.log"), sweep_limits(dir));
}

// A sweep with `args` exits 2 saying `message`, and writes no runs and no scripts (folder s).
void expect_refused(const TempDir& dir, const std::vector<std::string>& args, const std::string& message) {
  const auto outcome = sweep_with(dir, args);
  const std::string log = read_all(dir.file("sweep.log"));
  EXPECT_EQ(outcome.exit_code, 2) << log;
  EXPECT_NE(log.find(message), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir.file("runs"))) << log;
  EXPECT_FALSE(fs::exists(dir.file("s"))) << log;
}

// Every file under `folder` with its bytes.
std::map<std::string, std::string> files_of(const fs::path& folder) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(folder))
    if (e.is_regular_file()) out[fs::relative(e.path(), folder).string()] = read_all(e.path());
  return out;
}

}  // namespace

// Re-running a sweep with --set max_duration=8 after 4 said the 4-step runs had finished.
// A run folder whose run trained with other settings is refused, naming each key, and left
// byte for byte; --resume-changed trains it on, naming the change.
TEST(SweepLaunch, ARunFolderTrainedWithOtherSettingsIsRefusedOrResumedNamingThem) {
  TempDir dir;
  write_sweep(dir, "[3.0e-3]", 4);
  ASSERT_EQ(run_sweep(dir, ""), 0) << read_all(dir.file("sweep.log"));
  const fs::path run = dir.file("runs/hybrid_pre-lr0.003");
  ASSERT_EQ(losses(run).size(), 4u);
  const auto before = files_of(run);
  EXPECT_EQ(run_sweep(dir, "--set max_duration=8 --set optimizer.weight_decay=0.05"), 2);
  const std::string refused = read_all(dir.file("sweep.log"));
  EXPECT_NE(refused.find("hybrid_pre-lr0.003 (max_duration 4 -> 8, optimizer.weight_decay"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("fix: --resume-changed"), std::string::npos) << refused;
  EXPECT_EQ(refused.find("finished already"), std::string::npos) << refused;
  EXPECT_EQ(files_of(run), before);
  ASSERT_EQ(run_sweep(dir, "--set max_duration=8 --resume-changed"), 0) << read_all(dir.file("sweep.log"));
  const std::string resumed = read_all(dir.file("sweep.log"));
  EXPECT_NE(resumed.find("hybrid_pre-lr0.003 resumes with changed settings: max_duration 4 -> 8"),
            std::string::npos)
      << resumed;
  EXPECT_EQ(losses(run).size(), 8u) << resumed;
  ASSERT_EQ(run_sweep(dir, "--set max_duration=8"), 0) << read_all(dir.file("sweep.log"));
  EXPECT_NE(read_all(dir.file("sweep.log")).find("hybrid_pre-lr0.003 finished already, skipped"),
            std::string::npos);
}

// Sweeps that put two runs in one folder, or options that did nothing, were taken without a
// word (issue 60); each is refused before anything is written.
TEST(SweepLaunch, AmbiguousSweepsAndOptionsThatDoNothingAreRefused) {
  TempDir dir;
  write_sweep(dir, "[3.0e-3]");
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--seeds", "1,1"}, "--seeds: seed 1 is listed twice"},
      {{"--lr", "1e-3,0.001"}, "--lr: learning rate 0.001 is listed twice"},
      {{"--topologies", "pre,hybrid_pre,pre"}, "--topologies: topologies lists \"pre\" and \"pre\""},
      {{"--set", "optimizer.learning_rate=0.1"}, "which the sweep sets for each run"},
      {{"--only", "hybrid_pre,lr0.03"},
       "--only \"lr0.03\" is in no run's name; the sweep's runs are "
       "hybrid_pre-lr0.003"},
      {{"--launcher", "slurm"}, "--launcher shapes launch scripts, and this sweep writes none"},
      {{"--nproc", "2", "--print"}, "--nproc shapes launch scripts"},
      {{"--scripts", "s", "--partition", "cpu"}, "--partition is a Slurm setting"},
      {{"--scripts", "s", "--print"}, "--print and --scripts both given"},
      {{"--scripts", "s", "--launcher", "slurm", "--torchrun", "/bin/true"},
       "Slurm scripts start each rank"}};
  for (const auto& [args, message] : cases) expect_refused(dir, args, message);
  // Variants the short names would confuse, and learning rates {:g} rounded to one name, get
  // a folder each.
  ASSERT_EQ(sweep_with(dir, {"--topologies", "pre:max_duration=3,pre:scheduler.t_warmup=3", "--lr",
                             "0.0012345678,0.0012345679", "--print"})
                .exit_code,
            0);
  const std::string printed = read_all(dir.file("sweep.log"));
  for (const char* folder :
       {"runs/pre+max_duration=3-lr0.0012345678", "runs/pre+max_duration=3-lr0.0012345679",
        "runs/pre+scheduler.t_warmup=3-lr0.0012345678", "runs/pre+scheduler.t_warmup=3-lr0.0012345679"})
    EXPECT_NE(printed.find("--save_folder=" + dir.file(folder) + "\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("--optimizer.learning_rate=0.0012345679 "), std::string::npos) << printed;
}

// `--partition $'gpu\necho X'` wrote `echo X` as a line of the batch script and `--time abc`
// went in as written. Every value of an #SBATCH line is checked, and a newline in any
// argument stays inside the script's comment line and inside the quotes of its shell line.
TEST(SweepLaunch, LaunchScriptsCannotBeInjected) {
  TempDir dir;
  write_sweep(dir, "[3.0e-3]");
  const std::pair<std::vector<std::string>, std::string> refused[] = {
      {{"--partition", "gpu\necho X"}, "--partition \"gpu\\necho X\" has \"\\n\""},
      {{"--partition", "gpu;ls"}, "--partition \"gpu;ls\" has \";\""},
      {{"--account", "a b"}, "--account \"a b\" has \" \""},
      {{"--time", "abc"}, "--time \"abc\" is not one of Slurm's time formats"},
      {{"--time", "1:2:3:4"}, "not one of Slurm's time formats"},
      {{"--time", "1-"}, "not one of Slurm's time formats"}};
  for (const auto& [args, message] : refused) {
    std::vector<std::string> argv = {"--scripts", "s", "--launcher", "slurm"};
    argv.insert(argv.end(), args.begin(), args.end());
    expect_refused(dir, argv, message);
  }
  fs::create_directories(dir.file("with space"));
  EXPECT_EQ(sweep_with(dir, {"--scripts", dir.file("with space/s"), "--launcher", "slurm"}).exit_code, 2);
  EXPECT_NE(read_all(dir.file("sweep.log")).find("cannot go into #SBATCH --output"), std::string::npos)
      << read_all(dir.file("sweep.log"));
  for (const std::string time : {"90", "90:30", "1:30:00", "2-12", "2-12:30", "2-00:00:00", "UNLIMITED"}) {
    ASSERT_EQ(
        sweep_with(dir, {"--scripts", "s", "--launcher", "slurm", "--time", time, "--partition", "gpu,cpu"})
            .exit_code,
        0)
        << read_all(dir.file("sweep.log"));
    EXPECT_NE(read_all(dir.file("s/hybrid_pre-lr0.003.sh")).find("#SBATCH --time=" + time + "\n"),
              std::string::npos);
  }
  // A torchrun that records its arguments: the binary's newline reaches it inside one word.
  dir.write("record.sh", "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + dir.file("args.txt") + "\n");
  fs::permissions(dir.file("record.sh"), fs::perms::owner_all);
  const std::string binary = "/no/siamese\ntouch " + dir.file("injected");
  ASSERT_EQ(
      sweep_with(dir, {"--scripts", "t", "--torchrun", dir.file("record.sh"), "--binary", binary}).exit_code,
      0)
      << read_all(dir.file("sweep.log"));
  const fs::path script = dir.file("t/hybrid_pre-lr0.003.sh");
  std::istringstream lines(read_all(script));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line) && line != "set -euo pipefail")
    EXPECT_EQ(line.rfind("#", 0), 0u) << "a shell line before `set`: " << line << "\n" << read_all(script);
  ASSERT_EQ(run_script(dir, {"bash", script.string()}), 0) << read_all(dir.file("run.log"));
  EXPECT_FALSE(fs::exists(dir.file("injected")));
  EXPECT_NE(read_all(dir.file("args.txt")).find("--no_python\n" + binary + "\ntrain\n"), std::string::npos)
      << read_all(dir.file("args.txt"));
}
