#include "siamese/train/tensorboard.h"

#include <fmt/format.h>

#include <unistd.h>
#include <cmath>
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstring>

#include "siamese/common/error.h"

namespace siamese::train {

namespace {

std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected poly
    t[i] = c;
  }
  return t;
}

// Protobuf wire format: a field key is (number << 3 | wire type).
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

template <typename T>
void fixed(std::string& out, int field, int wire, T v) {
  varint(out, uint64_t(field) << 3 | uint64_t(wire));
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}

void bytes_field(std::string& out, int field, const std::string& value) {
  varint(out, uint64_t(field) << 3 | 2);
  varint(out, value.size());
  out += value;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string event_header(double wall_time) {
  std::string e;
  fixed(e, 1, 1, wall_time);
  return e;
}

}  // namespace

uint32_t crc32c(const std::string& data) {
  static const auto table = crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const std::string& data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& folder) {
  std::filesystem::create_directories(folder);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  path_ = folder / fmt::format("events.out.tfevents.{}.{}", int64_t(now_seconds()), host);
  out_ = std::make_unique<FileSink>(path_, "free disk space in save_folder", FileSink::Mode::Append);
  out_->check();
  std::string e = event_header(now_seconds());
  bytes_field(e, 3, "brain.Event:2");
  record(e);
}

void TensorBoardWriter::record(const std::string& event) {
  std::string len(8, '\0');
  const uint64_t n = event.size();
  std::memcpy(len.data(), &n, 8);
  const uint32_t len_crc = masked_crc32c(len), data_crc = masked_crc32c(event);
  // One write(2) per record: TensorBoard follows a live run, and a failed write is an error.
  out_->write(len + std::string(reinterpret_cast<const char*>(&len_crc), 4) + event +
              std::string(reinterpret_cast<const char*>(&data_crc), 4));
  out_->check();
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes_field(value, 1, tag);
    fixed(value, 2, 5, float(v));
    bytes_field(summary, 1, value);
  }
  std::string e = event_header(now_seconds());
  varint(e, 2 << 3 | 0);
  varint(e, uint64_t(step));
  bytes_field(e, 5, summary);
  record(e);
}

void TensorBoardWriter::write(const MetricsRow& row) {
  if (!row.contains("step") || !row["step"].is_number_integer()) return;
  std::string prefix = "train/";
  if (row.contains("event") && row["event"].is_string()) {
    prefix = row["event"].get<std::string>() + "/";
    if (row.contains("label") && row["label"].is_string()) prefix += row["label"].get<std::string>() + "/";
  }
  std::vector<std::pair<std::string, double>> values;
  for (const auto& [key, v] : row.items()) {
    if (key == "step") continue;
    const std::string tag = key.find('/') != std::string::npos ? key : prefix + key;
    // NaN and inf (a non-finite step's loss) are null in metrics.jsonl and no scalar here.
    auto finite = [](const MetricsRow& x) { return x.is_number() && std::isfinite(x.get<double>()); };
    if (finite(v)) values.emplace_back(tag, v.get<double>());
    if (v.is_array())  // per-layer lists (layer_grad_norms): one scalar per layer
      for (size_t i = 0; i < v.size(); ++i)
        if (finite(v[i])) values.emplace_back(fmt::format("{}/{}", tag, i), v[i].get<double>());
  }
  if (!values.empty()) scalars(row["step"].get<int64_t>(), values);
}

}  // namespace siamese::train
