#include "siamese/train/metrics.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "siamese/common/error.h"

namespace siamese::train {

namespace fs = std::filesystem;

double StepMetrics::perplexity() const { return std::exp(loss); }

double StepMetrics::tokens_per_sec() const {
  return step_seconds > 0 ? step_tokens / step_seconds : 0.0;
}

std::optional<double> StepMetrics::mfu() const {
  if (!peak_flops || *peak_flops <= 0) return std::nullopt;
  return tokens_per_sec() * flops_per_token / *peak_flops;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  return fmt::format("{:.17g}", v);
}

std::string StepMetrics::to_json() const {
  auto m = mfu();
  return fmt::format(
      "{{\"step\": {}, \"tokens\": {}, \"loss\": {}, \"perplexity\": {}, \"lr\": {}, "
      "\"grad_norm\": {}, \"tokens_per_sec\": {}, \"step_seconds\": {}, \"flops_per_token\": {}, "
      "\"mfu\": {}, \"elapsed\": {}, \"loss_spike\": {}, \"comm_seconds\": {}, \"comm_share\": {}, "
      "\"peak_memory_mib\": {}}}",
      step, tokens, json_number(loss), json_number(perplexity()), json_number(lr),
      json_number(grad_norm), json_number(tokens_per_sec()), json_number(step_seconds),
      json_number(flops_per_token), m ? json_number(*m) : "null", json_number(elapsed),
      loss_spike ? "true" : "false", json_number(comm_seconds),
      json_number(step_seconds > 0 ? comm_seconds / step_seconds : 0.0), json_number(peak_memory_mib));
}

std::string json_string(const std::string& s) { return nlohmann::json(s).dump(); }

std::string event_json(int64_t step, const std::string& event, const std::string& fields) {
  return fmt::format("{{\"step\": {}, \"event\": {}{}{}}}", step, json_string(event),
                     fields.empty() ? "" : ", ", fields);
}

MetricsLog::MetricsLog(const fs::path& path, int64_t resume_step) {
  fs::create_directories(path.parent_path().empty() ? fs::path(".") : path.parent_path());
  if (fs::exists(path)) {
    std::vector<std::string> kept;
    std::ifstream in(path);
    int64_t number = 0;
    for (std::string line; std::getline(in, line);) {
      ++number;
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) {
        // A run killed mid-write leaves a cut line; later lines would follow it unreadably.
        spdlog::warn("{}:{}: dropped a line that is not a JSON object (cut short by a kill?)",
                     path.string(), number);
        continue;
      }
      if (j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() > resume_step)
        continue;
      kept.push_back(line);
    }
    in.close();
    const fs::path tmp = path.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      for (const auto& l : kept) out << l << '\n';
      if (!out.flush())
        throw Error("cannot rewrite the metrics log", tmp.string(), "free disk space in save_folder");
    }
    fs::rename(tmp, path);
  }
  out_.open(path, std::ios::app);
}

void MetricsLog::write(const std::string& json_line) {
  out_ << json_line << '\n';
  out_.flush();
}

bool SpikeDetector::observe(double loss) {
  bool spike = false;
  if (recent_.size() >= 10) {
    std::vector<double> v(recent_.begin(), recent_.end());
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    spike = loss > factor_ * v[v.size() / 2];
  }
  recent_.push_back(loss);
  if (recent_.size() > window_) recent_.pop_front();
  return spike;
}

}  // namespace siamese::train
