// `siamese export CHECKPOINT --out model.safetensors`: a checkpoint's weights under OLMo's
// parameter names in the safetensors format (8-byte little-endian header length, JSON
// header of name -> dtype/shape/offsets, then the raw tensors).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "commands.h"
#include "siamese/common/error.h"
#include "siamese/config/load.h"
#include "siamese/model/olmo_names.h"
#include "siamese/model/transformer.h"
#include "siamese/train/checkpoint.h"

namespace siamese::cli {

namespace {

std::string safetensors_dtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return "F32";
    case torch::kBFloat16: return "BF16";
    case torch::kFloat16: return "F16";
    default: throw Error(fmt::format("cannot export dtype {}", c10::toString(t)), "export");
  }
}

int run_export(const std::string& checkpoint, const std::string& out) {
  namespace fs = std::filesystem;
  const fs::path dir(checkpoint);
  if (!fs::exists(dir / "config.yaml"))
    throw Error("no config.yaml in the checkpoint folder", dir.string(),
                "pass a save_folder/step<N> folder written by `siamese train`");
  const TrainConfig cfg = load_config((dir / "config.yaml").string(), {});
  model::Transformer model(cfg.model);
  train::load_checkpoint(dir, *model, nullptr);

  const auto tensors = model::olmo_state(*model);
  std::string header = "{";
  int64_t offset = 0;
  std::vector<torch::Tensor> data;
  for (const auto& [name, t] : tensors) {
    auto c = t.detach().to(torch::kCPU).contiguous();
    const int64_t bytes = c.numel() * c.element_size();
    header += fmt::format("{}\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          header.size() > 1 ? "," : "", name, safetensors_dtype(c.scalar_type()),
                          fmt::join(c.sizes(), ","), offset, offset + bytes);
    offset += bytes;
    data.push_back(c);
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';  // keeps tensor data 8-byte aligned

  const std::string tmp = out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error("cannot write", tmp, "check the --out folder exists and is writable");
    const uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(header.data(), header.size());
    for (const auto& c : data)
      f.write(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  }
  fs::rename(tmp, out);
  spdlog::info("exported {} tensors ({} bytes) to {}", tensors.size(), offset, out);
  return 0;
}

}  // namespace

void add_export_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("export", "Write a checkpoint's weights as safetensors with OLMo names");
  auto checkpoint = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("checkpoint", *checkpoint, "save_folder/step<N>")->required();
  cmd->add_option("--out", *out, "output .safetensors file")->required();
  cmd->callback([&run, checkpoint, out] { run = [checkpoint, out] { return run_export(*checkpoint, *out); }; });
}

}  // namespace siamese::cli
