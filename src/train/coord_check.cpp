#include "siamese/train/coord_check.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <map>

#include "siamese/common/error.h"
#include "siamese/config/sections.h"
#include "siamese/data/batch_order.h"
#include "siamese/data/token_dataset.h"
#include "siamese/dist/parallel_plan.h"
#include "siamese/model/topology_table.h"
#include "siamese/train/runtime.h"
#include "siamese/train/setup.h"

namespace siamese::train {

namespace {

double rms(const torch::Tensor& t) {
  return t.detach().to(torch::kFloat64).pow(2).mean().sqrt().item<double>();
}

// The config at one size, its base shape pinned to the config's so the multipliers follow.
config::TrainConfig resized(const config::TrainConfig& cfg, const std::string& axis, int64_t size) {
  config::TrainConfig c = cfg;
  auto& m = c.model;
  m.mup.base_d_model = cfg.model.mup.base_d_model.value_or(cfg.model.d_model);
  m.mup.base_n_heads = cfg.model.mup.base_n_heads.value_or(cfg.model.n_heads);
  m.mup.base_n_layers = cfg.model.mup.base_n_layers.value_or(cfg.model.n_layers);
  if (axis == "width") {
    if (size % m.n_heads != 0)
      throw Error(fmt::format("width {} is not a multiple of the config's {} heads", size, m.n_heads),
                  "--widths", "give widths that n_heads divides");
    if (m.mlp_hidden_size) m.mlp_hidden_size = *m.mlp_hidden_size * size / m.d_model;
    m.d_model = size;
  } else {
    m.n_layers = size;
  }
  model::check_model_config(m);
  return c;
}

void measure(const config::TrainConfig& cfg, const std::string& axis, int64_t size, int steps,
             torch::Device device, std::vector<CoordPoint>& out) {
  data::TokenDataset ds = data::train_dataset(config::data_section(cfg));
  data::BatchOrder order(ds.size(), cfg.global_train_batch_size,
                         static_cast<uint64_t>(cfg.data.seed.value_or(cfg.seed)));
  dist::ParallelPlan alone;
  Trainee t = build_trainee(cfg, device, alone);
  TrainStep step = t.step(config::step_section(cfg), alone, device);
  const auto& streams = model::find_topology(cfg.model.residual)->streams;
  for (int s = 0; s <= steps; ++s) {
    auto batch = ds.batch(order.rank_batch(s)).to(device);
    const auto ids = batch.narrow(0, 0, t.micro_batch);
    const auto input = ids.narrow(1, 0, ids.size(1) - 1);
    auto add = [&](const std::string& site, const torch::Tensor& x) {
      out.push_back({axis, size, s, site, rms(x)});
    };
    {
      torch::NoGradGuard no_grad;
      t.model->eval();
      model::ForwardOptions opts;
      const model::Probe sublayer = [&](int64_t l, const std::string& name, const torch::Tensor& x) {
        if (name == "attn_out" || name == "ffn_out") add(fmt::format("layer{}.{}", l, name), x);
      };
      const model::Probe stream = [&](int64_t l, const std::string& name, const torch::Tensor& x) {
        if (l == -1 && name == streams.front()) add("embedding", x);
        if (l >= 0 && l < cfg.model.n_layers && name == streams.front())
          add(fmt::format("layer{}.{}", l, name), x);
      };
      opts.sublayer_probe = &sublayer;
      opts.probe = &stream;
      add("logits", t.model->forward(input, opts));
      t.model->train();
    }
    if (s < steps) step.run(batch, cfg.optimizer.learning_rate);
  }
}

// The kind of a site: embedding, logits, attn_out, ffn_out, or the stream's name.
std::string kind_of(const std::string& site) {
  const auto dot = site.find('.');
  return dot == std::string::npos ? site : site.substr(dot + 1);
}

}  // namespace

std::vector<CoordPoint> coord_check(const config::TrainConfig& cfg, const CoordCheckOptions& options) {
  const torch::Device device = resolve_device(cfg.device);
  std::vector<CoordPoint> points;
  for (const auto& [axis, sizes] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"width", options.widths}, {"depth", options.depths}})
    for (int64_t size : sizes) {
      spdlog::info("coord-check: {} {}", axis, size);
      measure(resized(cfg, axis, size), axis, size, options.steps, device, points);
    }
  return points;
}

std::vector<CoordSlope> coord_slopes(const std::vector<CoordPoint>& points, int step) {
  // axis -> kind -> size -> (sum, count); the stream kind keeps the last layer only.
  std::map<std::string, std::map<std::string, std::map<int64_t, std::pair<double, int>>>> acc;
  std::map<std::pair<std::string, int64_t>, int64_t> last_layer;
  for (const auto& p : points)
    if (p.site.rfind("layer", 0) == 0) {
      const int64_t l = std::stoll(p.site.substr(5, p.site.find('.') - 5));
      auto& last = last_layer[{p.axis, p.size}];
      last = std::max(last, l);
    }
  std::vector<std::string> order;
  for (const auto& p : points) {
    if (p.step != step) continue;
    std::string kind = kind_of(p.site);
    if (kind != "embedding" && kind != "logits" && kind != "attn_out" && kind != "ffn_out") {
      if (std::stoll(p.site.substr(5, p.site.find('.') - 5)) != last_layer[{p.axis, p.size}]) continue;
      kind = "stream";
    }
    auto& cell = acc[p.axis][kind][p.size];
    cell.first += p.rms;
    cell.second += 1;
    if (std::find(order.begin(), order.end(), kind) == order.end()) order.push_back(kind);
  }
  std::vector<CoordSlope> out;
  for (const std::string axis : {"width", "depth"})
    for (const auto& kind : order) {
      if (!acc.count(axis) || !acc[axis].count(kind)) continue;
      CoordSlope s{axis, kind, 0, {}};
      double sx = 0, sy = 0, sxx = 0, sxy = 0;
      int n = 0;
      for (const auto& [size, cell] : acc[axis][kind]) {
        const double y = cell.first / cell.second, x = std::log2(double(size));
        s.rms.push_back(y);
        sx += x, sy += std::log2(y), sxx += x * x, sxy += x * std::log2(y), ++n;
      }
      s.slope = n > 1 ? (n * sxy - sx * sy) / (n * sxx - sx * sx) : 0.0;
      out.push_back(std::move(s));
    }
  return out;
}

}  // namespace siamese::train
