#include "siamese/train/rank_agreement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "siamese/common/error.h"
#include "siamese/common/sha256.h"
#include "siamese/config/schema.h"

namespace siamese::train {

namespace {

// Two independent 20-bit digests of `text`. With x_i one digest on rank i, every rank holds
// the same value exactly when n * sum(x_i^2) == (sum x_i)^2 (Cauchy-Schwarz); below 2^20 the
// sums stay exact in float64 for any world size this runs at.
std::pair<double, double> digests(const std::string& text) {
  const std::string hex = sha256_hex(text);
  return {double(std::stoul(hex.substr(0, 5), nullptr, 16)),
          double(std::stoul(hex.substr(5, 5), nullptr, 16))};
}

}  // namespace

void check_ranks_agree(dist::Collectives& ranks, const config::TrainConfig& cfg, torch::Device device) {
  const int n = ranks.world_size();
  if (n == 1) return;
  std::vector<std::string> names, values;
  for (const auto& f : config::schema::train_fields()) {
    names.push_back(f.key);
    values.push_back(config::schema::value_text(f, cfg));
  }
  names.push_back("the world size (WORLD_SIZE)");
  values.push_back(std::to_string(n));
  names.push_back("the device kind");
  values.push_back(device.is_cuda() ? "cuda" : "cpu");
  // Per key: sum x, sum x^2 for each of the two digests.
  auto sums = torch::zeros({int64_t(names.size()), 4}, torch::kFloat64);
  auto acc = sums.accessor<double, 2>();
  for (size_t i = 0; i < names.size(); ++i) {
    const auto [a, b] = digests(values[i]);
    acc[i][0] = a, acc[i][1] = a * a, acc[i][2] = b, acc[i][3] = b * b;
  }
  torch::Tensor on_device = sums.to(device);
  ranks.sum_(on_device);
  sums = on_device.cpu();
  acc = sums.accessor<double, 2>();
  std::vector<std::string> differ;
  for (size_t i = 0; i < names.size(); ++i)
    if (n * acc[i][1] != acc[i][0] * acc[i][0] || n * acc[i][3] != acc[i][2] * acc[i][2])
      differ.push_back(names[i]);
  if (!differ.empty())
    throw Error(fmt::format("the {} ranks were launched with different settings: {} (this rank: {})", n,
                            fmt::join(differ, ", "),
                            values[std::find(names.begin(), names.end(), differ[0]) - names.begin()]),
                fmt::format("rank {}", ranks.rank()),
                "launch every rank with the same config file, overrides and environment (MODEL_TYPE, the "
                "${oc.env:...} variables the config reads)");
}

}  // namespace siamese::train
