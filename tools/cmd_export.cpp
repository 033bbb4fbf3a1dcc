// `siamese export CHECKPOINT --out DIR`: a Hugging Face model folder from a checkpoint or a
// run folder (its newest checkpoint): config.json, model.safetensors (sharded with an index
// above --max-shard-bytes), generation_config.json and, for tokenizer-based runs, the
// tokenizer files. A Pre-Norm RMSNorm / SwiGLU / RoPE model is written as a stock
// LlamaForCausalLM (same maths, docs/huggingface.md says why); every other model keeps the
// C++ parameter names and ships modeling_siamese.py (python/, compiled into the binary),
// which transformers loads with trust_remote_code=True.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "checkpoint_model.h"
#include "commands.h"
#include "hf_llama.h"
#include "siamese/common/error.h"
#include "siamese/model/mlp.h"
#include "siamese/modeling_py.h"
#include "siamese/tokenizer/tokenizer.h"

namespace siamese::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string safetensors_dtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32:
      return "F32";
    case torch::kBFloat16:
      return "BF16";
    case torch::kFloat16:
      return "F16";
    default:
      throw Error(fmt::format("cannot export dtype {}", c10::toString(t)), "export");
  }
}

// One safetensors file: 8-byte little-endian header length, JSON header of name ->
// dtype/shape/offsets, then the raw tensors. Written to a temporary name, then renamed.
void write_safetensors(const fs::path& path, const NamedTensors& tensors) {
  json header = json::object();
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t bytes = t.numel() * t.element_size();
    header[name] = {{"dtype", safetensors_dtype(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';  // keeps tensor data 8-byte aligned
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error("cannot write", tmp.string(), "check the --out folder is writable");
    const uint64_t n = text.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(text.data(), std::streamsize(text.size()));
    for (const auto& [name, t] : tensors)
      f.write(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  }
  fs::rename(tmp, path);
}

json common_config(const ModelConfig& c) {
  return {{"vocab_size", c.embedding_size},
          {"hidden_size", c.d_model},
          {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads},
          {"max_position_embeddings", c.max_sequence_length},
          {"eos_token_id", c.eos_token_id},
          {"pad_token_id", c.pad_token_id},
          {"torch_dtype", "float32"}};
}

json llama_config(const ModelConfig& c) {
  json j = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}};
  j.update(common_config(c));
  j.update({{"intermediate_size", model::mlp_inner_size(c)},
            {"num_key_value_heads", kv_heads(c)},
            {"head_dim", c.d_model / c.n_heads},
            {"hidden_act", "silu"},
            {"rms_norm_eps", c.layer_norm_eps},
            {"rope_theta", c.rope_theta},
            {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"attention_dropout", 0.0},
            {"tie_word_embeddings", c.weight_tying},
            {"use_cache", true}});
  return j;
}

// The settings modeling_siamese.py reads, resolved as the C++ model resolves them.
json siamese_config(const ModelConfig& c) {
  json j = {{"architectures", {"SiameseForCausalLM"}},
            {"model_type", "siamese"},
            {"auto_map",
             {{"AutoConfig", "modeling_siamese.SiameseConfig"},
              {"AutoModelForCausalLM", "modeling_siamese.SiameseForCausalLM"}}}};
  j.update(common_config(c));
  j["use_cache"] = false;
  j["siamese"] = {{"residual", c.residual},
                  {"d_model", c.d_model},
                  {"n_heads", c.n_heads},
                  {"n_kv_heads", kv_heads(c)},
                  {"n_layers", c.n_layers},
                  {"mlp_hidden_size", model::mlp_hidden_size(c)},
                  {"activation_type", c.activation_type},
                  {"include_bias", c.include_bias},
                  {"layer_norm_type", c.layer_norm_type},
                  {"layer_norm_eps", c.layer_norm_eps},
                  {"layer_norm_with_affine", c.layer_norm_with_affine},
                  {"bias_for_layer_norm", c.bias_for_layer_norm.value_or(c.include_bias)},
                  {"attention_layer_norm", c.attention_layer_norm},
                  {"attention_layer_norm_with_affine", c.attention_layer_norm_with_affine},
                  {"use_query_norm", c.use_query_norm},
                  {"use_key_norm", c.use_key_norm},
                  {"use_value_norm", c.use_value_norm},
                  {"clip_qkv", c.clip_qkv ? json(*c.clip_qkv) : json(nullptr)},
                  {"rope", c.rope},
                  {"rope_theta", c.rope_theta},
                  {"embedding_layer_norm", c.embedding_layer_norm},
                  {"weight_tying", c.weight_tying},
                  {"scale_logits", c.scale_logits},
                  {"max_sequence_length", c.max_sequence_length},
                  {"embedding_size", c.embedding_size},
                  {"mixln_alpha", c.mixln_alpha},
                  {"hc_rate", c.hc_rate},
                  {"hc_dynamic", c.hc_dynamic},
                  {"siamese",
                   {{"depth_scaling", c.siamese.depth_scaling},
                    {"fused_input_norm", c.siamese.fused_input_norm},
                    {"gamma", c.siamese.gamma}}}};
  return j;
}

void write_json(const fs::path& path, const json& j) { std::ofstream(path) << j.dump(2) << "\n"; }

// model.safetensors, or shards of at most max_bytes each plus the index transformers reads.
void write_weights(const fs::path& out, const NamedTensors& tensors, int64_t max_bytes) {
  std::vector<NamedTensors> shards(1);
  int64_t size = 0, total = 0;
  for (const auto& nt : tensors) {
    const int64_t bytes = nt.second.numel() * nt.second.element_size();
    if (size > 0 && size + bytes > max_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(nt);
    size += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    write_safetensors(out / "model.safetensors", tensors);
    return;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", json::object()}};
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    write_safetensors(out / file, shards[i]);
    for (const auto& nt : shards[i]) index["weight_map"][nt.first] = file;
  }
  write_json(out / "model.safetensors.index.json", index);
}

int run_export(const std::string& checkpoint, const std::string& out_dir, int64_t max_shard_bytes) {
  auto ck = load_checkpoint_model(checkpoint, torch::kCPU);
  const auto& c = ck.config.model;
  NamedTensors ours;
  for (const auto& p : ck.model->named_parameters())
    ours.emplace_back(p.key(), p.value().detach().contiguous());
  const fs::path out(out_dir);
  fs::create_directories(out);
  const std::string why = not_llama(c);
  // The whole run config rides along, so that `siamese import` restores it as it was.
  json config = why.empty() ? llama_config(c) : siamese_config(c);
  config["siamese_run_config"] = to_yaml(ck.config);
  write_json(out / "config.json", config);
  if (why.empty()) {
    write_weights(out, llama_tensors(c, ours), max_shard_bytes);
  } else {
    write_weights(out, ours, max_shard_bytes);
    std::ofstream(out / "modeling_siamese.py") << kModelingSiamesePy;
  }
  write_json(out / "generation_config.json", {{"eos_token_id", c.eos_token_id},
                                              {"pad_token_id", c.pad_token_id},
                                              {"do_sample", false},
                                              {"max_length", c.max_sequence_length},
                                              {"use_cache", why.empty()}});
  if (ck.config.data.synthetic.empty()) {
    const auto tok_path = ck.config.tokenizer.identifier;
    if (!fs::exists(tok_path))
      throw Error(fmt::format("tokenizer file \"{}\" not found", tok_path),
                  (ck.dir / "config.yaml").string() + " (tokenizer.identifier)",
                  "export from a machine where the run's tokenizer.json is at that path");
    fs::copy_file(tok_path, out / "tokenizer.json", fs::copy_options::overwrite_existing);
    const auto tok = tokenizer::Tokenizer::from_file(tok_path);
    const auto eos = tok.id_to_token(int32_t(c.eos_token_id));
    json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"model_max_length", c.max_sequence_length}};
    if (eos) tc["eos_token"] = *eos;
    write_json(out / "tokenizer_config.json", tc);
  }
  spdlog::info("exported {} (step {}, {}) to {} as {}", ck.dir.string(), ck.step, c.residual, out.string(),
               why.empty() ? "LlamaForCausalLM" : "SiameseForCausalLM (" + why + ")");
  return 0;
}

}  // namespace

void add_export_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("export", "Write a checkpoint as a Hugging Face model folder");
  auto checkpoint = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto shard = std::make_shared<int64_t>(int64_t(5) << 30);
  cmd->add_option("checkpoint", *checkpoint, "step<N> folder or run folder (its newest checkpoint)")
      ->required();
  cmd->add_option("--out", *out, "output folder")->required();
  cmd->add_option("--max-shard-bytes", *shard, "split model.safetensors above this size")
      ->check(CLI::PositiveNumber);
  cmd->callback([&run, checkpoint, out, shard] {
    run = [checkpoint, out, shard] { return run_export(*checkpoint, *out, *shard); };
  });
}

}  // namespace siamese::cli
