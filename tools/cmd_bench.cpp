// `siamese bench CONFIG`: training-step throughput and where the time goes (data, forward,
// backward, optimizer), peak memory and MFU. `--compare pre,hybrid_pre` builds one model
// per topology and alternates them over several rounds in one process, so machine noise
// hits both alike, then prints the step-time ratio.
// Under torchrun / srun it measures data-parallel scaling instead: rank 0 alone, then all
// ranks with the all-reduce overlapped with backward, then all ranks with it after
// backward, alternating over rounds, and prints tokens/s, scaling efficiency and the
// share of the step spent blocked on communication.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>

#include "commands.h"
#include "siamese/common/autocast.h"
#include "siamese/common/error.h"
#include "siamese/config/validate.h"
#include "siamese/data/batch_order.h"
#include "siamese/data/token_dataset.h"
#include "siamese/dist/communicator.h"
#include "siamese/dist/grad_bucketer.h"
#include "siamese/dist/world.h"
#include "siamese/model/registry.h"
#include "siamese/model/transformer.h"
#include "siamese/train/device_clock.h"
#include "siamese/train/loss_scale.h"
#include "siamese/train/optimizer.h"
#include "siamese/train/runtime.h"
#include "siamese/train/train_step.h"

namespace siamese::cli {

namespace {

struct BenchArgs {
  ConfigArgs config;
  int steps = 5;
  int warmup = 2;
  int rounds = 3;
  std::string compare;
};

struct Split {
  double data = 0, forward = 0, backward = 0, optimizer = 0;
  double comm = 0;  // part of backward spent blocked on the gradient all-reduce
  double total() const { return data + forward + backward + optimizer; }
};

// One model under test with its optimizer, loss scaler and data stream.
struct Subject {
  std::string topology;
  TrainConfig cfg;
  model::Transformer model{nullptr};
  std::unique_ptr<train::AdamW> optim;
  std::unique_ptr<train::LossScaler> scaler;
  int64_t step = 0;
  std::vector<Split> splits;
  double peak_memory_mib = 0;
};

// The data-parallel hooks of training (train::DataParallelSync) over one of the bench's
// bucketers, so that each scaling setup runs the training step with its own.
class BucketerSync : public GradientSync {
 public:
  explicit BucketerSync(GradBucketer& bucketer) : bucketer_(bucketer) {}
  void before_backward(bool last_micro_batch) override { bucketer_.prepare(last_micro_batch); }
  void after_backward() override { bucketer_.finish(); }
  double take_comm_seconds() override {
    const double s = bucketer_.blocked_seconds();
    bucketer_.reset_timers();
    return s;
  }

 private:
  GradBucketer& bucketer_;
};

train::TrainStep training_step(Subject& s, GradientSync& sync, torch::Device device, int world_size) {
  const int64_t micro =
      std::min(s.cfg.device_train_microbatch_size, s.cfg.global_train_batch_size / world_size);
  return train::TrainStep(s.cfg, *s.model, *s.optim, sync, *s.scaler, device, micro);
}

// One training step as `siamese train` runs it (train_step.h), at the configured peak
// learning rate. Phases are timed by marks on the device's timeline (CUDA events), so the
// step runs as in training, without a host sync between phases.
Split timed_step(Subject& s, train::TrainStep& step, GradientSync& sync, data::TokenDataset& ds,
                 data::BatchOrder& order, torch::Device device) {
  Split t;
  train::DeviceClock clock(device);
  const size_t start = clock.mark();
  auto batch = ds.batch(order.rank_batch(s.step++));
  if (device.is_cuda() && s.cfg.data.pin_memory) batch = batch.pin_memory();
  batch = batch.to(device, /*non_blocking=*/true);
  const size_t loaded = clock.mark();
  train::StepMarks marks;
  step.run(batch, s.cfg.optimizer.learning_rate, {}, &clock, &marks);
  const size_t end = clock.mark();
  t.optimizer = clock.seconds(marks.update_start, end);  // waits for the step to finish
  t.data = clock.seconds(start, loaded);
  for (const auto& [f0, f1, f2] : marks.micro_batches) {
    t.forward += clock.seconds(f0, f1);
    t.backward += clock.seconds(f1, f2);
  }
  t.comm = sync.take_comm_seconds();
  s.peak_memory_mib = std::max(s.peak_memory_mib, train::peak_memory_mib(device));
  return t;
}

// The achievable matmul rate on `device` in this run (FLOP/s), the yardstick for MFU when
// no peak_tflops is configured: fp32 n=2048 on CPU; on CUDA bf16 (amp) or fp32 (TF32 when
// allowed) n=8192. Best of several repeats.
double measured_matmul_flops(torch::Device device, const std::string& precision) {
  const int64_t n = device.is_cuda() ? 8192 : 2048;
  const auto dtype = device.is_cuda() && precision == "amp_bf16"   ? torch::kBFloat16
                     : device.is_cuda() && precision == "amp_fp16" ? torch::kHalf
                                                                   : torch::kFloat;
  auto a = torch::randn({n, n}, torch::dtype(dtype).device(device));
  auto b = torch::randn({n, n}, torch::dtype(dtype).device(device));
  train::DeviceClock clock(device);
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    const size_t m0 = clock.mark();
    auto c = torch::mm(a, b);
    const double s = clock.seconds(m0, clock.mark());
    if (i > 0) best = std::max(best, 2.0 * n * n * n / s);  // the first call warms up
  }
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// MFU against the configured hardware peak (peak_tflops) when set, and always against the
// matmul rate measured in this run.
void report(const Subject& s, torch::Device device, double matmul_flops) {
  const int64_t T = s.cfg.model.max_sequence_length;
  const double tokens = double(s.cfg.global_train_batch_size) * T;
  std::vector<double> totals;
  Split med;
  std::vector<double> d, f, b, o;
  for (const auto& x : s.splits) {
    totals.push_back(x.total());
    d.push_back(x.data), f.push_back(x.forward), b.push_back(x.backward), o.push_back(x.optimizer);
  }
  const double step = median(totals);
  const double fpt = model::flops_per_token(s.cfg.model, T);
  const double achieved = tokens / step * fpt;
  std::string mfu =
      fmt::format("{:.1f}% of measured matmul", 100 * model::mfu(tokens / step, fpt, matmul_flops));
  if (s.cfg.peak_tflops)
    mfu += fmt::format(", {:.1f}% of peak_tflops {}",
                       100 * model::mfu(tokens / step, fpt, *s.cfg.peak_tflops * 1e12), *s.cfg.peak_tflops);
  fmt::print(
      "{:<12} step {:.4f} s  tokens/s {:.0f}  {:.1f} GFLOP/s  data {:.1f}%  forward {:.1f}%  "
      "backward {:.1f}%  optimizer {:.1f}%  MFU {}  peak memory {:.0f} MiB{}  ({} params, "
      "{:.3g} GFLOP/token, {} steps)\n",
      s.topology, step, tokens / step, achieved / 1e9, 100 * median(d) / step, 100 * median(f) / step,
      100 * median(b) / step, 100 * median(o) / step, mfu, s.peak_memory_mib,
      device.is_cuda() ? " (CUDA allocator)" : " (process RSS)", model::count_parameters(s.cfg.model).total(),
      fpt / 1e9, s.splits.size());
}

Subject make_subject(const TrainConfig& base, const std::string& topology, torch::Device device) {
  Subject s;
  s.topology = topology;
  s.cfg = base;
  s.cfg.model.residual = topology;
  // Topologies defined with per-head QKV norms (the HybridNorm family) get them; the
  // others keep the config's setting, so one config serves every topology compared.
  model::apply_required_settings(s.cfg.model);
  torch::manual_seed(base.seed);
  s.model = model::Transformer(s.cfg.model);
  s.model->to(device);
  s.model->train();
  s.optim = train::build_optimizer(s.cfg.optimizer, s.model->named_parameters());
  s.scaler = std::make_unique<train::LossScaler>(s.cfg.precision == "amp_fp16", s.cfg.fp16_initial_loss_scale,
                                                 s.cfg.fp16_loss_scale_growth_interval, device);
  return s;
}

// Data-parallel scaling under a launcher. Every rank does the same per-rank work in each
// setup (global batch / world size sequences), so efficiency = step(1 rank) / step(N ranks).
// Both bucketers hang on the same parameters; only the one prepared with sync=true acts.
int run_scaling_bench(const BenchArgs& a, const TrainConfig& base, const World& world) {
  if (!a.compare.empty())
    throw Error("--compare is not available under a distributed launch", "--compare",
                "compare topologies in a single process (no torchrun), or drop --compare");
  validate_for_world_size(base, world.size);
  const torch::Device device = train::resolve_device(base.device, world.local_rank);
  Communicator comm(world, device, std::chrono::seconds(base.distributed.timeout_seconds));
  Subject s = make_subject(base, base.model.residual, device);
  {
    torch::NoGradGuard no_grad;
    for (auto p : s.model->parameters()) comm.broadcast(p);
  }
  const auto bucket_bytes = static_cast<int64_t>(base.distributed.bucket_mb * (1 << 20));
  GradBucketer overlapped(comm, s.model->parameters(), bucket_bytes, /*overlap=*/true);
  GradBucketer after_backward(comm, s.model->parameters(), bucket_bytes, /*overlap=*/false);
  data::TokenDataset ds = data::train_dataset(base);
  data::BatchOrder order(ds.size(), base.global_train_batch_size,
                         static_cast<uint64_t>(base.data.seed.value_or(base.seed)), world.rank, world.size);
  const int64_t rank_tokens = base.global_train_batch_size / world.size * base.model.max_sequence_length;

  GradientSync alone;
  BucketerSync overlapped_sync(overlapped), after_backward_sync(after_backward);
  struct Setup {
    std::string name;
    int ranks;
    GradientSync* sync;
    std::vector<Split> splits;
  };
  std::vector<Setup> setups = {
      {"1 rank", 1, &alone, {}},
      {fmt::format("{} ranks, all-reduce overlapped with backward", world.size),
       world.size,
       &overlapped_sync,
       {}},
      {fmt::format("{} ranks, all-reduce after backward", world.size), world.size, &after_backward_sync, {}}};
  if (world.is_main())
    fmt::print(
        "bench: data-parallel scaling of {} over {} ranks ({} threads each, device {}), "
        "{} x {} tokens per rank, {} warmup + {} timed steps x {} round(s)\n",
        s.topology, world.size, at::get_num_threads(), device.str(),
        base.global_train_batch_size / world.size, base.model.max_sequence_length, a.warmup, a.steps,
        a.rounds);
  for (int r = 0; r < a.rounds; ++r)
    for (auto& setup : setups) {
      overlapped.prepare(false);
      after_backward.prepare(false);
      comm.barrier();
      if (setup.ranks == 1 && !world.is_main()) continue;  // wait at the next barrier
      train::TrainStep step = training_step(s, *setup.sync, device, world.size);
      for (int i = 0; i < (r == 0 ? a.warmup : 0) + a.steps; ++i) {
        Split t = timed_step(s, step, *setup.sync, ds, order, device);
        if (i >= (r == 0 ? a.warmup : 0)) setup.splits.push_back(t);
      }
    }
  comm.barrier();
  if (!world.is_main()) return 0;
  double single = 0;
  fmt::print("{:<52} {:>10} {:>10} {:>11} {:>11}\n", "setup", "tokens/s", "step s", "efficiency",
             "comm share");
  for (const auto& setup : setups) {
    std::vector<double> steps, shares;
    for (const auto& x : setup.splits) steps.push_back(x.total()), shares.push_back(x.comm / x.total());
    const double step = median(steps);
    if (setup.ranks == 1) single = step;
    fmt::print("{:<52} {:>10.0f} {:>10.6f} {:>11.2f} {:>10.2f}%\n", setup.name,
               double(rank_tokens * setup.ranks) / step, step, single / step, 100 * median(shares));
  }
  fmt::print(
      "efficiency = tokens/s(N ranks) / (N x tokens/s(1 rank)); comm share = median time "
      "blocked on the all-reduce / step time\n");
  return 0;
}

int run_bench(const BenchArgs& a) {
  train::configure_cpu_runtime();
  const TrainConfig base = load_run_config(a.config);
  const World world = detect_world();
  if (world.distributed()) return run_scaling_bench(a, base, world);
  const torch::Device device = train::resolve_device(base.device);
  if (device.is_cuda()) train::configure_cuda_runtime(device, base.allow_tf32);
  train::check_flash_attention(base.model, device, autocast_dtype(base.precision));
  std::vector<std::string> topologies;
  if (a.compare.empty()) {
    topologies.push_back(base.model.residual);
  } else {
    std::stringstream ss(a.compare);
    for (std::string t; std::getline(ss, t, ',');) topologies.push_back(t);
  }
  data::TokenDataset ds = data::train_dataset(base);
  std::vector<Subject> subjects;
  for (const auto& topo : topologies) subjects.push_back(make_subject(base, topo, device));
  data::BatchOrder order(ds.size(), base.global_train_batch_size,
                         static_cast<uint64_t>(base.data.seed.value_or(base.seed)));
  const double matmul_flops = measured_matmul_flops(device, base.precision);
  fmt::print(
      "bench: {} threads, device {}, precision {}, activation_checkpointing {}, batch {} x {} "
      "tokens in micro-batches of {}, {} warmup + {} timed steps x {} round(s); matmul "
      "measured at {:.1f} GFLOP/s\n",
      at::get_num_threads(), device.str(), base.precision,
      base.model.activation_checkpointing.empty() ? "off" : base.model.activation_checkpointing,
      base.global_train_batch_size, base.model.max_sequence_length,
      std::min(base.device_train_microbatch_size, base.global_train_batch_size), a.warmup, a.steps, a.rounds,
      matmul_flops / 1e9);
  // Each subject's peak is its own steps' (the counter is reset before them); it includes
  // every compared model's weights and optimizer state, which all stay resident.
  GradientSync alone;
  std::vector<train::TrainStep> steps;
  for (auto& s : subjects) steps.push_back(training_step(s, alone, device, 1));
  for (size_t k = 0; k < subjects.size(); ++k) {
    train::reset_peak_memory(device);
    for (int i = 0; i < a.warmup; ++i) timed_step(subjects[k], steps[k], alone, ds, order, device);
  }
  const int rounds = topologies.size() > 1 ? a.rounds : 1;
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < subjects.size(); ++k) {
      train::reset_peak_memory(device);
      for (int i = 0; i < a.steps; ++i)
        subjects[k].splits.push_back(timed_step(subjects[k], steps[k], alone, ds, order, device));
    }
  for (const auto& s : subjects) report(s, device, matmul_flops);
  if (subjects.size() > 1) {
    std::vector<double> first;
    for (const auto& x : subjects[0].splits) first.push_back(x.total());
    for (size_t i = 1; i < subjects.size(); ++i) {
      std::vector<double> other;
      for (const auto& x : subjects[i].splits) other.push_back(x.total());
      fmt::print("ratio {}/{}: {:.3f} (median step time over {} alternating rounds)\n", subjects[i].topology,
                 subjects[0].topology, median(other) / median(first), rounds);
    }
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("bench", "Time training steps: tokens/s, step split, memory, MFU");
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("--steps", a->steps, "Timed steps per topology and round");
  cmd->add_option("--warmup", a->warmup, "Untimed steps first");
  cmd->add_option("--rounds", a->rounds, "Alternating rounds in --compare mode and under torchrun (scaling)");
  cmd->add_option("--compare", a->compare, "Comma-separated topologies, e.g. pre,hybrid_pre");
  add_config_args(cmd, a->config);
  cmd->callback([&run, a] { run = [a] { return run_bench(*a); }; });
}

}  // namespace siamese::cli
