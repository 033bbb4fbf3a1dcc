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

// The names rows are read back by (resume, report, run summaries, TensorBoard); writers use
// the same constants, so a renamed key cannot leave a reader behind.
namespace metric {
inline constexpr const char* kStep = "step";
inline constexpr const char* kEvent = "event";
inline constexpr const char* kTokens = "tokens";
inline constexpr const char* kLoss = "loss";
inline constexpr const char* kZLoss = "z_loss";  // OLMo's z-loss, apart from the cross-entropy "loss"
// Instances data.instance_filter left out of the step (all ranks; only with the filter on).
inline constexpr const char* kFilteredInstances = "filtered_instances";
inline constexpr const char* kPerplexity = "perplexity";
inline constexpr const char* kLearningRate = "lr";
inline constexpr const char* kStepSeconds = "step_seconds";
inline constexpr const char* kLossSpike = "loss_spike";
inline constexpr const char* kLabel = "label";
inline constexpr const char* kExactMatch = "exact_match";
// Events.
inline constexpr const char* kEvalEvent = "eval";
inline constexpr const char* kNonfiniteEvent = "nonfinite";
// A resumed run that trains on with changed settings: {"changed": {key: {"was", "now"}}}.
inline constexpr const char* kResumeEvent = "resume";
// The residual streams every stream_stats_interval steps (train/stream_stats_log.h).
inline constexpr const char* kStreamStatsEvent = "stream_stats";
// A mixture's tokens per source so far (data/mixture_tally.h).
inline constexpr const char* kMixtureEvent = "mixture";
// A run that stopped with a checkpoint before its time_limit: {"time_limit": seconds}.
inline constexpr const char* kTimeLimitEvent = "time_limit";
// OLMo's downstream keys: eval/downstream/<label>_<metric>, and <label>_documents.
inline constexpr const char* kDownstreamPrefix = "eval/downstream/";
inline constexpr const char* kDocumentsSuffix = "_documents";
// On a downstream row of `siamese eval --limit N`: N, the documents of each task it read,
// so a report does not take the number for the full task's.
inline constexpr const char* kEvalLimit = "limit";
}  // namespace metric

// {"step": step, "event": event (when not empty), ...fields}.
MetricsRow metrics_row(int64_t step, const std::string& event = "",
                       const nlohmann::ordered_json& fields = {});

// Calls fn(row, line text) for every row of a metrics.jsonl (plain or gzip), in order. A last
// line without its newline that is not a JSON object, which a kill leaves when it cuts a
// write short, is skipped with a warning; any other line that is not one is an error naming
// the file and line (nothing is dropped silently).
void read_metrics_rows(const std::string& path,
                       const std::function<void(const nlohmann::json& row, const std::string& line)>& fn);
// The same, with the row's line number in the file (1 for the first line) for messages.
void read_metrics_rows(
    const std::string& path,
    const std::function<void(const nlohmann::json& row, const std::string& line, int64_t line_number)>& fn);

// Where a run's rows go (metrics.jsonl, TensorBoard): the step reporter writes each row to
// every sink of its list.
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void write(const MetricsRow& row) = 0;
};

}  // namespace siamese
