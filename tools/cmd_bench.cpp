// `siamese bench CONFIG`: training-step throughput and where the time goes (data, forward,
// backward, optimizer), peak memory and MFU. `--compare pre,hybrid_pre` builds one model
// per entry and alternates them over several rounds in one process, so machine noise hits
// all alike, then prints the step-time ratios to the first. An entry may carry overrides of
// its own after the topology (`pre:model.layer_norm_type=dyt:optimizer.name=muon`), so norm
// types and optimizers are compared the same way.
// Under torchrun / srun it measures data-parallel scaling instead (train/bench.h) and prints
// tokens/s, scaling efficiency and the share of the step spent blocked on communication.
#include <fmt/format.h>

#include <memory>
#include <sstream>

#include "commands.h"
#include "siamese/common/error.h"
#include "siamese/config/variant.h"
#include "siamese/dist/world.h"
#include "siamese/model/accounting.h"
#include "siamese/train/bench.h"
#include "siamese/train/device_peaks.h"
#include "siamese/train/runtime.h"

namespace siamese::cli {

namespace {

struct BenchArgs {
  ConfigArgs config;
  train::BenchOptions options;
  std::string compare;
  int profile_top = 0;
};

// MFU against the hardware peak (peak_tflops, else the GPU's from train/device_peaks.h) where
// there is one, and always against the matmul rate measured in this run.
void print_timing(const train::TopologyTiming& t, torch::Device device, double matmul_flops) {
  const config::TrainConfig& cfg = t.config;
  const int64_t T = cfg.model.max_sequence_length;
  const double tokens = double(cfg.global_train_batch_size) * T;
  std::vector<double> totals, d, f, b, o;
  for (const auto& x : t.steps) {
    totals.push_back(x.total());
    d.push_back(x.data), f.push_back(x.forward), b.push_back(x.backward), o.push_back(x.optimizer);
  }
  using train::median;
  const double step = median(totals);
  const double fpt = model::flops_per_token(cfg.model, T);
  const double achieved = tokens / step * fpt;
  std::string mfu =
      fmt::format("{:.1f}% of measured matmul", 100 * model::mfu(tokens / step, fpt, matmul_flops));
  if (const auto peak = train::mfu_peak(cfg.peak_tflops, device, cfg.precision, cfg.allow_tf32); peak.tflops)
    mfu += fmt::format(", {:.1f}% of the {} TFLOP/s peak",
                       100 * model::mfu(tokens / step, fpt, *peak.tflops * 1e12), *peak.tflops);
  fmt::print(
      "{:<12} step {:.6f} s  tokens/s {:.0f}  {:.1f} GFLOP/s  data {:.1f}%  forward {:.1f}%  "
      "backward {:.1f}%  optimizer {:.1f}%  MFU {}  peak memory {:.0f} MiB{}  ({} params, "
      "{:.3g} GFLOP/token, {} steps)\n",
      t.topology, step, tokens / step, achieved / 1e9, 100 * median(d) / step, 100 * median(f) / step,
      100 * median(b) / step, 100 * median(o) / step, mfu, t.peak_memory_mib,
      device.is_cuda() ? " (CUDA allocator)" : " (process RSS)", model::count_parameters(cfg.model).total(),
      fpt / 1e9, t.steps.size());
}

// An op's name without the wrappers every custom autograd node shares, so that a column
// of 56 characters shows which node it is ("CppNode<siamese::model::(anonymous
// namespace)::SwigluFunction>" prints as "node SwigluFunction").
std::string short_op_name(std::string name) {
  const bool node = name.find("CppNode<") != std::string::npos;
  for (const std::string wrapper :
       {"torch::autograd::CppNode<", "siamese::model::", "(anonymous namespace)::"}) {
    for (auto at = name.find(wrapper); at != std::string::npos; at = name.find(wrapper))
      name.replace(at, wrapper.size(), wrapper[0] == 't' ? "node " : "");
  }
  if (node && !name.empty() && name.back() == '>') name.pop_back();
  return name;
}

// One profile table: the entries with the most self time per profiled step.
void print_profile_table(const std::string& title, const std::vector<train::OpTime>& ops, double steps,
                         int top, size_t name_width) {
  double all = 0;
  for (const auto& op : ops) all += op.self_seconds;
  fmt::print("{}: {:.1f} ms per step over {} profiled steps\n", title, 1e3 * all / steps, steps);
  fmt::print("  {:<{}} {:>10} {:>7} {:>10} {:>8}\n", "name", name_width, "self ms", "share", "total ms",
             "calls");
  for (size_t i = 0; i < ops.size() && i < static_cast<size_t>(top); ++i) {
    const auto& op = ops[i];
    fmt::print("  {:<{}} {:>10.2f} {:>6.1f}% {:>10.2f} {:>8.0f}\n",
               short_op_name(op.name).substr(0, name_width), name_width, 1e3 * op.self_seconds / steps,
               100 * op.self_seconds / all, 1e3 * op.total_seconds / steps, op.calls / steps);
  }
}

// The ops that take most host time per step (self time: inside the op, not in the ops it
// called), the table scripts/bench_pytorch.py --profile prints for the PyTorch step; on a GPU
// the device's kernels too, whose time is where a step that waits for the GPU goes.
void print_ops(const train::TopologyTiming& t, int top) {
  print_profile_table(fmt::format("profile {}: host op self time", t.topology), t.ops, t.profiled_steps, top,
                      56);
  if (!t.kernels.empty())
    print_profile_table(fmt::format("profile {}: GPU time of kernels, copies and memsets", t.topology),
                        t.kernels, t.profiled_steps, top, 100);
}

int run_scaling_bench(const BenchArgs& a, const config::TrainConfig& base, const dist::World& world) {
  if (!a.compare.empty())
    throw Error("--compare is not available under a distributed launch", "--compare",
                "compare topologies in a single process (no torchrun), or drop --compare");
  if (world.is_main())
    fmt::print(
        "bench: data-parallel scaling of {} over {} ranks ({} threads each, device {}), "
        "{} x {} tokens per rank, {} warmup + {} timed steps x {} round(s)\n",
        base.model.residual, world.size, at::get_num_threads(),
        train::resolve_device(base.device, world.local_rank).str(), base.global_train_batch_size / world.size,
        base.model.max_sequence_length, a.options.warmup, a.options.steps, a.options.rounds);
  const auto setups = train::bench_scaling(base, world, a.options);
  if (!world.is_main()) return 0;
  const int64_t rank_tokens = base.global_train_batch_size / world.size * base.model.max_sequence_length;
  double single = 0;
  fmt::print("{:<44} {:>10} {:>10} {:>11} {:>11} {:>10}\n", "setup", "tokens/s", "step s", "efficiency",
             "comm share", "state MiB");
  for (const auto& setup : setups) {
    std::vector<double> steps, shares;
    for (const auto& x : setup.steps) steps.push_back(x.total()), shares.push_back(x.comm / x.total());
    const double step = train::median(steps);
    if (setup.ranks == 1) single = step;
    fmt::print("{:<44} {:>10.0f} {:>10.6f} {:>11.2f} {:>10.2f}% {:>10.3f}\n", setup.name,
               double(rank_tokens * setup.ranks) / step, step, single / step, 100 * train::median(shares),
               double(setup.state_bytes) / 1048576.0);
  }
  fmt::print(
      "efficiency = tokens/s(N ranks) / (N x tokens/s(1 rank)); comm share = median time "
      "blocked on gradient communication / step time; state = parameters, gradients and optimizer "
      "state a rank keeps between steps\n");
  return 0;
}

int run_bench(const BenchArgs& a) {
  train::configure_cpu_runtime();
  const config::TrainConfig base = load_run_config(a.config);
  const dist::World world = dist::detect_world();
  if (world.distributed()) return run_scaling_bench(a, base, world);
  std::vector<train::BenchSubject> subjects;
  if (a.compare.empty()) subjects.push_back({base.model.residual, base});
  std::stringstream entries(a.compare);
  for (std::string entry; std::getline(entries, entry, ',');) {
    const config::Variant variant = config::parse_variant(entry, "--compare");
    ConfigArgs args = a.config;
    args.overrides.insert(args.overrides.end(), variant.overrides.begin(), variant.overrides.end());
    args.overrides.push_back("--model.residual=" + variant.topology);
    subjects.push_back({entry, load_run_config(args)});
  }
  const config::TrainConfig& first = subjects.front().config;
  const torch::Device device = train::resolve_device(first.device);
  const auto bench = train::bench_topologies(subjects, a.options, [&](const train::TopologyBench& b) {
    fmt::print(
        "bench: {} threads, device {}, precision {}, activation_checkpointing {}, batch {} x {} "
        "tokens in micro-batches of {}, {} warmup + {} timed steps x {} round(s); matmul "
        "measured at {:.1f} GFLOP/s\n",
        at::get_num_threads(), device.str(), name_of(first.precision),
        first.model.activation_checkpointing == config::ActivationCheckpointing::None
            ? "off"
            : name_of(first.model.activation_checkpointing),
        first.global_train_batch_size, first.model.max_sequence_length,
        std::min(first.device_train_microbatch_size, first.global_train_batch_size), a.options.warmup,
        a.options.steps, b.rounds, b.matmul_flops / 1e9);
  });
  for (const auto& t : bench.timings) print_timing(t, device, bench.matmul_flops);
  if (a.profile_top > 0)
    for (const auto& t : bench.timings) {
      print_ops(t, a.profile_top);
      if (!t.trace_path.empty()) fmt::print("trace of {}'s profiled steps: {}\n", t.topology, t.trace_path);
    }
  auto step_times = [](const train::TopologyTiming& t) {
    std::vector<double> v;
    for (const auto& x : t.steps) v.push_back(x.total());
    return train::median(v);
  };
  for (size_t i = 1; i < bench.timings.size(); ++i)
    fmt::print("ratio {}/{}: {:.3f} (median step time over {} alternating rounds)\n",
               bench.timings[i].topology, bench.timings[0].topology,
               step_times(bench.timings[i]) / step_times(bench.timings[0]), bench.rounds);
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("bench", "Time training steps: tokens/s, step split, memory, MFU");
  auto a = std::make_shared<BenchArgs>();
  a->options.trace_dir = ".";
  cmd->add_option("--steps", a->options.steps, "Timed steps per topology and round")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", a->options.warmup, "Untimed steps first")->check(CLI::NonNegativeNumber);
  cmd->add_option("--rounds", a->options.rounds,
                  "Alternating rounds in --compare mode and under torchrun (scaling)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--compare", a->compare,
                  "Comma-separated TOPOLOGY[:dotted.key=value...] entries, e.g. "
                  "pre,hybrid_pre,pre:model.layer_norm_type=dyt");
  cmd->add_option("--profile", a->profile_top,
                  "After timing, profile --steps more steps per entry and print the N ops with the "
                  "most self time per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--trace-dir", a->options.trace_dir,
                  "With --profile: write each entry's profiled steps there as a Chrome trace, "
                  "<entry>.trace.json (Perfetto, TensorBoard's profiler); \"\" for none")
      ->capture_default_str();
  add_config_args(cmd, a->config);
  cmd->callback([&run, a] {
    a->options.profile = a->profile_top > 0;
    run = [a] { return run_bench(*a); };
  });
}

}  // namespace siamese::cli
