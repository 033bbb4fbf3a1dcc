// torch_profiling and `siamese bench --profile --trace-dir`: real runs leave Chrome traces
// that parse and hold the step's ops; a run too short for the schedule leaves none.
#include "siamese/train/step_profiler.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "siamese/train/trainer.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace siamese::train {
namespace {

namespace fs = std::filesystem;

// Complete events ("ph": "X") per name in a Chrome trace.
std::map<std::string, int64_t> complete_events(const fs::path& trace) {
  const auto j = nlohmann::json::parse(std::ifstream(trace));
  std::map<std::string, int64_t> out;
  for (const auto& e : j.at("traceEvents"))
    if (e.value("ph", "") == "X" && e.contains("name") && e["name"].is_string()) ++out[e["name"]];
  return out;
}

}  // namespace

TEST(StepProfiler, TracesStepsSevenToNineOfTheProcessAsOlmoCoresSchedule) {
  const StepProfiler fresh(true, "/runs/a", 1, 0, false);
  EXPECT_EQ(fresh.first(), 7);
  EXPECT_EQ(fresh.last(), 9);
  EXPECT_EQ(fresh.trace_path(), fs::path("/runs/a/profiler/step7-9.rank1.chrome_trace.json"));
  const StepProfiler resumed(true, "/runs/a", 0, 100, false);
  EXPECT_EQ(resumed.first(), 107);
  const StepProfiler off(false, "/runs/a", 0, 0, false);
  EXPECT_GT(off.first(), off.last());
}

TEST(StepProfiler, ATrainingRunWithTorchProfilingLeavesATraceOfItsSteps) {
  testing::TempDir dir;
  config::TrainConfig c = testing::tiny(dir.path() / "run");
  c.max_duration = "10";
  c.torch_profiling = true;
  ASSERT_EQ(train::train(c), 0);
  const fs::path trace = dir.path() / "run" / "profiler" / "step7-9.rank0.chrome_trace.json";
  ASSERT_TRUE(fs::exists(trace));
  const auto events = complete_events(trace);
  // Three steps of 2 micro-batches: every Linear's forward product, at least.
  int64_t products = 0;
  for (const char* name : {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul"})
    products += events.count(name) ? events.at(name) : 0;
  EXPECT_GE(products, 3 * 2 * 2 * 4) << "the traced steps' matrix products";

  c.save_folder = (dir.path() / "short").string();
  c.max_duration = "4";
  ASSERT_EQ(train::train(c), 0);
  EXPECT_FALSE(fs::exists(dir.path() / "short" / "profiler"));
}

TEST(StepProfiler, BenchProfileWritesEachEntrysTrace) {
  testing::TempDir dir;
  const std::string args = std::string("bench --steps 2 --warmup 1 --rounds 1 --profile 3 --trace-dir ") +
                           dir.file("traces") + " --compare pre,hybrid_pre " + SIAMESE_SOURCE_DIR +
                           "/configs/tiny/quickstart.yaml --model.d_model=32 --model.n_heads=2 "
                           "--model.n_layers=2 --model.max_sequence_length=32 --global_train_batch_size=4 "
                           "--device_train_microbatch_size=2";
  ASSERT_EQ(testing::run_cli(args, dir.file("bench.log")), 0) << testing::read_all(dir.file("bench.log"));
  const std::string out = testing::read_all(dir.file("bench.log"));
  for (const char* entry : {"pre", "hybrid_pre"}) {
    const fs::path trace = dir.path() / "traces" / (std::string(entry) + ".trace.json");
    ASSERT_TRUE(fs::exists(trace)) << out;
    EXPECT_FALSE(complete_events(trace).empty()) << trace;
    EXPECT_NE(out.find("trace of " + std::string(entry) + "'s profiled steps: " + trace.string()),
              std::string::npos)
        << out;
  }
}

}  // namespace siamese::train
