// Faults of multi-rank runs: ranks given unequal data by the instance filter, damaged
// sharded checkpoints. Each rank is the real binary on a real Gloo process group.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <sstream>

#include "siamese_process.h"

using namespace siamese;
using namespace siamese::testing;

namespace {

// step -> the instances the filter left out of the step, all ranks (metrics.jsonl).
std::map<int64_t, int64_t> filtered_per_step(const fs::path& folder) {
  std::map<int64_t, int64_t> out;
  std::ifstream in(folder / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("filtered_instances"))
      out[j["step"].get<int64_t>()] = j["filtered_instances"].get<int64_t>();
  }
  return out;
}

// The tiny run without dropout (so that 2 ranks repeat 1 process), one sequence per
// micro-batch, with OLMo-2's instance filter at a count the arithmetic corpus often reaches.
config::TrainConfig filtered_run(const fs::path& folder) {
  config::TrainConfig c = tiny(folder);
  c.model.attention_dropout = c.model.residual_dropout = c.model.embedding_dropout = 0.0;
  c.device_train_microbatch_size = 1;
  c.data.instance_filter.repetition_max_count = 3;
  c.distributed.timeout_seconds = 15;  // a deadlock fails the test soon
  return c;
}

// step -> a metric's value (metrics.jsonl rows that have it).
std::map<int64_t, double> metric_per_step(const fs::path& folder, const std::string& key) {
  std::map<int64_t, double> out;
  std::ifstream in(folder / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains(key) && j[key].is_number()) out[j["step"].get<int64_t>()] = j[key].get<double>();
  }
  return out;
}

// Trains `one` as one process and `two` on 2 FULL_SHARD ranks; both must see steps that leave
// the ranks unequal shares, and the ranks' losses must follow the one process's.
void expect_full_shard_follows_one_process(const config::TrainConfig& one, const config::TrainConfig& two,
                                           const fs::path& root) {
  const Outcome single = run_siamese(train_args(one), root / "one.log");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto filtered = filtered_per_step(one.save_folder);
  ASSERT_EQ(filtered.size(), 8u);
  int odd = 0;
  for (const auto& [step, n] : filtered) odd += n % 2;
  ASSERT_GT(odd, 0) << "no step leaves the ranks unequal";
  auto ranks = start_sharded(two, 2, (root / "two.log").string(),
                             {"--distributed_strategy=fsdp", "--fsdp.sharding_strategy=FULL_SHARD"});
  const Outcome sharded = wait_sharded(ranks);
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  const auto want = losses(one.save_folder), got = losses(two.save_folder);
  ASSERT_EQ(got.size(), 8u) << sharded.output;
  for (const auto& [step, loss] : got) EXPECT_NEAR(loss, want.at(step), 1e-5) << "step " << step;
  EXPECT_EQ(filtered_per_step(two.save_folder), filtered);
}

// A port on 127.0.0.1 this process listens on while it lives, as another job's would be.
struct HeldPort {
  int port = free_port();
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  HeldPort() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(fd, 1) != 0)
      throw std::runtime_error("cannot listen on port " + std::to_string(port));
  }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  ~HeldPort() { ::close(fd); }
};

}  // namespace

// The filter leaves the ranks unequal shares (an odd number of instances left out of a step
// of 2 x 2), so one rank has fewer micro-batches. FULL_SHARD gathers every block in each
// forward: the ranks used to wait for each other until the timeout. Every rank now runs the
// longest share's count (the extra ones empty), and the losses are the one-process run's.
TEST(UnequalShares, FullShardTrainsAsOneProcessWhenTheFilterLeavesRanksUnequal) {
  const auto root = scratch("unequal_shares");
  expect_full_shard_follows_one_process(filtered_run(root / "one"), filtered_run(root / "two"), root);
}

// The same unequal shares with block_type moe: a rank's empty micro-batch still runs every
// block (so that the gathers match), and its router then sees no tokens. Its load-balancing
// and router z-losses must add nothing (not 0/0), its dropped fraction must not count, and
// the run must follow the one-process run's losses and MoE terms.
TEST(UnequalShares, FullShardMoeTrainsAsOneProcessWithEmptyMicroBatches) {
  const auto root = scratch("unequal_moe");
  auto moe = [](config::TrainConfig c) {
    c.model.block_type = config::BlockType::Moe;
    c.model.moe_num_experts = 4;
    c.model.moe_top_k = 2;
    c.model.moe_zloss_weight = 0.001;
    return c;
  };
  const config::TrainConfig one = moe(filtered_run(root / "one")), two = moe(filtered_run(root / "two"));
  expect_full_shard_follows_one_process(one, two, root);
  if (HasFatalFailure()) return;
  for (const char* key : {"moe_lbl_loss", "moe_z_loss", "moe_dropped_fraction"}) {
    const auto a = metric_per_step(one.save_folder, key), b = metric_per_step(two.save_folder, key);
    ASSERT_EQ(a.size(), 8u) << key;
    for (const auto& [step, v] : a) {
      ASSERT_TRUE(b.count(step)) << key << " step " << step;
      EXPECT_TRUE(std::isfinite(b.at(step))) << key << " step " << step;
      EXPECT_NEAR(b.at(step), v, 1e-5 + 1e-5 * std::abs(v)) << key << " step " << step;
    }
  }
}

// SIGKILL of both ranks in the middle of a FULL_SHARD run and of a HYBRID_SHARD run (2
// replicas), with the instance filter leaving the ranks unequal shares, then the same launch
// again: each resumes from its newest checkpoint and ends with the uninterrupted run's losses
// and filter counts, bit for bit.
TEST(KilledShardedRun, ResumesBitExactUnderFullAndHybridShardWithTheFilterOn) {
  const auto root = scratch("killed_sharded");
  for (const char* strategy : {"FULL_SHARD", "HYBRID_SHARD"}) {
    SCOPED_TRACE(strategy);
    const std::vector<std::string> launch = {"--distributed_strategy=fsdp",
                                             std::string("--fsdp.sharding_strategy=") + strategy,
                                             "--fsdp.hybrid_sharding_num_model_replicas=2"};
    auto run = [&](const std::string& name) {
      config::TrainConfig c = filtered_run(root / (std::string(strategy) + "_" + name));
      c.save_interval = 1;
      return c;
    };
    const config::TrainConfig ref = run("reference");
    auto ref_ranks = start_sharded(ref, 2, ref.save_folder + ".log", launch);
    const Outcome whole = wait_sharded(ref_ranks);
    ASSERT_EQ(whole.exit_code, 0) << whole.output;
    const auto reference = losses(ref.save_folder);
    ASSERT_EQ(reference.size(), 8u);

    const config::TrainConfig c = run("killed");
    auto ranks = start_sharded(c, 2, c.save_folder + ".killed.log", launch);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (losses(c.save_folder).size() < 4 && ranks[0]->running() &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (auto& rank : ranks) rank->kill();
    const Outcome killed = wait_sharded(ranks);
    ASSERT_EQ(killed.signal, SIGKILL) << "the run ended before it was killed\n" << killed.output;
    ASSERT_LT(losses(c.save_folder).size(), 8u);

    auto again = start_sharded(c, 2, c.save_folder + ".resumed.log", launch);
    const Outcome resumed = wait_sharded(again);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resum"), std::string::npos) << resumed.output;
    EXPECT_EQ(losses(c.save_folder), reference);
    EXPECT_EQ(filtered_per_step(c.save_folder), filtered_per_step(ref.save_folder));
  }
}

// manifest.json of the newest checkpoint of 2 FULL_SHARD ranks edited to say another number
// of optimizer shards than it lists: 0 used to crash the resume (SIGSEGV), 3 to stop it with a
// raw fopen error on optim_shard0of3.pt. The checkpoint is now refused naming the key, the run
// falls back to the one before (as for any damaged checkpoint), and an explicit load_path to
// it is refused with exit 2.
TEST(ShardManifest, AWrongShardCountFallsBackToThePreviousCheckpoint) {
  const auto root = scratch("shard_manifest");
  config::TrainConfig c = tiny_saving(root / "run");
  c.max_duration = "3";
  auto ranks = start_sharded(c, 2, (root / "first.log").string(),
                             {"--distributed_strategy=fsdp", "--fsdp.sharding_strategy=FULL_SHARD"});
  const Outcome first = wait_sharded(ranks);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const fs::path step3 = fs::path(c.save_folder) / "step3";
  const std::string pristine = read_all(step3 / "manifest.json");
  auto edit = [&](const fs::path& folder, const nlohmann::json& shards) {
    auto manifest = nlohmann::json::parse(pristine);
    manifest["optimizer_shards"] = shards;
    std::ofstream(folder / "step3" / "manifest.json", std::ios::trunc) << manifest.dump(2) << "\n";
  };
  for (const nlohmann::json& shards : {nlohmann::json(0), nlohmann::json(3), nlohmann::json(1),
                                       nlohmann::json(-1), nlohmann::json("2"), nlohmann::json(1LL << 40)}) {
    SCOPED_TRACE(shards.dump());
    edit(c.save_folder, shards);
    const auto problem = train::checkpoint_problem(step3);
    ASSERT_TRUE(problem.has_value());
    EXPECT_NE(problem->find("optimizer_shards " + shards.dump()), std::string::npos) << *problem;
    EXPECT_EQ(train::latest_checkpoint(c.save_folder), fs::path(c.save_folder) / "step2");
  }
  std::ofstream(step3 / "manifest.json", std::ios::trunc) << pristine;
  ASSERT_FALSE(train::checkpoint_problem(step3).has_value());

  for (int shards : {0, 3}) {
    SCOPED_TRACE(shards);
    const fs::path copy = root / ("resumed" + std::to_string(shards));
    fs::copy(c.save_folder, copy, fs::copy_options::recursive);
    edit(copy, shards);
    config::TrainConfig again = c;
    again.save_folder = copy.string();
    const Outcome explicit_load =
        run_siamese(train_args(again, {"--load_path", (copy / "step3").string(), "--max_duration", "4"}),
                    copy.string() + ".explicit.log");
    EXPECT_EQ(explicit_load.exit_code, 2) << explicit_load.output;
    EXPECT_NE(explicit_load.output.find("not an intact checkpoint: manifest.json says optimizer_shards"),
              std::string::npos)
        << explicit_load.output;

    const Outcome resumed = run_siamese(train_args(again), copy.string() + ".log");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(
        resumed.output.find("step3: skipped, not an intact checkpoint: manifest.json says optimizer_shards " +
                            std::to_string(shards)),
        std::string::npos)
        << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from " + (copy / "step2").string()), std::string::npos)
        << resumed.output;
    EXPECT_EQ(intact(copy), (std::vector<std::string>{"step1", "step2", "step3"}));
  }
}

namespace {

// /proc/<pid>/stat, or "" once the process is gone: a process that exits between the open and
// the read fails the read (ESRCH), which std::ifstream turns into an exception. Other programs
// on the machine come and go while the test scans /proc.
std::string proc_stat(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  ::close(fd);
  return out;
}

// The pids of the processes whose parent is `parent` (from /proc).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split at the last ')'.
    const std::string stat = proc_stat(e.path() / "stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(pid_t(std::stol(name)));
  }
  return out;
}

// Whether `pid` still runs (a zombie waiting to be reaped does not).
bool alive(pid_t pid) {
  const std::string stat = proc_stat("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  const char state = stat[stat.rfind(')') + 2];
  return state != 'Z' && state != 'X';
}

// Starts `c` under scripts/torchrun for 100000 steps and returns once both ranks run and the
// first step is logged.
Child start_long_torchrun(config::TrainConfig c, const fs::path& log, std::vector<pid_t>& ranks) {
  c.max_duration = "100000";
  Child agent(train_args(c), log, under_torchrun(2, free_port()));
  const fs::path metrics = fs::path(c.save_folder) / "metrics.jsonl";
  for (int i = 0; i < 12000 && agent.running() &&
                  !(ranks.size() == 2 && fs::exists(metrics) && fs::file_size(metrics) > 0);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ranks = children_of(agent.pid());
  }
  return agent;
}

}  // namespace

// SIGKILL to torchrun (through scripts/torchrun, the repo's wrapper) used to leave both ranks
// training as orphans, holding the save folder's lock. The ranks now die with their agent.
TEST(Launcher, RanksDieWithAKilledTorchrun) {
  const auto root = scratch("launcher_killed");
  config::TrainConfig c = tiny(root / "run");
  std::vector<pid_t> ranks;
  Child agent = start_long_torchrun(c, root / "torchrun.log", ranks);
  ASSERT_EQ(ranks.size(), 2u) << read_all(root / "torchrun.log");
  ASSERT_GT(fs::file_size(fs::path(c.save_folder) / "metrics.jsonl"), 0u) << read_all(root / "torchrun.log");

  agent.kill(SIGKILL);
  agent.wait();
  const auto killed = std::chrono::steady_clock::now();
  auto any_alive = [&] { return alive(ranks[0]) || alive(ranks[1]); };
  while (any_alive() && std::chrono::steady_clock::now() - killed < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool orphans = any_alive();
  for (pid_t r : ranks)
    if (alive(r)) ::kill(r, SIGKILL);  // the test's own ranks, left over when it fails
  EXPECT_FALSE(orphans) << "ranks still training 10 s after torchrun was killed\n"
                        << read_all(root / "torchrun.log");

  // The lock died with them: a new start takes the folder.
  config::TrainConfig again = c;
  again.max_duration = "2";
  const Outcome restarted = run_siamese(train_args(again), root / "restart.log");
  EXPECT_EQ(restarted.exit_code, 0) << restarted.output;
}

// torchrun turns every non-zero exit of a rank into its own 1 and "FAILED", so a job script
// could not tell a stopped run (resume it) from bad input or a crash. Through scripts/torchrun
// the launch exits with the ranks' code: 2 for a bad config, 4 for SIGTERM after a checkpoint.
// A bad config is reported once, by rank 0.
TEST(Launcher, ScriptsTorchrunGivesBackTheRanksExitCode) {
  const auto root = scratch("launcher_codes");
  config::TrainConfig bad = tiny(root / "bad");
  bad.optimizer.learning_rate = -1;
  const Outcome refused = run_siamese(train_args(bad), root / "bad.log", under_torchrun(2, free_port()));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("optimizer.learning_rate"), std::string::npos) << refused.output;
  // Both ranks refuse the same config before they join: the refusal is printed once, by rank 0.
  size_t refusals = 0;
  for (size_t at = refused.output.find("error: "); at != std::string::npos;
       at = refused.output.find("error: ", at + 1))
    ++refusals;
  EXPECT_EQ(refusals, 1u) << refused.output;

  config::TrainConfig c = tiny(root / "run");
  c.save_interval = 1000;  // the only checkpoint is the one the stop writes
  std::vector<pid_t> ranks;
  Child agent = start_long_torchrun(c, root / "run.log", ranks);
  ASSERT_EQ(ranks.size(), 2u) << read_all(root / "run.log");
  agent.kill(SIGTERM);
  const Outcome stopped = agent.wait();
  EXPECT_EQ(stopped.exit_code, kExitStopped) << stopped.output;
  EXPECT_NE(stopped.output.find("run the same command again to resume"), std::string::npos) << stopped.output;
  EXPECT_FALSE(intact(c.save_folder).empty()) << stopped.output;
}

// kill -9 of one rank (as the OOM killer or a user sends it) is a crash, which a restart
// retries. It used to exit 2, bad input: the other rank's failed collective wrote 2, and the
// wrapper took any SIGKILL for torchrun's own stop. Only the ranks torchrun signalled count
// as its stops now.
TEST(Launcher, AKilledRankIsACrashNotBadInput) {
  const auto root = scratch("launcher_killed_rank");
  config::TrainConfig c = tiny(root / "run");
  c.distributed.timeout_seconds = 20;
  std::vector<pid_t> ranks;
  Child agent = start_long_torchrun(c, root / "run.log", ranks);
  ASSERT_EQ(ranks.size(), 2u) << read_all(root / "run.log");
  ::kill(ranks[1], SIGKILL);
  const Outcome killed = agent.wait();
  EXPECT_EQ(killed.exit_code, 1) << killed.output;
  EXPECT_NE(killed.output.find("died of SIGKILL, and torchrun did not stop it: a crash (exit 1)"),
            std::string::npos)
      << killed.output;
}

// scripts/torchrun --max-restarts: kill -9 of one of 2 ranks after the step-4 checkpoint, and
// the launcher starts the ranks again by itself; they resume from the newest intact checkpoint
// and end with an uninterrupted run's losses at every step, bit for bit, under ddp and under
// FULL_SHARD (whose ranks resume their optimizer shards). Bad input is not retried: a bad
// config under --max-restarts 3 exits 2 once. (torchrun's own --max-restarts retried every
// failure alike, bad configs included.)
void expect_a_killed_rank_restarts_and_resumes(const std::string& name,
                                               config::DistributedStrategy strategy) {
  SCOPED_TRACE(name);
  const auto root = scratch("launcher_restarts_" + name);
  config::TrainConfig ref = tiny(root / "uninterrupted");
  ref.max_duration = "40";
  ref.save_interval = 2;
  ref.distributed.timeout_seconds = 20;
  ref.distributed_strategy = strategy;
  ASSERT_EQ(
      run_siamese(train_args(ref), root / "uninterrupted.log", under_torchrun(2, free_port())).exit_code, 0)
      << read_all(root / "uninterrupted.log");

  config::TrainConfig c = ref;
  c.save_folder = (root / "restarted").string();
  Limits limits = under_torchrun(2, free_port());
  limits.launcher.insert(limits.launcher.begin() + 1, {"--max-restarts", "1"});
  Child agent(train_args(c), root / "restarted.log", limits);
  std::vector<pid_t> ranks;
  for (int i = 0; i < 12000 && agent.running() && !fs::exists(fs::path(c.save_folder) / "step4"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ranks = children_of(agent.pid());
  }
  ASSERT_EQ(ranks.size(), 2u) << read_all(root / "restarted.log");
  ::kill(ranks[1], SIGKILL);
  const Outcome done = agent.wait();
  EXPECT_EQ(done.exit_code, 0) << done.output;
  EXPECT_NE(done.output.find("restart 1 of 1 after the crash"), std::string::npos) << done.output;
  EXPECT_NE(done.output.find("resumed from"), std::string::npos) << done.output;
  EXPECT_EQ(losses(c.save_folder), losses(ref.save_folder)) << done.output;
}

TEST(Launcher, ACrashedRankRestartsAndResumesButBadInputIsNotRetried) {
  expect_a_killed_rank_restarts_and_resumes("ddp", config::DistributedStrategy::Ddp);
  expect_a_killed_rank_restarts_and_resumes("full_shard", config::DistributedStrategy::Fsdp);

  const auto root = scratch("launcher_restarts_bad");
  config::TrainConfig bad = tiny(root / "bad");
  bad.optimizer.learning_rate = -1;
  Limits bad_limits = under_torchrun(2, free_port());
  bad_limits.launcher.insert(bad_limits.launcher.begin() + 1, {"--max-restarts", "3"});
  const Outcome refused = run_siamese(train_args(bad), root / "bad.log", bad_limits);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_EQ(refused.output.find("scripts/torchrun: restart"), std::string::npos) << refused.output;
}

// A rendezvous port another process listens on ended in torchrun's Python traceback and exit 1.
TEST(Launcher, APortInUseIsOneLineNamingItAndBadInput) {
  const auto root = scratch("launcher_port");
  config::TrainConfig c = tiny(root / "run");
  c.max_duration = "2";
  const HeldPort held;
  const Outcome in_use = run_siamese(train_args(c), root / "in_use.log", under_torchrun(2, held.port));
  EXPECT_EQ(in_use.exit_code, 2) << in_use.output;
  EXPECT_NE(in_use.output.find("scripts/torchrun: port " + std::to_string(held.port) + " is already in use"),
            std::string::npos)
      << in_use.output;
  EXPECT_NE(in_use.output.find("--master_port"), std::string::npos) << in_use.output;
  EXPECT_EQ(in_use.output.find("Traceback"), std::string::npos) << in_use.output;
  EXPECT_FALSE(fs::exists(fs::path(c.save_folder) / "metrics.jsonl"));
}

// HYBRID_SHARD on 2 ranks started without LOCAL_WORLD_SIZE (the default was the whole world,
// so it ran as FULL_SHARD), and 2 ranks launched with different sharding strategies (the
// HYBRID_SHARD rank built its shard groups, the other waited, both until the timeout). Both
// are refused on every rank, naming the key, before any group of the strategy is built.
TEST(LaunchSettings, HybridWithoutANodeSizeAndUnequalStrategiesAreRefused) {
  const auto root = scratch("launch_settings");
  config::TrainConfig c = tiny(root / "run");
  c.max_duration = "2";
  c.distributed.timeout_seconds = 15;  // the stall this refuses fails the test soon
  auto ranks = start_sharded(c, 2, (root / "no_node.log").string(),
                             {"--distributed_strategy=fsdp", "--fsdp.sharding_strategy=HYBRID_SHARD"});
  const Outcome no_node = wait_sharded(ranks);
  EXPECT_EQ(no_node.exit_code, 2) << no_node.output;
  for (const char* said :
       {"no LOCAL_WORLD_SIZE, no Slurm tasks per node", "fsdp.hybrid_sharding_num_model_replicas"})
    EXPECT_NE(no_node.output.find(said), std::string::npos) << no_node.output;
  EXPECT_FALSE(fs::exists(fs::path(c.save_folder) / "metrics.jsonl"));

  const std::string port = std::to_string(free_port());
  std::vector<std::unique_ptr<Child>> mixed;
  for (const char* strategy : {"HYBRID_SHARD", "FULL_SHARD"}) {
    const std::string r = std::to_string(mixed.size());
    Limits limits;
    limits.env = {{"RANK", r},           {"LOCAL_RANK", r},
                  {"WORLD_SIZE", "2"},   {"LOCAL_WORLD_SIZE", "2"},
                  {"MASTER_PORT", port}, {"MASTER_ADDR", "127.0.0.1"}};
    mixed.push_back(std::make_unique<Child>(
        train_args(c, {"--distributed_strategy=fsdp", std::string("--fsdp.sharding_strategy=") + strategy,
                       "--fsdp.hybrid_sharding_num_model_replicas=2"}),
        (root / ("mixed.log.r" + r)).string(), limits));
  }
  const auto start = std::chrono::steady_clock::now();
  const Outcome refused = wait_sharded(mixed);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not before the timeout";
  EXPECT_NE(refused.output.find("the 2 ranks were launched with different settings: fsdp.sharding_strategy"),
            std::string::npos)
      << refused.output;
  EXPECT_FALSE(fs::exists(fs::path(c.save_folder) / "metrics.jsonl"));
}

// A rendezvous port another process holds, and a rank that was never started: both were
// reported with LibTorch's C++ backtrace, the first with a fix about addresses, the second as
// "another rank probably died". Each now says what happened and what to change, exit 2.
TEST(Rendezvous, APortInUseAndAMissingRankAreNamedWithoutABacktrace) {
  const auto root = scratch("rendezvous");
  config::TrainConfig c = tiny(root / "run");
  c.max_duration = "2";
  c.distributed.timeout_seconds = 3;
  auto rank0_of_2 = [](int port) {
    Limits limits;
    limits.env = {{"RANK", "0"},
                  {"LOCAL_RANK", "0"},
                  {"WORLD_SIZE", "2"},
                  {"LOCAL_WORLD_SIZE", "2"},
                  {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", std::to_string(port)}};
    return limits;
  };
  const HeldPort held;
  const Outcome in_use = run_siamese(train_args(c), root / "in_use.log", rank0_of_2(held.port));
  EXPECT_EQ(in_use.exit_code, 2) << in_use.output;
  EXPECT_NE(in_use.output.find("port 127.0.0.1:" + std::to_string(held.port) + " is already in use"),
            std::string::npos)
      << in_use.output;
  EXPECT_NE(in_use.output.find("--master_port"), std::string::npos) << in_use.output;

  const Outcome alone = run_siamese(train_args(c), root / "alone.log", rank0_of_2(free_port()));
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  EXPECT_NE(alone.output.find("not all 2 ranks joined the process group within 3 s"), std::string::npos)
      << alone.output;
  EXPECT_NE(alone.output.find("WORLD_SIZE=2"), std::string::npos) << alone.output;
  for (const Outcome* out : {&in_use, &alone})
    EXPECT_EQ(out->output.find("Exception raised from"), std::string::npos) << out->output;
  EXPECT_FALSE(fs::exists(fs::path(c.save_folder) / "metrics.jsonl"));
}
