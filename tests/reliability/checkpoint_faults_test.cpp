// Faults while a run writes or reads its save folder: kills during a save, a full disk,
// damaged checkpoint files, a second trainer, a changed model on resume, roll-back with
// pruning, leftovers of earlier crashes. Each test runs the real binary and checks what was
// kept on disk and what was said.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <regex>

#include "siamese/common/exit_codes.h"
#include "siamese_process.h"
#include "support/free_port.h"

using namespace siamese;
using namespace siamese::testing;

namespace {

// Scratch folders of saves, prunings and replacements in progress.
bool has_scratch(const fs::path& folder) {
  for (const auto& name : entries(folder))
    if (std::regex_match(name, std::regex("\\.step[0-9]+\\.(tmp|old|del)-[0-9]+"))) return true;
  return false;
}

// The losses of an uninterrupted 6-step run: what every interrupted and resumed run must
// reproduce bit for bit.
std::map<int64_t, double> reference_losses(const fs::path& root) {
  const auto c = tiny_saving(root / "reference");
  const auto out = run_siamese(train_args(c), root / "reference.log");
  EXPECT_EQ(out.exit_code, 0) << out.output;
  return losses(c.save_folder);
}

}  // namespace

// SIGKILL at five points of the third save (keep 2, so it also prunes step1); the next
// start cleans up and the finished run matches an uninterrupted one bit for bit.
TEST(KillDuringSave, EveryPointResumesBitExact) {
  const auto root = scratch("kill");
  const auto reference = reference_losses(root);
  ASSERT_EQ(reference.size(), 6u);
  struct Point {
    const char* what;
    uint32_t mask;
    const char* prefix;
    int nth;  // the nth such event of the run: step1 and step2 save untouched
  };
  const std::vector<Point> points = {
      {"temporary folder created", IN_CREATE, ".step3.tmp-", 1},
      {"model.pt written", IN_CLOSE_WRITE, "model.pt", 3},
      {"manifest being written", IN_CREATE, "manifest.json", 3},
      {"renamed into place", IN_MOVED_TO, "step3", 1},
      {"pruning step1", IN_MOVED_TO, ".step1.del-", 1},
  };
  for (const auto& point : points) {
    SCOPED_TRACE(point.what);
    auto c = tiny_saving(root / ("run_" + std::to_string(&point - points.data())));
    c.save_num_checkpoints_to_keep = 2;
    auto [killed_run, killed] = run_killed_at(train_args(c), c.save_folder, point.mask, point.prefix,
                                              point.nth, fs::path(c.save_folder).string() + ".killed.log");
    ASSERT_TRUE(killed) << killed_run.output;
    EXPECT_EQ(killed_run.signal, SIGKILL);
    // Where the kill landed decides what the next start finds: the save's temporary folder
    // (removed, resume from step2) or step3 in place (resume from step3).
    const bool step3_done = fs::exists(fs::path(c.save_folder) / "step3");
    std::vector<std::string> leftovers;
    for (const auto& name : entries(c.save_folder))
      if (name.rfind(".step", 0) == 0) leftovers.push_back(name);

    const auto resumed = run_siamese(train_args(c), fs::path(c.save_folder).string() + ".resumed.log");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from " +
                                  (fs::path(c.save_folder) / (step3_done ? "step3" : "step2")).string()),
              std::string::npos)
        << resumed.output;
    for (const auto& name : leftovers)
      EXPECT_NE(resumed.output.find(name + ": removed, left by an interrupted"), std::string::npos)
          << resumed.output;
    EXPECT_EQ(losses(c.save_folder), reference);
    EXPECT_FALSE(has_scratch(c.save_folder)) << fmt::format("{}", fmt::join(entries(c.save_folder), " "));
    EXPECT_EQ(intact(c.save_folder), (std::vector<std::string>{"step5", "step6"}));
  }
}

// A file size limit makes each write past it fail as on a full disk: in the run's
// config.yaml at start, in model.pt, in optim.pt. The run stops with the path and the free space, removes its
// temporary folder, leaves the earlier checkpoints byte for byte, and resumes exactly once there is room.
TEST(FullDisk, SaveFailsCleanlyAndTheRunResumesExactly) {
  const auto root = scratch("full");
  const auto reference = reference_losses(root);
  const fs::path ref_step = root / "reference" / "step1";
  const auto model_bytes = fs::file_size(ref_step / "model.pt");
  const auto optim_bytes = fs::file_size(ref_step / "optim.pt");
  ASSERT_LT(model_bytes, optim_bytes);
  for (const auto& [limit, failing] : std::vector<std::pair<long, std::string>>{
           {1000, "config.yaml"}, {long(model_bytes / 2), "model.pt"}, {long(model_bytes + 1), "optim.pt"}}) {
    SCOPED_TRACE(failing);
    auto c = tiny_saving(root / ("run_" + failing));
    c.save_interval = 2;
    const auto args = train_args(c, {"--stop-at", "4"});
    ASSERT_EQ(run_siamese(args, root / (failing + ".1.log")).exit_code, 0);
    const auto before = snapshot(c.save_folder);
    ASSERT_EQ(before.size(), 12u);  // step2 and step4, six files each

    const auto full = run_siamese(train_args(c), root / (failing + ".2.log"), {limit, 120, {}, {}, {}, {}});
    EXPECT_EQ(full.exit_code, 2) << full.output;
    EXPECT_EQ(full.signal, 0);
    EXPECT_NE(full.output.find("cannot write: File too large"), std::string::npos) << full.output;
    EXPECT_NE(full.output.find("/" + failing + ": cannot write"), std::string::npos) << full.output;
    EXPECT_NE(full.output.find("MiB free"), std::string::npos) << full.output;
    EXPECT_FALSE(has_scratch(c.save_folder));
    for (const auto& name : entries(c.save_folder)) EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
    EXPECT_EQ(snapshot(c.save_folder), before);

    const auto resumed = run_siamese(train_args(c), root / (failing + ".3.log"));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from " + (fs::path(c.save_folder) / "step4").string()),
              std::string::npos);
    EXPECT_EQ(losses(c.save_folder), reference);
  }
}

// One byte flipped in the middle of each file of the newest checkpoint, or the file cut to
// half: the checkpoint is refused with the file named, the run resumes from the one before.
TEST(DamagedCheckpoint, EveryFileFlippedOrTruncatedFallsBackToThePreviousCheckpoint) {
  const auto root = scratch("damaged");
  auto c = tiny_saving(root / "run");
  c.save_interval = 2;
  ASSERT_EQ(run_siamese(train_args(c, {"--stop-at", "4"}), root / "first.log").exit_code, 0);
  const fs::path step4 = fs::path(c.save_folder) / "step4";
  const auto pristine = snapshot(c.save_folder);
  int cases = 0;
  for (const char* file :
       {"model.pt", "optim.pt", "train_state.pt", "train_state.json", "config.yaml", "manifest.json"}) {
    for (const char* fault : {"flip", "truncate"}) {
      SCOPED_TRACE(std::string(file) + " " + fault);
      std::string bytes = pristine.at(std::string("step4/") + file);
      if (std::string(fault) == "flip")
        bytes[bytes.size() / 2] ^= 0x10;
      else
        bytes.resize(bytes.size() / 2);
      std::ofstream(step4 / file, std::ios::binary | std::ios::trunc) << bytes;
      const auto problem = train::checkpoint_problem(step4);
      ASSERT_TRUE(problem.has_value());
      if (std::string(file) != "manifest.json") {
        EXPECT_NE(problem->find(file), std::string::npos) << *problem;
      }
      EXPECT_EQ(train::latest_checkpoint(c.save_folder), fs::path(c.save_folder) / "step2");
      std::ofstream(step4 / file, std::ios::binary | std::ios::trunc)
          << pristine.at(std::string("step4/") + file);
      ++cases;
    }
  }
  EXPECT_EQ(cases, 12);
  EXPECT_FALSE(train::checkpoint_problem(step4).has_value());

  // End to end: flipped weights in step4 (the case that used to load silently and go NaN).
  // The resumed run warns, starts from step2, and matches an uninterrupted run.
  std::string weights = pristine.at("step4/model.pt");
  weights[weights.size() / 2] ^= 0x01;
  std::ofstream(step4 / "model.pt", std::ios::binary | std::ios::trunc) << weights;
  const auto resumed = run_siamese(train_args(c), root / "resumed.log");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(
      resumed.output.find("step4: skipped, not an intact checkpoint: model.pt does not match its sha256"),
      std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + (fs::path(c.save_folder) / "step2").string()),
            std::string::npos)
      << resumed.output;
  EXPECT_EQ(losses(c.save_folder), reference_losses(root));
  EXPECT_FALSE(train::checkpoint_problem(step4).has_value());  // rewritten by the resumed run

  // An explicit load_path to a damaged checkpoint is refused, not replaced by another one.
  std::ofstream(step4 / "optim.pt", std::ios::binary | std::ios::trunc) << "x";
  auto explicit_load = run_siamese(train_args(c, {"--load_path", step4.string(), "--max_duration", "8"}),
                                   root / "explicit.log");
  EXPECT_EQ(explicit_load.exit_code, 2);
  EXPECT_NE(explicit_load.output.find("not an intact checkpoint: optim.pt has 1 bytes"), std::string::npos)
      << explicit_load.output;
}

// A second trainer on a save folder in use is refused and changes nothing; the lock dies
// with its holder, even under SIGKILL.
TEST(TwoTrainers, SecondIsRefusedAndTheLockDiesWithTheFirst) {
  const auto root = scratch("two");
  auto c = tiny(root / "run");
  Child first = start_long_run(c, root / "first.log");
  ASSERT_TRUE(first.running());
  const auto second = run_siamese(train_args(c), root / "second.log");
  EXPECT_EQ(second.exit_code, 2);
  EXPECT_NE(second.output.find(
                fmt::format("another process (pid {}: siamese train) holds this folder's lock", first.pid())),
            std::string::npos)
      << second.output;
  EXPECT_TRUE(first.running());
  first.kill(SIGKILL);
  EXPECT_EQ(first.wait().signal, SIGKILL);

  c.max_duration = "2";
  const auto third = run_siamese(train_args(c), root / "third.log");
  EXPECT_EQ(third.exit_code, 0) << third.output;
  EXPECT_EQ(intact(c.save_folder), std::vector<std::string>{"step2"});
}

// Resuming with another model is refused, naming every key that differs, whether or not the
// tensor shapes change; dropout may change.
TEST(ChangedConfig, ResumeRefusesAnotherModelAndNamesTheKeys) {
  const auto root = scratch("changed");
  auto c = tiny_saving(root / "run");
  c.max_duration = "2";
  ASSERT_EQ(run_siamese(train_args(c), root / "first.log").exit_code, 0);
  const auto before = snapshot(c.save_folder);
  c.max_duration = "4";
  // Each case: overrides, then what the message must name.
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"--model.n_heads=4"}, {"model.n_heads (checkpoint 2, config 4)"}},
      {{"--model.residual=post_pre"}, {"model.residual (checkpoint hybrid_pre, config post_pre)"}},
      {{"--model.d_model=64"}, {"model.d_model (checkpoint 32, config 64)"}},
      {{"--model.layer_norm_type=rms", "--model.siamese.gamma=false"},
       {"model.layer_norm_type (checkpoint default, config rms)",
        "model.siamese.gamma (checkpoint true, config false)"}},
  };
  for (const auto& [overrides, keys] : cases) {
    SCOPED_TRACE(keys.front());
    const auto out = run_siamese(train_args(c, overrides), root / "changed.log");
    EXPECT_EQ(out.exit_code, 2);
    EXPECT_NE(out.output.find("the checkpoint was trained with another model: "), std::string::npos)
        << out.output;
    for (const auto& key : keys) EXPECT_NE(out.output.find(key), std::string::npos) << out.output;
    EXPECT_EQ(snapshot(c.save_folder), before);
  }
  const auto dropout = run_siamese(train_args(c, {"--model.attention_dropout=0"}), root / "dropout.log");
  EXPECT_EQ(dropout.exit_code, 0) << dropout.output;
  EXPECT_EQ(intact(c.save_folder), (std::vector<std::string>{"step1", "step2", "step3", "step4"}));
}

// Rolling back to step3 of six with keep 1: the newer checkpoints the run did not write
// stay, byte for byte; the older ones and its own older ones are pruned.
TEST(RollBack, PruningNeverDeletesCheckpointsNewerThanTheOneLoaded) {
  const auto root = scratch("rollback");
  auto c = tiny_saving(root / "run");
  ASSERT_EQ(run_siamese(train_args(c), root / "first.log").exit_code, 0);
  const auto before = snapshot(c.save_folder);
  c.save_interval = 2;
  c.save_num_checkpoints_to_keep = 1;
  c.max_duration = "4";
  const auto out = run_siamese(train_args(c, {"--load_path", (fs::path(c.save_folder) / "step3").string()}),
                               root / "rollback.log");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  EXPECT_EQ(intact(c.save_folder), (std::vector<std::string>{"step4", "step5", "step6"}));
  for (const char* kept : {"step5", "step6"})
    for (const char* file : {"model.pt", "optim.pt", "manifest.json"})
      EXPECT_EQ(read_all(fs::path(c.save_folder) / kept / file), before.at(std::string(kept) + "/" + file));
}

// Leftovers of earlier crashes: a temporary folder of a dead save, a half-pruned folder, a
// replacement cut between its renames, a stray folder with a huge step number.
TEST(Leftovers, CleanedRestoredOrIgnoredWithAWarning) {
  const auto root = scratch("leftovers");
  auto c = tiny_saving(root / "run");
  c.max_duration = "3";
  ASSERT_EQ(run_siamese(train_args(c), root / "first.log").exit_code, 0);
  const fs::path f = c.save_folder;
  fs::create_directories(f / ".step7.tmp-999999");
  std::ofstream(f / ".step7.tmp-999999" / "model.pt") << "partial";
  fs::copy(f / "step1", f / ".step1.del-999999");
  fs::rename(f / "step3", f / ".step3.old-999999");  // killed between the two renames
  fs::create_directories(f / "step99999999999999999999");
  fs::copy(f / "step2", f / "step9");
  fs::remove(f / "step9" / "manifest.json");  // pruning or a save cut short
  fs::remove(f / "step9" / "model.pt");

  c.max_duration = "4";
  const auto out = run_siamese(train_args(c), root / "second.log");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  EXPECT_NE(out.output.find(".step7.tmp-999999: removed, left by an interrupted save"), std::string::npos)
      << out.output;
  EXPECT_NE(out.output.find(".step1.del-999999: removed, left by an interrupted pruning"), std::string::npos);
  EXPECT_NE(out.output.find(".step3.old-999999: restored as"), std::string::npos);
  EXPECT_NE(out.output.find("step99999999999999999999: ignored, its step number does not fit in 64 bits"),
            std::string::npos);
  EXPECT_NE(out.output.find("step9: skipped, not an intact checkpoint: no manifest.json"), std::string::npos);
  EXPECT_NE(out.output.find("resumed from " + (f / "step3").string()), std::string::npos) << out.output;
  EXPECT_FALSE(has_scratch(f));
  EXPECT_TRUE(fs::exists(f / "step99999999999999999999"));  // not ours to delete
  EXPECT_EQ(intact(f), (std::vector<std::string>{"step1", "step2", "step3", "step4"}));
  const auto report = run_siamese({"report", f.string()}, root / "report.log");  // used to stop at "stoll"
  EXPECT_EQ(report.exit_code, 0) << report.output;
  EXPECT_NE(report.output.find("| hybrid_pre |"), std::string::npos) << report.output;
}

// save_overwrite as in OLMo: a save folder holding checkpoints that the run does not resume
// from (it loads another run's) is refused unless save_overwrite is true.
TEST(SaveOverwrite, RefusesForeignCheckpointsUnlessTrue) {
  const auto root = scratch("overwrite");
  auto a = tiny_saving(root / "a");
  auto b = tiny_saving(root / "b");
  a.max_duration = b.max_duration = "2";
  ASSERT_EQ(run_siamese(train_args(a), root / "a.log").exit_code, 0);
  ASSERT_EQ(run_siamese(train_args(b), root / "b.log").exit_code, 0);
  const auto before = snapshot(b.save_folder);
  b.max_duration = "3";
  const std::string load = (fs::path(a.save_folder) / "step1").string();
  const auto refused = run_siamese(train_args(b, {"--load_path", load}), root / "refused.log");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.output.find("save_folder already holds checkpoints (step1 ... step2) and this run does "
                                "not resume from them"),
            std::string::npos)
      << refused.output;
  EXPECT_EQ(snapshot(b.save_folder), before);
  const auto allowed =
      run_siamese(train_args(b, {"--load_path", load, "--save_overwrite=true"}), root / "allowed.log");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_NE(allowed.output.find("resumed from " + load + " at step 1"), std::string::npos);
}

// Weights that overflow to inf in an update whose loss was still finite are not saved: the
// run stops with exit 3 naming the step, and the last checkpoint stays the newest. (A
// non-finite loss stops before any save: Trainer.NonFiniteLossStops...)
TEST(NonFinite, WeightsThatOverflowAreNeverSaved) {
  const auto root = scratch("nonfinite");
  auto c = tiny_saving(root / "run");
  c.max_grad_norm.reset();
  c.max_duration = "2";
  ASSERT_EQ(run_siamese(train_args(c), root / "first.log").exit_code, 0);
  c.max_duration = "6";
  // Step 3 decays the norm weights (~1) by 1 - lr * wd = -3.3e38 and adds an update of
  // lr / (1 - 0.9^3) = 1.1e38: past float32's 3.4e38 wherever the two agree in sign.
  c.optimizer.learning_rate = 3e37;
  c.optimizer.weight_decay = 11;
  c.optimizer.decay_norm_and_bias = true;
  const auto out = run_siamese(train_args(c), root / "overflow.log");
  EXPECT_EQ(out.exit_code, 3) << out.output;
  EXPECT_NE(out.output.find("step 3: the weights are no longer finite; stopping without saving them"),
            std::string::npos)
      << out.output;
  EXPECT_NE(read_all(fs::path(c.save_folder) / "metrics.jsonl")
                .find("{\"step\": 3, \"event\": \"nonfinite\", \"cause\": \"weights\"}"),
            std::string::npos);
  EXPECT_EQ(intact(c.save_folder), (std::vector<std::string>{"step1", "step2"}));
  EXPECT_EQ(train::latest_checkpoint(c.save_folder), fs::path(c.save_folder) / "step2");
}

// A finished 2-step run under root/run, to damage its metrics.jsonl.
config::TrainConfig two_step_run(const fs::path& root) {
  auto c = tiny_saving(root / "run");
  c.max_duration = "2";
  EXPECT_EQ(run_siamese(train_args(c), root / "first.log").exit_code, 0);
  return c;
}

// A kill can cut metrics.jsonl mid-line: the one metrics reader skips that last line with a
// warning, so `siamese report` reads the rest, a resumed run drops it, and every line is
// JSON again (labels with quotes included).
TEST(Metrics, CutLastLineIsSkippedByReadersAndRepairedOnResume) {
  const auto root = scratch("metrics");
  auto c = two_step_run(root);
  const fs::path metrics = fs::path(c.save_folder) / "metrics.jsonl";
  std::ofstream(metrics, std::ios::app) << "{\"step\": 3, \"tokens\": 1";
  const auto report = run_siamese({"report", c.save_folder}, root / "report.log");
  EXPECT_EQ(report.exit_code, 0) << report.output;
  EXPECT_NE(report.output.find("metrics.jsonl:"), std::string::npos);
  EXPECT_NE(report.output.find("skipped the last line, cut short"), std::string::npos) << report.output;

  c.max_duration = "3";
  const auto resumed = run_siamese(train_args(c), root / "resumed.log");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("skipped the last line, cut short"), std::string::npos) << resumed.output;
  EXPECT_EQ(losses(c.save_folder).size(), 3u);  // parses every line
}

// A damaged line inside metrics.jsonl is not a kill's doing: resuming refuses, naming the
// line, and leaves the log as it was instead of dropping rows.
TEST(Metrics, DamagedInnerLineStopsTheResumeAndKeepsTheLog) {
  const auto root = scratch("metrics_damaged");
  auto c = two_step_run(root);
  const fs::path metrics = fs::path(c.save_folder) / "metrics.jsonl";
  std::string text = read_all(metrics);
  text.insert(text.find('\n') + 1, "{\"step\": 1, \"lo\n");
  std::ofstream(metrics, std::ios::trunc) << text;
  c.max_duration = "3";
  const auto resumed = run_siamese(train_args(c), root / "resumed.log");
  EXPECT_NE(resumed.exit_code, 0);
  EXPECT_NE(resumed.output.find("metrics.jsonl:2"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("repair or remove this line"), std::string::npos) << resumed.output;
  EXPECT_EQ(read_all(metrics), text);
}

namespace {

config::TrainConfig tiny_sharded(const fs::path& folder) {
  config::TrainConfig c = tiny_saving(folder);
  c.distributed_strategy = config::DistributedStrategy::Fsdp;
  c.fsdp.sharding_strategy = config::ShardingStrategy::FullShard;
  c.distributed.timeout_seconds = 15;  // a rank left alone gives up soon
  return c;
}

}  // namespace

// SIGKILL during the third save of 2 FULL_SHARD ranks, at three points of the sharded save:
// the staging folder every rank writes into created, rank 1's report of its part in place,
// rank 0's manifest being written. Both ranks are killed (a job killed mid-save), and in one more run only
// rank 1 (a node lost: rank 0 gives up at the timeout and exits non-zero). The next 2-rank start clears what
// the save left, resumes from step2 or step3 as the kill left them, and ends with the uninterrupted run's
// losses bit for bit; no checkpoint on disk is incomplete.
TEST(KillDuringShardedSave, EveryPointResumesBitExact) {
  const auto root = scratch("kill_sharded");
  const config::TrainConfig ref = tiny_sharded(root / "reference");
  auto ref_ranks = start_sharded(ref, 2, (root / "reference.log").string());
  const Outcome ref_run = wait_sharded(ref_ranks);
  ASSERT_EQ(ref_run.exit_code, 0) << ref_run.output;
  const auto reference = losses(ref.save_folder);
  ASSERT_EQ(reference.size(), 6u);
  struct Point {
    const char* what;
    uint32_t mask;
    const char* prefix;
    int nth;
    bool only_rank1;
  };
  const std::vector<Point> points = {
      {"staging folder created", IN_CREATE, ".step3.tmp-", 1, false},
      {"rank 1's report in place", IN_MOVED_TO, ".rank1.json", 3, false},
      {"manifest being written", IN_CREATE, "manifest.json", 3, false},
      {"rank 1 lost while writing its part", IN_CREATE, ".step3.tmp-", 1, true},
  };
  for (const auto& point : points) {
    SCOPED_TRACE(point.what);
    const config::TrainConfig c = tiny_sharded(root / ("run_" + std::to_string(&point - points.data())));
    const std::string log = c.save_folder + ".killed.log";
    SaveWatch watch(c.save_folder);
    auto ranks = start_sharded(c, 2, log);
    const bool hit = watch.wait_for(point.mask, point.prefix, point.nth,
                                    [&] { return ranks[0]->running() || ranks[1]->running(); });
    ASSERT_TRUE(hit) << read_all(log + ".r0");
    ranks[1]->kill();
    if (!point.only_rank1) ranks[0]->kill();
    const Outcome killed = wait_sharded(ranks);
    if (point.only_rank1) {
      EXPECT_NE(killed.exit_code, 0) << killed.output;
      EXPECT_NE(killed.output.find("another rank probably died"), std::string::npos) << killed.output;
    } else {
      EXPECT_EQ(killed.signal, SIGKILL) << killed.output;
    }
    // A step folder is in place whole or not at all.
    for (const auto& [step, dir] : train::checkpoint_folders(c.save_folder))
      EXPECT_FALSE(train::checkpoint_problem(dir).has_value()) << dir;
    const bool step3_done = fs::exists(fs::path(c.save_folder) / "step3");

    auto again = start_sharded(c, 2, c.save_folder + ".resumed.log");
    const Outcome resumed = wait_sharded(again);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from " +
                                  (fs::path(c.save_folder) / (step3_done ? "step3" : "step2")).string()),
              std::string::npos)
        << resumed.output;
    EXPECT_EQ(losses(c.save_folder), reference);
    EXPECT_FALSE(has_scratch(c.save_folder)) << fmt::format("{}", fmt::join(entries(c.save_folder), " "));
    EXPECT_EQ(intact(c.save_folder),
              (std::vector<std::string>{"step1", "step2", "step3", "step4", "step5", "step6"}));
  }
}

namespace {

// The reference of the background-save faults: 2 ranks saving every step synchronously.
std::map<int64_t, double> sharded_reference(const config::TrainConfig& c, const fs::path& log) {
  auto ranks = start_sharded(c, 2, log.string());
  const Outcome run = wait_sharded(ranks);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return losses(c.save_folder);
}

// The tiny 2-rank run at 256 wide (1.6M parameters): a step and a part's write take
// milliseconds, so a signal sent when a save starts lands while it writes.
config::TrainConfig wide_sharded(const fs::path& folder) {
  config::TrainConfig c = tiny_sharded(folder);
  c.model.d_model = 256;
  c.model.n_heads = 4;
  return c;
}

// The steps whose checkpoint is intact, as "step<N>" names.
std::vector<std::string> steps_up_to(int last) {
  std::vector<std::string> out;
  for (int s = 1; s <= last; ++s) out.push_back("step" + std::to_string(s));
  return out;
}

}  // namespace

// Background saves (save_async) under ddp and FULL_SHARD give the synchronous run's losses;
// kill -9 of rank 1 while it writes its part of the third save (the step loop is already on
// step 4) leaves step2 the newest checkpoint, and the resumed run matches bit for bit. The
// kill is sent when the save's staging folder appears; one that still lands after rank 1's
// report is tried again, up to 5 times.
TEST(AsyncSave, AKilledRankMidWriteLeavesThePreviousCheckpointAndResumesExactly) {
  const auto root = scratch("async_kill");
  for (const auto strategy : {config::DistributedStrategy::Ddp, config::DistributedStrategy::Fsdp}) {
    const std::string name = strategy == config::DistributedStrategy::Ddp ? "ddp" : "full_shard";
    SCOPED_TRACE(name);
    config::TrainConfig ref = wide_sharded(root / (name + "_reference"));
    ref.distributed_strategy = strategy;
    const auto reference = sharded_reference(ref, root / (name + "_reference.log"));
    ASSERT_EQ(reference.size(), 6u);

    config::TrainConfig c = ref;
    c.save_folder = (root / (name + "_async")).string();
    c.save_async = true;
    const auto undisturbed = sharded_reference(c, root / (name + "_async.log"));
    EXPECT_EQ(undisturbed, reference);
    EXPECT_EQ(intact(c.save_folder), steps_up_to(6));

    bool mid_write = false;
    for (int attempt = 0; attempt < 5 && !mid_write; ++attempt) {
      c.save_folder = (root / (name + "_killed" + std::to_string(attempt))).string();
      const std::string log = c.save_folder + ".killed.log";
      SaveWatch watch(c.save_folder);
      auto ranks = start_sharded(c, 2, log);
      ASSERT_TRUE(watch.wait_for(IN_CREATE, ".step3.tmp-", 1, [&] {
        return ranks[0]->running() || ranks[1]->running();
      })) << read_all(log + ".r0");
      ranks[1]->kill();
      const Outcome killed = wait_sharded(ranks);
      EXPECT_NE(killed.exit_code, 0) << killed.output;
      bool reported = false;
      for (const auto& entry : entries(c.save_folder))
        if (entry.rfind(".step3.tmp-", 0) == 0)
          reported = fs::exists(fs::path(c.save_folder) / entry / ".rank1.json");
      mid_write = !reported && intact(c.save_folder) == steps_up_to(2);
    }
    ASSERT_TRUE(mid_write) << "every kill landed after rank 1 had written its part";

    auto again = start_sharded(c, 2, c.save_folder + ".resumed.log");
    const Outcome resumed = wait_sharded(again);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from " + (fs::path(c.save_folder) / "step2").string()),
              std::string::npos)
        << resumed.output;
    EXPECT_EQ(losses(c.save_folder), reference);
    EXPECT_FALSE(has_scratch(c.save_folder)) << fmt::format("{}", fmt::join(entries(c.save_folder), " "));
    EXPECT_EQ(intact(c.save_folder), steps_up_to(6));
  }
}

// A full disk on rank 1 during a background write (a file size limit below its model part):
// the failure reaches both ranks when they agree on the save (here at the run's end), rank 1
// names the file and rank 0 says another rank failed, the run exits 2, every
// checkpoint on disk is left byte for byte and none is half there; with room again the run
// resumes from the newest and matches the synchronous run bit for bit.
TEST(AsyncSave, AFullDiskOnOneRankFailsCleanlyAndTheRunResumesExactly) {
  const auto root = scratch("async_full");
  config::TrainConfig c = tiny_sharded(root / "run");
  c.save_async = true;
  c.save_interval = 2;
  config::TrainConfig ref = tiny_sharded(root / "reference");
  const auto reference = sharded_reference(ref, root / "reference.log");
  ASSERT_EQ(reference.size(), 6u);

  auto first = start_sharded(c, 2, (root / "first.log").string(), {"--stop-at", "4"});
  ASSERT_EQ(wait_sharded(first).exit_code, 0);
  const auto before = snapshot(c.save_folder);
  const auto part_bytes = fs::file_size(fs::path(c.save_folder) / "step4" / "model_part1of2.pt");
  auto full = start_sharded(c, 2, (root / "full.log").string(), {}, {{1, long(part_bytes / 2)}});
  const Outcome failed = wait_sharded(full);
  EXPECT_EQ(failed.exit_code, 2) << failed.output;
  EXPECT_NE(failed.output.find("model_part1of2.pt: cannot write: File too large"), std::string::npos)
      << failed.output;
  EXPECT_NE(failed.output.find("another rank could not write its part of checkpoint step6"),
            std::string::npos)
      << failed.output;
  EXPECT_FALSE(has_scratch(c.save_folder)) << fmt::format("{}", fmt::join(entries(c.save_folder), " "));
  EXPECT_EQ(snapshot(c.save_folder), before);

  auto again = start_sharded(c, 2, (root / "resumed.log").string());
  const Outcome resumed = wait_sharded(again);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + (fs::path(c.save_folder) / "step4").string()),
            std::string::npos)
      << resumed.output;
  EXPECT_EQ(losses(c.save_folder), reference);
}

// SIGTERM to both ranks once the third save starts writing in the background: the
// stop waits for that save, writes its own, and exits 4; every checkpoint is intact and the
// resumed run matches the uninterrupted one bit for bit.
TEST(AsyncSave, SigtermMidWriteFinishesTheSaveStopsAndResumesExactly) {
  const auto root = scratch("async_term");
  config::TrainConfig ref = wide_sharded(root / "reference");
  const auto reference = sharded_reference(ref, root / "reference.log");
  ASSERT_EQ(reference.size(), 6u);
  config::TrainConfig c = wide_sharded(root / "run");
  c.save_async = true;
  const std::string log = c.save_folder + ".stopped.log";
  SaveWatch watch(c.save_folder);
  auto ranks = start_sharded(c, 2, log);
  ASSERT_TRUE(watch.wait_for(IN_CREATE, ".step3.tmp-", 1, [&] {
    return ranks[0]->running() || ranks[1]->running();
  })) << read_all(log + ".r0");
  ranks[0]->kill(SIGTERM);
  ranks[1]->kill(SIGTERM);
  const Outcome stopped = wait_sharded(ranks);
  EXPECT_EQ(stopped.exit_code, kExitStopped) << stopped.output;
  const auto kept = intact(c.save_folder);
  ASSERT_GE(kept.size(), 3u) << stopped.output;
  EXPECT_EQ(kept, steps_up_to(int(kept.size())));
  EXPECT_FALSE(has_scratch(c.save_folder)) << fmt::format("{}", fmt::join(entries(c.save_folder), " "));

  auto again = start_sharded(c, 2, c.save_folder + ".resumed.log");
  const Outcome resumed = wait_sharded(again);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(losses(c.save_folder), reference);
  EXPECT_EQ(intact(c.save_folder), steps_up_to(6));
}
