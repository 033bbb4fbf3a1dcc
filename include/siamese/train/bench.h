#pragma once
// `siamese bench`'s measurements: the training step (train_step.h) timed phase by phase on
// the device's timeline, for several topologies alternated in one process, or for
// data-parallel scaling under a launcher. tools/cmd_bench.cpp prints what these return.
#include <functional>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/dist/world.h"
#include "siamese/train/op_profile.h"

namespace siamese::train {

struct BenchOptions {
  int steps = 5;   // timed steps per subject and round
  int warmup = 2;  // untimed steps first
  int rounds = 3;  // alternating rounds (several topologies, or scaling setups)
  // After the timed rounds, `steps` more steps per subject under the op profiler
  // (op_profile.h), which slows them: they are not part of the timings.
  bool profile = false;
  // With profile: a folder for each subject's trace, <label>.trace.json (empty: none).
  std::string trace_dir;
  bool matmul_rate = true;  // measure TopologyBench::matmul_flops (about 2 s on a 2-core CPU)
};

struct StepSplit {
  double data = 0, forward = 0, backward = 0, optimizer = 0;
  double comm = 0;  // part of backward spent blocked on the gradient all-reduce
  double total() const { return data + forward + backward + optimizer; }
};

// What one compared model is: a label to print and its full run config.
struct BenchSubject {
  std::string label;  // the --compare entry, e.g. "pre" or "pre:model.layer_norm_type=dyt"
  config::TrainConfig config;
};

// One subject's timed steps.
struct TopologyTiming {
  std::string topology;  // the subject's label
  config::TrainConfig config;
  std::vector<StepSplit> steps;
  double peak_memory_mib = 0;   // CUDA allocator on GPUs, process RSS on CPUs
  std::vector<OpTime> ops;      // with BenchOptions::profile, over `profiled_steps` steps
  std::vector<OpTime> kernels;  // the same on a GPU: device time of kernels, copies, memsets
  int profiled_steps = 0;
  std::string trace_path;  // the profiled steps' Chrome trace, when BenchOptions::trace_dir is set
};

// The achievable matmul rate on `device` in this run (FLOP/s), the yardstick for MFU when
// no peak_tflops is configured: fp32 n=2048 on CPU; on CUDA bf16 (amp) or fp32 (TF32 when
// allowed) n=8192. Best of several repeats (about 2 s on a 2-core CPU); `quick` halves n and
// repeats less (about 0.1 s), for an estimate rather than a yardstick.
double measured_matmul_flops(torch::Device device, config::Precision precision, bool quick = false);

struct TopologyBench {
  double matmul_flops = 0;  // achievable matmul rate measured in this run (MFU's yardstick)
  int rounds = 1;
  std::vector<TopologyTiming> timings;  // in the order asked for
};

// Builds one model per subject (each with its config's seed) and alternates them over
// rounds. Data, device, precision and the batch come from the first subject, so every model
// sees the same batches. `started` is called once the setup is known, before any step (the
// tool prints it).
TopologyBench bench_topologies(const std::vector<BenchSubject>& subjects, const BenchOptions& options,
                               const std::function<void(const TopologyBench&)>& started = {});

struct ScalingSetup {
  std::string name;  // "1 rank", "N ranks, ddp, all-reduce overlapped", "N ranks, fsdp FULL_SHARD"...
  int ranks = 1;
  std::vector<StepSplit> steps;
  // What a rank keeps between steps: parameters, gradients and optimizer state. Peak RSS
  // cannot be told apart between setups that alternate in one process; this can.
  int64_t state_bytes = 0;
};

// Data-parallel scaling under a launcher: rank 0 alone, then all ranks with ddp's all-reduce
// overlapped with backward (unless activation checkpointing rules that out), after backward,
// and, where the config asks for a sharded fsdp strategy, that strategy on a model of its own,
// alternating over rounds. Every rank does the same per-rank work in each setup, so
// efficiency = step(1 rank) / step(N ranks). Only the main rank gets the setups back (the
// others get an empty list).
std::vector<ScalingSetup> bench_scaling(const config::TrainConfig& base, const dist::World& world,
                                        const BenchOptions& options);

double median(std::vector<double> values);

}  // namespace siamese::train
