// The op profiler behind `siamese bench --profile`: self times folded from nested events,
// and a real profile of known work.
#include "siamese/train/op_profile.h"

#include <torch/cuda.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "support/temp_dir.h"

namespace siamese::train {
namespace {

std::map<std::string, OpTime> by_op_name(const std::vector<OpTime>& ops) {
  std::map<std::string, OpTime> m;
  for (const auto& op : ops) m[op.name] = op;
  return m;
}

TEST(OpProfile, SelfTimeIsDurationLessDirectChildrenPerThread) {
  // Thread 1: outer [0, 100] holds a [10, 30] (which holds b [12, 20]) and c [40, 50];
  // thread 2 runs another `outer` [5, 25] at the same time, which must not nest in thread 1's.
  const auto ops = by_op_name(self_times(
      {{"c", 1, 40, 50}, {"outer", 1, 0, 100}, {"b", 1, 12, 20}, {"a", 1, 10, 30}, {"outer", 2, 5, 25}}));
  EXPECT_DOUBLE_EQ(ops.at("outer").self_seconds, (70 + 20) * 1e-9);
  EXPECT_DOUBLE_EQ(ops.at("outer").total_seconds, (100 + 20) * 1e-9);
  EXPECT_EQ(ops.at("outer").calls, 2);
  EXPECT_DOUBLE_EQ(ops.at("a").self_seconds, 12e-9);
  EXPECT_DOUBLE_EQ(ops.at("b").self_seconds, 8e-9);
  EXPECT_DOUBLE_EQ(ops.at("c").self_seconds, 10e-9);
  // Sorted by self time, largest first.
  const auto sorted = self_times({{"small", 1, 0, 1}, {"large", 1, 2, 10}});
  EXPECT_EQ(sorted.front().name, "large");
}

TEST(OpProfile, RecordsEveryOpOfAForwardAndBackwardWithinTheWallTime) {
  auto w = torch::randn({64, 64}, torch::requires_grad());
  auto x = torch::randn({32, 64});
  const auto t0 = std::chrono::steady_clock::now();
  OpProfile profile;
  for (int i = 0; i < 3; ++i) torch::mm(x, w).relu().sum().backward();
  const auto result = profile.stop();
  const auto ops = by_op_name(result.host);
  EXPECT_TRUE(result.device.empty());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(ops.count("aten::mm"));
  // Forward mm once per iteration, backward's grad of w one more (x needs no grad).
  EXPECT_EQ(ops.at("aten::mm").calls, 6);
  EXPECT_EQ(ops.at("aten::relu").calls, 3);
  double self = 0;
  for (const auto& [name, op] : ops) {
    EXPECT_LE(op.self_seconds, op.total_seconds + 1e-12) << name;
    self += op.self_seconds;
  }
  EXPECT_GT(self, 0);
  EXPECT_LE(self, wall);  // one thread's nested events cannot add up to more than the time
}

// The trace file holds the events the tables are folded from: Chrome's trace format, with
// each op's complete events ("ph": "X") as many as the profile counted calls.
TEST(OpProfile, TheTraceFileIsAChromeTraceOfTheSameOps) {
  siamese::testing::TempDir dir;
  auto w = torch::randn({64, 64}, torch::requires_grad());
  auto x = torch::randn({32, 64});
  OpProfile profile;
  for (int i = 0; i < 3; ++i) torch::mm(x, w).relu().sum().backward();
  const auto result = profile.stop(dir.file("trace.json"));
  const auto trace = nlohmann::json::parse(std::ifstream(dir.file("trace.json")));
  ASSERT_TRUE(trace.contains("traceEvents")) << trace.dump().substr(0, 400);
  std::map<std::string, int64_t> complete;
  for (const auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "X" && e.contains("name") && e["name"].is_string()) ++complete[e["name"]];
  const auto ops = by_op_name(result.host);
  for (const char* name : {"aten::mm", "aten::relu"}) EXPECT_EQ(complete[name], ops.at(name).calls) << name;
}

// On a GPU the profile also holds the device's work: the kernels of a known amount of
// matrix products, each timed on the device and within the wall time.
TEST(GpuOpProfile, RecordsTheKernelsOfEveryProductWithinTheWallTime) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto opts = torch::dtype(torch::kFloat).device(torch::kCUDA);
  auto w = torch::randn({512, 512}, opts.requires_grad(true));
  auto x = torch::randn({256, 512}, opts);
  torch::mm(x, w).sum().backward();  // cuBLAS picks and loads its kernels outside the profile
  torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  OpProfile profile(/*device_activity=*/true);
  for (int i = 0; i < 3; ++i) torch::mm(x, w).relu().sum().backward();
  torch::cuda::synchronize();
  const auto result = profile.stop();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(result.device.empty());
  double device = 0;
  int64_t launches = 0;
  for (const auto& k : result.device) {
    EXPECT_EQ(k.self_seconds, k.total_seconds) << k.name;
    device += k.self_seconds;
    launches += k.calls;
  }
  EXPECT_GT(device, 0);
  EXPECT_LE(device, wall);     // one stream: its kernels run one after another
  EXPECT_GE(launches, 6 + 3);  // six products, three relus, and more (sums, gradient fills)
}

}  // namespace
}  // namespace siamese::train
