#include "siamese/export/safetensors.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"

namespace siamese::hf {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

// A header larger than this is not one transformers wrote (theirs are kilobytes per
// thousand tensors); refusing it keeps a damaged length from allocating gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100 << 20;

std::string dtype_name(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32:
      return "F32";
    case torch::kBFloat16:
      return "BF16";
    case torch::kFloat16:
      return "F16";
    default:
      throw Error(fmt::format("cannot write dtype {} to safetensors", c10::toString(t)), "export",
                  "convert the tensors to float32, bfloat16 or float16");
  }
}

std::optional<torch::ScalarType> dtype_of(const std::string& name) {
  if (name == "F32") return torch::kFloat32;
  if (name == "BF16") return torch::kBFloat16;
  if (name == "F16") return torch::kFloat16;
  return std::nullopt;
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read", path.string(), "pass a Hugging Face model folder");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(std::string("not valid JSON: ") + e.what(), path.string(),
                "export or download the folder again");
  }
}

}  // namespace

void write_safetensors(const fs::path& path, const NamedTensors& tensors) {
  json header = json::object();
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t bytes = t.numel() * t.element_size();
    header[name] = {{"dtype", dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';  // keeps tensor data 8-byte aligned
  AtomicFile file(path, "free disk space or export to a disk with room");
  const uint64_t n = text.size();
  file.write(&n, 8);
  file.write(text);
  for (const auto& [name, t] : tensors) {
    const auto c = t.contiguous();
    file.write(c.data_ptr(), static_cast<size_t>(c.numel() * c.element_size()));
  }
  file.commit();
}

TensorMap read_safetensors(const fs::path& path) {
  const std::string where = path.string();
  std::error_code ec;
  const uint64_t file_size = fs::file_size(path, ec);
  if (ec) throw Error("cannot read: " + ec.message(), where, "check that the folder holds this file");
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  if (!f.read(reinterpret_cast<char*>(&n), 8))
    throw Error("not a safetensors file (shorter than its 8-byte header length)", where,
                "export or download the file again");
  if (n > kMaxHeaderBytes || 8 + n > file_size)
    throw Error(
        fmt::format("not a safetensors file: its header claims {} bytes, the file has {}", n, file_size),
        where, "export or download the file again");
  std::string text(n, '\0');
  f.read(text.data(), std::streamsize(n));
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(std::string("the safetensors header is not valid JSON: ") + e.what(), where,
                "export or download the file again");
  }
  if (!header.is_object())
    throw Error("the safetensors header is not a JSON object", where, "export or download the file again");
  const uint64_t data_size = file_size - 8 - n;
  TensorMap out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string at = where + " (tensor " + name + ")";
    auto bad = [&](const std::string& why) {
      return Error("damaged safetensors entry: " + why, at, "export or download the file again");
    };
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets"))
      throw bad("it needs dtype, shape and data_offsets");
    if (!info["dtype"].is_string()) throw bad("dtype is not a string");
    const auto type = dtype_of(info["dtype"].get<std::string>());
    if (!type)
      throw Error("tensor " + name + " has dtype " + info["dtype"].get<std::string>(), at,
                  "export the model in F32, BF16 or F16");
    const auto& shape_json = info["shape"];
    const auto& offsets = info["data_offsets"];
    if (!shape_json.is_array()) throw bad("shape is not a list");
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      throw bad("data_offsets is not a pair of byte offsets");
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_size)
      throw bad(
          fmt::format("its bytes [{}, {}) lie outside the file's {} data bytes", begin, end, data_size));
    std::vector<int64_t> shape;
    uint64_t elements = 1;
    for (const auto& d : shape_json) {
      if (!d.is_number_unsigned()) throw bad("a dimension is not a non-negative integer");
      const uint64_t v = d.get<uint64_t>();
      // The byte count must equal end - begin, so no product above it can be valid.
      if (v != 0 && elements > (end - begin) / v + 1)
        throw bad("its shape holds more bytes than its offsets");
      elements *= v;
      shape.push_back(static_cast<int64_t>(v));
    }
    const uint64_t element_size = c10::elementSize(*type);
    if (elements * element_size != end - begin)
      throw bad(
          fmt::format("its shape needs {} bytes, its offsets give {}", elements * element_size, end - begin));
    auto t = torch::empty(shape, *type);
    f.seekg(std::streamoff(8 + n + begin));
    if (!f.read(static_cast<char*>(t.data_ptr()), std::streamsize(end - begin)))
      throw Error("tensor " + name + " is cut short", where, "copy the file again");
    out[name] = t;
  }
  return out;
}

void write_weights(const fs::path& folder, const NamedTensors& tensors, int64_t max_shard_bytes) {
  std::vector<NamedTensors> shards(1);
  int64_t size = 0, total = 0;
  for (const auto& nt : tensors) {
    const int64_t bytes = nt.second.numel() * nt.second.element_size();
    if (size > 0 && size + bytes > max_shard_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(nt);
    size += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    write_safetensors(folder / "model.safetensors", tensors);
    return;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", json::object()}};
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    write_safetensors(folder / file, shards[i]);
    for (const auto& nt : shards[i]) index["weight_map"][nt.first] = file;
  }
  write_file_atomically(folder / "model.safetensors.index.json", index.dump(2) + "\n");
}

TensorMap read_weights(const fs::path& folder) {
  const fs::path index_path = folder / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    const json index = read_json(index_path);
    if (!index.contains("weight_map") || !index["weight_map"].is_object())
      throw Error("the index has no weight_map object", index_path.string(),
                  "export or download the folder again");
    std::set<std::string> files;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string() || fs::path(file.get<std::string>()).has_parent_path())
        throw Error("weight_map entry of " + name + " is not a file name in the folder", index_path.string(),
                    "export or download the folder again");
      files.insert(file.get<std::string>());
    }
    TensorMap tensors;
    for (const auto& file : files) tensors.merge(read_safetensors(folder / file));
    for (const auto& [name, file] : index["weight_map"].items())
      if (!tensors.count(name))
        throw Error("the index maps " + name + " to " + file.get<std::string>() + ", which does not hold it",
                    index_path.string(), "export or download the folder again");
    return tensors;
  }
  if (fs::exists(folder / "model.safetensors")) return read_safetensors(folder / "model.safetensors");
  throw Error("no model.safetensors (or index) in the folder", folder.string(),
              "pass a folder saved with safe_serialization (the default)");
}

}  // namespace siamese::hf
