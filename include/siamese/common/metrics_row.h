#pragma once
// The one row type of metrics.jsonl: a JSON object whose first key is "step", then "event"
// for anything but a training step ("eval", "nonfinite", "overflow", ...), then the values.
// Every writer builds its rows with metrics_row and writes them with json_line; every
// reader (resume, report, summaries) goes through read_metrics_rows.
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace siamese {

using MetricsRow = nlohmann::ordered_json;

// {"step": step, "event": event (when not empty), ...fields}.
MetricsRow metrics_row(int64_t step, const std::string& event = "",
                       const nlohmann::ordered_json& fields = {});

// Calls fn(row, line text) for every row of a metrics.jsonl (plain or gzip), in order. A last
// line without its newline that is not a JSON object, which a kill leaves when it cuts a
// write short, is skipped with a warning; any other line that is not one is an error naming
// the file and line (nothing is dropped silently).
void read_metrics_rows(const std::string& path,
                       const std::function<void(const nlohmann::json& row, const std::string& line)>& fn);

}  // namespace siamese
