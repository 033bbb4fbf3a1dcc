#pragma once
// The one correspondence between a siamese Pre-Norm model and Hugging Face's
// LlamaForCausalLM, in both directions (export writes it, import reads it).
// att_proj's rows are [q | k | v]; ff_proj's first half is SwiGLU's value (Llama's up_proj),
// its second the gate (gate_proj).
#include <fmt/format.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "siamese/common/error.h"
#include "siamese/config/config.h"
#include "siamese/model/mlp.h"
#include "siamese/model/olmo_names.h"

namespace siamese::cli {

using model::NamedTensors;

// Why the model is not exactly a stock LlamaForCausalLM, or "" when it is.
inline std::string not_llama(const ModelConfig& c) {
  if (c.residual != "pre") return "topology " + c.residual;
  if (c.layer_norm_type != "rms") return "LayerNorm";
  if (!c.layer_norm_with_affine || c.bias_for_layer_norm.value_or(c.include_bias)) return "norm affine/bias";
  if (c.activation_type != "swiglu") return "activation " + c.activation_type;
  if (!c.rope) return "learned positions";
  if (c.include_bias) return "biases";
  if (c.clip_qkv || c.attention_layer_norm || c.use_query_norm || c.use_key_norm || c.use_value_norm)
    return "Q/K/V clipping or norms";
  if (c.embedding_layer_norm || c.scale_logits) return "embedding norm or scaled logits";
  return "";
}

inline int64_t kv_heads(const ModelConfig& c) {
  return c.multi_query_attention ? 1 : c.n_kv_heads.value_or(c.n_heads);
}

// Llama's names; att_proj splits into q/k/v, ff_proj's halves are (value, gate) = (up, gate).
inline NamedTensors llama_tensors(const ModelConfig& c, const NamedTensors& ours) {
  const int64_t d = c.d_model, kv = kv_heads(c) * (d / c.n_heads), inner = model::mlp_inner_size(c);
  NamedTensors out;
  using Owner = model::ParamName::Owner;
  for (const auto& [name, t] : ours) {
    const model::ParamName n = model::parse_param_name(name);
    const std::string& r = n.local;
    const std::string p = n.layer ? fmt::format("model.layers.{}.", *n.layer) : "";
    if (n.owner == Owner::Attention || n.owner == Owner::Mlp) {
      if (r == "att_proj.weight") {
        out.emplace_back(p + "self_attn.q_proj.weight", t.narrow(0, 0, d));
        out.emplace_back(p + "self_attn.k_proj.weight", t.narrow(0, d, kv));
        out.emplace_back(p + "self_attn.v_proj.weight", t.narrow(0, d + kv, kv));
      } else if (r == "attn_out.weight") {
        out.emplace_back(p + "self_attn.o_proj.weight", t);
      } else if (r == "ff_proj.weight") {
        out.emplace_back(p + "mlp.up_proj.weight", t.narrow(0, 0, inner));
        out.emplace_back(p + "mlp.gate_proj.weight", t.narrow(0, inner, inner));
      } else if (r == "ff_out.weight") {
        out.emplace_back(p + "mlp.down_proj.weight", t);
      } else {
        throw Error("no Llama name for " + name, "export");
      }
    } else if (n.owner == Owner::Topology && n.layer) {
      if (r == "attn_norm.weight")
        out.emplace_back(p + "input_layernorm.weight", t);
      else if (r == "ff_norm.weight")
        out.emplace_back(p + "post_attention_layernorm.weight", t);
      else
        throw Error("no Llama name for " + name, "export");
    } else if (name == "wte.weight") {
      out.emplace_back("model.embed_tokens.weight", t);
    } else if (name == "topology.ln_f.weight") {
      out.emplace_back("model.norm.weight", t);
    } else if (name == "ff_out.weight") {
      out.emplace_back("lm_head.weight", t);
    } else {
      throw Error("no Llama name for " + name, "export");
    }
  }
  for (auto& [name, t] : out) t = t.contiguous();
  return out;
}

// Our parameters from Llama's tensors; a key that has no place here is an Error naming it.
inline NamedTensors ours_from_llama(const ModelConfig& c, std::map<std::string, torch::Tensor> hf,
                                    const std::string& where) {
  NamedTensors out;
  auto take = [&](const std::string& key) {
    auto it = hf.find(key);
    if (it == hf.end())
      throw Error("missing tensor " + key, where, "export the folder again or check its model type");
    auto t = it->second;
    hf.erase(it);
    return t;
  };
  out.emplace_back("wte.weight", take("model.embed_tokens.weight"));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const auto p = fmt::format("model.layers.{}.", l), b = fmt::format("blocks.{}.", l);
    out.emplace_back(b + "attn.att_proj.weight",
                     torch::cat({take(p + "self_attn.q_proj.weight"), take(p + "self_attn.k_proj.weight"),
                                 take(p + "self_attn.v_proj.weight")}));
    out.emplace_back(b + "attn.attn_out.weight", take(p + "self_attn.o_proj.weight"));
    out.emplace_back(b + "mlp.ff_proj.weight",
                     torch::cat({take(p + "mlp.up_proj.weight"), take(p + "mlp.gate_proj.weight")}));
    out.emplace_back(b + "mlp.ff_out.weight", take(p + "mlp.down_proj.weight"));
    out.emplace_back("topology." + b + "attn_norm.weight", take(p + "input_layernorm.weight"));
    out.emplace_back("topology." + b + "ff_norm.weight", take(p + "post_attention_layernorm.weight"));
  }
  out.emplace_back("topology.ln_f.weight", take("model.norm.weight"));
  if (!c.weight_tying) out.emplace_back("ff_out.weight", take("lm_head.weight"));
  if (!hf.empty())
    throw Error("tensor " + hf.begin()->first + " has no place in a Pre-Norm model" +
                    (hf.size() > 1 ? fmt::format(" ({} more)", hf.size() - 1) : ""),
                where, "only LlamaForCausalLM-shaped weights can be imported as Llama");
  return out;
}

}  // namespace siamese::cli
