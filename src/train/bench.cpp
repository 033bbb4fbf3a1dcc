#include "siamese/train/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>

#include "siamese/common/autocast.h"
#include "siamese/config/validate.h"
#include "siamese/data/batch_order.h"
#include "siamese/data/token_dataset.h"
#include "siamese/dist/communicator.h"
#include "siamese/dist/data_parallel.h"
#include "siamese/dist/parallel_plan.h"
#include "siamese/dist/sharded.h"
#include "siamese/model/kernel_choice.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "siamese/train/attention_kernels.h"
#include "siamese/train/device_clock.h"
#include "siamese/train/loss_scale.h"
#include "siamese/train/optimizer.h"
#include "siamese/train/parallelize.h"
#include "siamese/train/runtime.h"
#include "siamese/train/setup.h"
#include "siamese/train/train_step.h"

namespace siamese::train {

namespace {

// A subject's label as a file name: "pre:model.layer_norm_type=dyt" -> "pre_model.layer_norm_type_dyt".
std::string file_label(std::string label) {
  for (char& c : label)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  return label;
}

// One model under test with its optimizer, loss scaler and position in the data.
struct Subject {
  TopologyTiming timing;
  Trainee trainee;
  int64_t step = 0;
};

// The model as the trainer sets it up under `plan` (setup.h).
std::unique_ptr<Subject> make_subject(const BenchSubject& subject, torch::Device device,
                                      dist::ParallelPlan& plan) {
  auto s = std::make_unique<Subject>();
  s->timing.topology = subject.label;
  s->timing.config = subject.config;
  s->trainee = build_trainee(s->timing.config, device, plan);
  s->trainee.model->train();
  return s;
}

TrainStep training_step(Subject& s, dist::ParallelPlan& plan, torch::Device device, int world_size) {
  const config::TrainConfig& cfg = s.timing.config;
  const int64_t micro = std::min(cfg.device_train_microbatch_size, cfg.global_train_batch_size / world_size);
  return TrainStep(config::step_section(cfg), *s.trainee.model, *s.trainee.optim, plan, *s.trainee.scaler,
                   device, micro);
}

// One training step as `siamese train` runs it, at the configured peak learning rate.
// Phases are timed by marks on the device's timeline (CUDA events), so the step runs as
// in training, without a host sync between phases.
StepSplit timed_step(Subject& s, TrainStep& step, dist::ParallelPlan& plan, data::TokenDataset& ds,
                     data::BatchOrder& order, torch::Device device) {
  const config::TrainConfig& cfg = s.timing.config;
  StepSplit t;
  DeviceClock clock(device);
  const size_t start = clock.mark();
  auto batch = ds.batch(order.rank_batch(s.step++));
  if (device.is_cuda() && cfg.data.pin_memory) batch = batch.pin_memory();
  batch = batch.to(device, /*non_blocking=*/true);
  const size_t loaded = clock.mark();
  StepMarks marks;
  step.run(batch, cfg.optimizer.learning_rate, {false, &clock, &marks});
  const size_t end = clock.mark();
  t.optimizer = clock.seconds(marks.update_start, end);  // waits for the step to finish
  t.data = clock.seconds(start, loaded);
  for (const auto& [f0, f1, f2] : marks.micro_batches) {
    t.forward += clock.seconds(f0, f1);
    t.backward += clock.seconds(f1, f2);
  }
  t.comm = plan.gradients().take_comm_seconds();
  s.timing.peak_memory_mib = std::max(s.timing.peak_memory_mib, peak_memory_mib(device));
  return t;
}

}  // namespace

double measured_matmul_flops(torch::Device device, config::Precision precision, bool quick) {
  const int64_t n = (device.is_cuda() ? 8192 : 2048) / (quick ? 2 : 1);
  const auto dtype = device.is_cuda() ? autocast_dtype(precision).value_or(torch::kFloat) : torch::kFloat;
  // Constant operands: a matmul's speed does not depend on the values, and the training RNG,
  // restored from a checkpoint when this runs before a resumed run's first step, stays as it was.
  auto a = torch::full({n, n}, 1.0 / double(n), torch::dtype(dtype).device(device));
  auto b = a.clone();
  DeviceClock clock(device);
  double best = 0;
  for (int i = 0; i < (quick ? 3 : 6); ++i) {
    const size_t m0 = clock.mark();
    auto c = torch::mm(a, b);
    const double s = clock.seconds(m0, clock.mark());
    if (i > 0) best = std::max(best, 2.0 * n * n * n / s);  // the first call warms up
  }
  return best;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

TopologyBench bench_topologies(const std::vector<BenchSubject>& compared, const BenchOptions& options,
                               const std::function<void(const TopologyBench&)>& started) {
  const config::TrainConfig& base = compared.at(0).config;
  const torch::Device device = resolve_device(base.device);
  model::use_kernels(base.model.kernels);
  if (device.is_cuda()) configure_cuda_runtime(device, base.allow_tf32);
  check_flash_attention(base.model, device, autocast_dtype(base.precision));
  data::TokenDataset ds = data::train_dataset(config::data_section(base));
  dist::ParallelPlan alone;
  std::vector<std::unique_ptr<Subject>> subjects;
  for (const auto& subject : compared) subjects.push_back(make_subject(subject, device, alone));
  data::BatchOrder order(ds.size(), base.global_train_batch_size,
                         static_cast<uint64_t>(base.data.seed.value_or(base.seed)));
  TopologyBench bench;
  if (options.matmul_rate) bench.matmul_flops = measured_matmul_flops(device, base.precision);
  bench.rounds = compared.size() > 1 ? options.rounds : 1;
  if (started) started(bench);
  // Each subject's peak is its own steps' (the counter is reset before them); it includes
  // every compared model's weights and optimizer state, which all stay resident.
  std::vector<TrainStep> steps;
  for (auto& s : subjects) steps.push_back(training_step(*s, alone, device, 1));
  for (size_t k = 0; k < subjects.size(); ++k) {
    reset_peak_memory(device);
    for (int i = 0; i < options.warmup; ++i) timed_step(*subjects[k], steps[k], alone, ds, order, device);
  }
  for (int r = 0; r < bench.rounds; ++r)
    for (size_t k = 0; k < subjects.size(); ++k) {
      reset_peak_memory(device);
      for (int i = 0; i < options.steps; ++i)
        subjects[k]->timing.steps.push_back(timed_step(*subjects[k], steps[k], alone, ds, order, device));
    }
  if (options.profile)
    for (size_t k = 0; k < subjects.size(); ++k) {
      OpProfile profile(device.is_cuda());
      for (int i = 0; i < options.steps; ++i) timed_step(*subjects[k], steps[k], alone, ds, order, device);
      std::string trace;
      if (!options.trace_dir.empty()) {
        std::filesystem::create_directories(options.trace_dir);
        trace = (std::filesystem::path(options.trace_dir) /
                 (file_label(subjects[k]->timing.topology) + ".trace.json"))
                    .string();
      }
      auto [host, kernels] = profile.stop(trace);
      subjects[k]->timing.trace_path = trace;
      subjects[k]->timing.ops = std::move(host);
      subjects[k]->timing.kernels = std::move(kernels);
      subjects[k]->timing.profiled_steps = options.steps;
    }
  for (auto& s : subjects) bench.timings.push_back(std::move(s->timing));
  return bench;
}

std::vector<ScalingSetup> bench_scaling(const config::TrainConfig& base, const dist::World& world,
                                        const BenchOptions& options) {
  config::validate_for_world_size(base, world.size);
  const torch::Device device = resolve_device(base.device, world.local_rank);
  model::use_kernels(base.model.kernels);
  dist::Communicator comm(world, device, std::chrono::seconds(base.distributed.timeout_seconds),
                          comm_backend(base.distributed, device));
  dist::ParallelPlan alone;
  auto subject = make_subject({base.model.residual, base}, device, alone);
  Subject& s = *subject;
  dist::DataParallelOptions overlapped_options;
  overlapped_options.bucket_bytes = static_cast<int64_t>(base.distributed.bucket_mb * (1 << 20));
  dist::DataParallelOptions after_backward_options = overlapped_options;
  after_backward_options.overlap = false;
  // Both hang hooks on the same parameters; only the one asked to sync a backward acts, and
  // the subject's optimizer waits for whichever setup is being timed.
  dist::ParallelPlan overlapped = dist::ParallelPlan::data_parallel(comm, overlapped_options);
  dist::ParallelPlan after_backward = dist::ParallelPlan::data_parallel(comm, after_backward_options);
  overlapped.gradients().attach(s.trainee.model->parameters());
  after_backward.gradients().attach(s.trainee.model->parameters());
  dist::GradientStrategy* timed = nullptr;
  s.trainee.optim->add_pre_step_hook([&timed] { timed->finish(); });
  data::TokenDataset ds = data::train_dataset(config::data_section(base));
  data::BatchOrder order(ds.size(), base.global_train_batch_size,
                         static_cast<uint64_t>(base.data.seed.value_or(base.seed)), world.rank, world.size);

  // The config's sharded strategy, on a model of its own and a process group of its own.
  const bool sharded = config::shards_optimizer_state(base);
  std::vector<int> everyone(world.size);
  std::iota(everyone.begin(), everyone.end(), 0);
  std::optional<dist::ParallelPlan> shards;
  std::unique_ptr<Subject> sharded_subject;
  if (sharded) {
    shards = dist::ParallelPlan::sharded(comm.subgroup("bench-sharded", everyone),
                                         sharded_options(config::parallel_section(base), world));
    sharded_subject = make_subject({base.model.residual, base}, device, *shards);
  }

  struct Setup {
    ScalingSetup result;
    dist::ParallelPlan* plan;
    Subject* subject;
  };
  std::vector<Setup> setups = {{{"1 rank", 1, {}}, &alone, &s}};
  // Where the trainer would not overlap (activation checkpointing), neither is timed so.
  if (reduces_during_backward(config::parallel_section(base)))
    setups.push_back(
        {{fmt::format("{} ranks, ddp, all-reduce overlapped", world.size), world.size, {}}, &overlapped, &s});
  setups.push_back({{fmt::format("{} ranks, ddp, all-reduce after backward", world.size), world.size, {}},
                    &after_backward,
                    &s});
  if (sharded)
    setups.push_back(
        {{fmt::format("{} ranks, fsdp {}", world.size, name_of(base.fsdp.sharding_strategy)), world.size, {}},
         &*shards,
         sharded_subject.get()});
  for (int r = 0; r < options.rounds; ++r)
    for (auto& setup : setups) {
      overlapped.gradients().set_requires_sync(false);
      after_backward.gradients().set_requires_sync(false);
      timed = &setup.plan->gradients();
      comm.barrier();
      if (setup.result.ranks == 1 && !world.is_main()) continue;  // wait at the next barrier
      TrainStep step = training_step(*setup.subject, *setup.plan, device, world.size);
      const int warmup = r == 0 ? options.warmup : 0;
      for (int i = 0; i < warmup + options.steps; ++i) {
        StepSplit t = timed_step(*setup.subject, step, *setup.plan, ds, order, device);
        if (i >= warmup) setup.result.steps.push_back(t);
      }
    }
  comm.barrier();
  for (auto& setup : setups) {
    int64_t param_bytes = 0;
    for (const auto& p : setup.subject->trainee.model->parameters()) param_bytes += p.nbytes();
    setup.result.state_bytes = setup.plan->gradients().parameter_bytes(param_bytes) +
                               setup.plan->gradients().gradient_bytes(param_bytes) +
                               setup.subject->trainee.optim->state_bytes();
  }
  std::vector<ScalingSetup> out;
  if (world.is_main())
    for (auto& setup : setups) out.push_back(std::move(setup.result));
  return out;
}

}  // namespace siamese::train
