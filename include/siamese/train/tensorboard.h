#pragma once
// TensorBoard event files, written without TensorFlow or protobuf: each metrics.jsonl row
// (train steps, evaluations, layer gradient norms, ...) also becomes one Event whose Summary
// holds a scalar per numeric field, so TensorBoard (and `wandb sync --sync-tensorboard`)
// shows every number metrics.jsonl has, computed once in metrics.cpp.
//
// Format (tensorflow/core/util/event.proto, summary.proto; record_writer): a file of
// records, each `uint64 length | uint32 masked_crc32c(length) | data | uint32
// masked_crc32c(data)`, little-endian; the first record is an Event with file_version
// "brain.Event:2". Events are encoded by hand: Event{1: wall_time double, 2: step int64,
// 3: file_version string, 5: summary}; Summary{1: repeated Value}; Value{1: tag string,
// 2: simple_value float}.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "siamese/common/durable_file.h"
#include "siamese/common/metrics_row.h"

namespace siamese::train {

// CRC-32C (Castagnoli), and the masked form TFRecord stores.
uint32_t crc32c(const std::string& data);
uint32_t masked_crc32c(const std::string& data);

class TensorBoardWriter : public MetricsSink {
 public:
  // Creates `folder` and a new events.out.tfevents.<seconds>.<host> file in it.
  explicit TensorBoardWriter(const std::filesystem::path& folder);

  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // The numeric fields of one metrics.jsonl row, tagged "train/<key>" for step rows,
  // "<event>/<label>/<key>" for evaluations and "<event>/<key>" for other events; keys
  // that already hold a '/' (OLMo's eval/downstream/...) are kept as they are; a list of
  // numbers (per-layer gradient norms) gives "<tag>/<index>" per entry.
  void write(const MetricsRow& row) override;

  const std::filesystem::path& path() const { return path_; }

 private:
  void record(const std::string& event);

  std::filesystem::path path_;
  std::unique_ptr<FileSink> out_;
};

}  // namespace siamese::train
