#include "siamese/common/metrics_row.h"

#include <spdlog/spdlog.h>

#include "siamese/common/error.h"
#include "siamese/common/text_input.h"

namespace siamese {

MetricsRow metrics_row(int64_t step, const std::string& event, const nlohmann::ordered_json& fields) {
  MetricsRow row = {{"step", step}};
  if (!event.empty()) row["event"] = event;
  for (auto it = fields.begin(); it != fields.end(); ++it) row[it.key()] = it.value();
  return row;
}

void read_metrics_rows(const std::string& path,
                       const std::function<void(const nlohmann::json& row, const std::string& line)>& fn) {
  read_metrics_rows(path,
                    [&](const nlohmann::json& row, const std::string& line, int64_t) { fn(row, line); });
}

void read_metrics_rows(
    const std::string& path,
    const std::function<void(const nlohmann::json& row, const std::string& line, int64_t line_number)>& fn) {
  LineReader reader(path);
  for (std::string line; reader.next(line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object()) {
      if (reader.unterminated()) {
        spdlog::warn("{}:{}: skipped the last line, cut short (by a kill?)", path, reader.line_number());
        continue;
      }
      throw Error("not a JSON object: " + line.substr(0, 80),
                  path + ":" + std::to_string(reader.line_number()),
                  "each line of a metrics log is one JSON object; repair or remove this line");
    }
    fn(row, line, reader.line_number());
  }
}

}  // namespace siamese
