#include "siamese/export/hf_stock.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <type_traits>

#include "siamese/common/error.h"
#include "siamese/model/attention.h"
#include "siamese/model/mlp.h"
#include "siamese/model/olmo_names.h"
#include "siamese/model/parametrization.h"

namespace siamese::hf {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

ordered_json common_hf_config(const config::ModelConfig& c) {
  return {{"vocab_size", c.embedding_size},
          {"hidden_size", c.d_model},
          {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads},
          {"max_position_embeddings", c.max_sequence_length},
          {"eos_token_id", c.eos_token_id},
          {"pad_token_id", c.pad_token_id},
          {"torch_dtype", "float32"}};
}

namespace {

const std::vector<StockClass>& stock_classes() {
  static const std::vector<StockClass> classes = {
      {"LlamaForCausalLM", "llama", "pre", "input_layernorm", "post_attention_layernorm", false, false,
       false},
      {"Olmo2ForCausalLM", "olmo2", "reordered", "post_attention_layernorm", "post_feedforward_layernorm",
       true, false, false},
      {"Olmo3ForCausalLM", "olmo3", "reordered", "post_attention_layernorm", "post_feedforward_layernorm",
       true, false, true},
      {"OlmoeForCausalLM", "olmoe", "pre", "input_layernorm", "post_attention_layernorm", true, true, false},
  };
  return classes;
}

// Every layer's window (attention_window), -1 for full attention: transformers' layer_types.
std::vector<int64_t> layer_windows(const config::ModelConfig& c) {
  std::vector<int64_t> out;
  for (int64_t l = 0; l < c.n_layers; ++l) out.push_back(model::attention_window(c, l).value_or(-1));
  return out;
}

// The one window of the sliding layers; nullopt when every layer is full, -1 when they differ.
std::optional<int64_t> sliding_window(const config::ModelConfig& c) {
  std::optional<int64_t> w;
  for (int64_t x : layer_windows(c))
    if (x >= 0) w = !w || *w == x ? x : -1;
  return w;
}

// One layer's experts as ours stacks them ([E, 2 * inner, d] value rows first; [E, d, inner])
// from either OLMoE layout: save_pretrained's tensor per expert and projection, or the stacked
// tensors transformers holds in memory (gate_up_proj [E, 2 * inner, d] gate rows first;
// down_proj [E, d, inner]), which it also reads from a folder.
template <class Take, class Has>
std::pair<torch::Tensor, torch::Tensor> olmoe_experts(const config::ModelConfig& c, const std::string& p,
                                                      Take& take, Has& has) {
  if (has(p + "gate_up_proj")) {
    const auto gate_up = take(p + "gate_up_proj");
    const int64_t inner = gate_up.size(1) / 2;
    return {torch::cat({gate_up.narrow(1, inner, inner), gate_up.narrow(1, 0, inner)}, 1),
            take(p + "down_proj")};
  }
  std::vector<torch::Tensor> ff_proj, ff_out;
  for (int64_t e = 0; e < c.moe_num_experts; ++e) {
    const auto q = fmt::format("{}{}.", p, e);
    ff_proj.push_back(torch::cat({take(q + "up_proj.weight"), take(q + "gate_proj.weight")}));
    ff_out.push_back(take(q + "down_proj.weight"));
  }
  return {torch::stack(ff_proj), torch::stack(ff_out)};
}

}  // namespace

const StockClass* stock_class_named(const std::string& model_type) {
  for (const auto& cls : stock_classes())
    if (cls.model_type == model_type) return &cls;
  return nullptr;
}

std::string stock_class_list() {
  std::vector<std::string> names;
  for (const auto& cls : stock_classes()) names.push_back(cls.architecture);
  const std::string last = names.back();
  names.pop_back();
  return fmt::format("{} or {}", fmt::join(names, ", "), last);
}

const StockClass* stock_class_of(const config::ModelConfig& c, std::string* why_not) {
  const StockClass* cls = nullptr;
  const bool moe = c.is_moe();
  const auto window = sliding_window(c);
  for (const auto& candidate : stock_classes())
    if (candidate.topology == c.residual && candidate.moe == moe && candidate.windows == window.has_value())
      cls = &candidate;
  auto no = [&](const std::string& why) -> const StockClass* {
    *why_not = why;
    return nullptr;
  };
  if (!cls)
    return no("topology " + c.residual + (moe ? " with block_type moe" : "") +
              (window ? " with sliding-window attention" : ""));
  if (window == -1) return no("sliding windows of different sizes (Olmo3ForCausalLM has one sliding_window)");
  // OLMoE computes every routed token and has no shared expert.
  if (moe && !c.moe_dropless) return no("moe_dropless false, which OlmoeForCausalLM cannot drop tokens for");
  if (moe && c.moe_shared_expert) return no("moe_shared_expert, which OlmoeForCausalLM has not");
  if (c.layer_norm_type != config::LayerNormType::RMS)
    return no("layer_norm_type " + name_of(c.layer_norm_type));
  if (!c.layer_norm_with_affine || c.bias_for_layer_norm.value_or(c.include_bias))
    return no("norm affine/bias");
  if (c.activation_type != config::Activation::SwiGLU) return no("activation " + name_of(c.activation_type));
  if (!c.rope) return no("learned positions");
  if (c.include_bias) return no("biases");
  if (c.clip_qkv || c.use_query_norm || c.use_key_norm || c.use_value_norm)
    return no("Q/K/V clipping or norms");
  if (c.attention_layer_norm != cls->qk_norm || (cls->qk_norm && !c.attention_layer_norm_with_affine))
    return no(cls->qk_norm ? cls->architecture + " needs full-width Q/K norms with weights" : "Q/K norms");
  if (c.embedding_layer_norm || c.scale_logits) return no("embedding norm or scaled logits");
  const model::Parametrization shape = model::parametrization(c);
  if (shape.softmax() != 1.0 || shape.branch() != 1.0 || shape.logits() != 1.0)
    return no("model.parametrization's multipliers away from the base shape");
  return cls;
}

NamedTensors stock_tensors(const StockClass& cls, const config::ModelConfig& c, const NamedTensors& ours) {
  const int64_t d = c.d_model, kv = model::kv_head_count(c) * (d / c.n_heads),
                inner = model::mlp_inner_size(c);
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
      } else if (cls.moe && r == "router.weight") {
        out.emplace_back(p + "mlp.gate.weight", t);
      } else if (cls.moe && r == "experts.ff_proj") {
        for (int64_t e = 0; e < t.size(0); ++e) {
          const auto q = fmt::format("{}mlp.experts.{}.", p, e);
          out.emplace_back(q + "up_proj.weight", t[e].narrow(0, 0, inner));
          out.emplace_back(q + "gate_proj.weight", t[e].narrow(0, inner, inner));
        }
      } else if (cls.moe && r == "experts.ff_out") {
        for (int64_t e = 0; e < t.size(0); ++e)
          out.emplace_back(fmt::format("{}mlp.experts.{}.down_proj.weight", p, e), t[e]);
      } else if (cls.qk_norm && (r == "q_norm.weight" || r == "k_norm.weight")) {
        out.emplace_back(p + "self_attn." + r, t);
      } else {
        throw Error("no " + cls.architecture + " name for " + name, "export");
      }
    } else if (n.owner == Owner::Topology && n.layer) {
      if (r == "attn_norm.weight")
        out.emplace_back(p + cls.attn_norm + ".weight", t);
      else if (r == "ff_norm.weight")
        out.emplace_back(p + cls.ff_norm + ".weight", t);
      else
        throw Error("no " + cls.architecture + " name for " + name, "export");
    } else if (name == "wte.weight") {
      out.emplace_back("model.embed_tokens.weight", t);
    } else if (name == "topology.ln_f.weight") {
      out.emplace_back("model.norm.weight", t);
    } else if (name == "ff_out.weight") {
      out.emplace_back("lm_head.weight", t);
    } else {
      throw Error("no " + cls.architecture + " name for " + name, "export");
    }
  }
  for (auto& [name, t] : out) t = t.contiguous();
  return out;
}

NamedTensors ours_from_stock(const StockClass& cls, const config::ModelConfig& c, TensorMap hf,
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
  auto has = [&](const std::string& key) { return hf.count(key) > 0; };
  out.emplace_back("wte.weight", take("model.embed_tokens.weight"));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const auto p = fmt::format("model.layers.{}.", l), b = fmt::format("blocks.{}.", l);
    out.emplace_back(b + "attn.att_proj.weight",
                     torch::cat({take(p + "self_attn.q_proj.weight"), take(p + "self_attn.k_proj.weight"),
                                 take(p + "self_attn.v_proj.weight")}));
    out.emplace_back(b + "attn.attn_out.weight", take(p + "self_attn.o_proj.weight"));
    if (cls.moe) {
      out.emplace_back(b + "mlp.router.weight", take(p + "mlp.gate.weight"));
      auto [ff_proj, ff_out] = olmoe_experts(c, p + "mlp.experts.", take, has);
      out.emplace_back(b + "mlp.experts.ff_proj", std::move(ff_proj));
      out.emplace_back(b + "mlp.experts.ff_out", std::move(ff_out));
    } else {
      out.emplace_back(b + "mlp.ff_proj.weight",
                       torch::cat({take(p + "mlp.up_proj.weight"), take(p + "mlp.gate_proj.weight")}));
      out.emplace_back(b + "mlp.ff_out.weight", take(p + "mlp.down_proj.weight"));
    }
    if (cls.qk_norm) {
      out.emplace_back(b + "attn.q_norm.weight", take(p + "self_attn.q_norm.weight"));
      out.emplace_back(b + "attn.k_norm.weight", take(p + "self_attn.k_norm.weight"));
    }
    out.emplace_back("topology." + b + "attn_norm.weight", take(p + cls.attn_norm + ".weight"));
    out.emplace_back("topology." + b + "ff_norm.weight", take(p + cls.ff_norm + ".weight"));
  }
  out.emplace_back("topology.ln_f.weight", take("model.norm.weight"));
  if (!c.weight_tying) out.emplace_back("ff_out.weight", take("lm_head.weight"));
  if (!hf.empty())
    throw Error("tensor " + hf.begin()->first + " has no place in a " + cls.architecture +
                    (hf.size() > 1 ? fmt::format(" ({} more)", hf.size() - 1) : ""),
                where, "check that config.json's model_type describes these weights");
  return out;
}

ordered_json stock_config(const StockClass& cls, const config::ModelConfig& c) {
  ordered_json j = {{"architectures", {cls.architecture}}, {"model_type", cls.model_type}};
  j.update(common_hf_config(c));
  j.update({{"intermediate_size", model::mlp_inner_size(c)},
            {"num_key_value_heads", model::kv_head_count(c)},
            {"head_dim", c.d_model / c.n_heads},
            {"hidden_act", "silu"},
            {"rms_norm_eps", c.layer_norm_eps},
            {"rope_theta", c.rope_theta},
            {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
            {"attention_bias", false},
            {"attention_dropout", 0.0},
            {"tie_word_embeddings", c.weight_tying},
            {"use_cache", true}});
  if (cls.model_type == "llama") j["mlp_bias"] = false;
  if (cls.windows) {
    // Olmo3Config reads RoPE per layer type; both kinds rotate alike here.
    const ordered_json rope = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
    j["rope_parameters"] = {{"sliding_attention", rope}, {"full_attention", rope}};
    j.erase("rope_theta");
    // A folder whose layers are all full (layer_types) has no window; stock_disagreements
    // renders such a folder too.
    const auto window = sliding_window(c);
    j["sliding_window"] = window ? ordered_json(*window) : ordered_json(nullptr);
    ordered_json types = ordered_json::array();
    for (int64_t w : layer_windows(c)) types.push_back(w < 0 ? "full_attention" : "sliding_attention");
    j["layer_types"] = types;
  }
  if (cls.moe) {
    // transformers' load-balancing loss counts each token once per selected expert, top_k
    // times ours (mlp.h, MoeStats): this coefficient gives the loss ours adds in training.
    j.update({{"num_experts", c.moe_num_experts},
              {"num_experts_per_tok", c.moe_top_k},
              {"norm_topk_prob", c.moe_norm_topk_prob},
              {"clip_qkv", nullptr},
              {"output_router_logits", false},
              {"router_aux_loss_coef", c.moe_loss_weight / double(c.moe_top_k)}});
  }
  return j;
}

namespace {

// The rules between sizes (config/validate.cpp), said in config.json's keys: the model's
// own messages would name model.n_heads and model.moe_top_k, keys the folder does not have.
void check_stock_relations(const config::ModelConfig& m, const std::string& where) {
  auto require = [&](bool ok, const std::string& problem, const std::string& fix) {
    if (!ok) throw Error(problem, where, fix);
  };
  require(m.d_model % m.n_heads == 0,
          fmt::format("hidden_size {} is not divisible by num_attention_heads {}", m.d_model, m.n_heads),
          "write a num_attention_heads that divides hidden_size (the head size is their quotient)");
  const int64_t kv = m.n_kv_heads.value_or(m.n_heads);
  require(m.n_heads % kv == 0,
          fmt::format("num_attention_heads {} is not divisible by num_key_value_heads {}", m.n_heads, kv),
          "write a num_key_value_heads that divides num_attention_heads");
  require((m.d_model / m.n_heads) % 2 == 0,
          fmt::format("RoPE needs an even head size, but hidden_size / num_attention_heads is {}",
                      m.d_model / m.n_heads),
          "write hidden_size and num_attention_heads with an even quotient");
  require(!m.is_moe() || m.moe_top_k <= m.moe_num_experts,
          fmt::format("num_experts_per_tok {} exceeds num_experts {}", m.moe_top_k, m.moe_num_experts),
          "route each token to at most num_experts experts");
}

// Numbers equal up to the last bits (router_aux_loss_coef is divided and multiplied by
// num_experts_per_tok on the way), anything else exactly.
bool same_value(const ordered_json& a, const ordered_json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::abs(x - y) <= 1e-12 * std::max(std::abs(x), std::abs(y));
  }
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same_value(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object() && b.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it)
      if (!b.contains(it.key()) || !same_value(it.value(), b[it.key()])) return false;
    return true;
  }
  return a == b;
}

std::string short_text(const ordered_json& v) {
  const std::string text = v.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

}  // namespace

std::vector<std::string> stock_disagreements(const StockClass& cls, const nlohmann::json& j,
                                             const fs::path& dir, const config::ModelConfig& carried) {
  // Both sides rendered as export renders config.json, so resolved and unresolved forms of
  // one setting (n_kv_heads null, or the head count) compare equal.
  const ordered_json folder = stock_config(cls, config_from_stock(cls, j, dir).model);
  const ordered_json expected = stock_config(cls, carried);
  std::vector<std::string> out;
  for (auto it = expected.begin(); it != expected.end(); ++it)
    if (!folder.contains(it.key()) || !same_value(folder[it.key()], it.value()))
      out.push_back(fmt::format("{} {} (config.json) vs {} (siamese_run_config)", it.key(),
                                folder.contains(it.key()) ? short_text(folder[it.key()]) : "absent",
                                short_text(it.value())));
  return out;
}

std::string in_stock_keys(std::string text) {
  // Longest first, so that no key is replaced inside a longer one.
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"model.max_sequence_length", "max_position_embeddings"},
      {"model.sliding_window_pattern", "sliding_window"},
      {"model.moe_norm_topk_prob", "norm_topk_prob"},
      {"model.moe_loss_weight", "router_aux_loss_coef"},
      {"model.moe_num_experts", "num_experts"},
      {"model.mlp_hidden_size", "intermediate_size"},
      {"model.embedding_size", "vocab_size"},
      {"model.layer_norm_eps", "rms_norm_eps"},
      {"model.weight_tying", "tie_word_embeddings"},
      {"model.eos_token_id", "eos_token_id"},
      {"model.pad_token_id", "pad_token_id"},
      {"model.moe_top_k", "num_experts_per_tok"},
      {"model.vocab_size", "vocab_size"},
      {"model.n_kv_heads", "num_key_value_heads"},
      {"model.rope_theta", "rope_theta"},
      {"model.n_layers", "num_hidden_layers"},
      {"model.n_heads", "num_attention_heads"},
      {"model.d_model", "hidden_size"},
  };
  for (const auto& [ours, theirs] : keys)
    for (size_t at = 0; (at = text.find(ours, at)) != std::string::npos;) {
      const size_t end = at + ours.size();
      if (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) {
        at = end;
        continue;
      }
      text.replace(at, ours.size(), theirs);
      at += theirs.size();
    }
  return text;
}

void check_stock_shapes(const StockClass& cls, const config::ModelConfig& c, const NamedTensors& ours,
                        const TensorMap& hf, const std::string& where) {
  std::map<std::string, std::vector<int64_t>> expected;
  for (const auto& [name, t] : stock_tensors(cls, c, ours)) expected[name] = t.sizes().vec();
  if (cls.moe) {
    // The stacked layout transformers also reads (olmoe_experts).
    const int64_t experts = c.moe_num_experts, inner = model::mlp_inner_size(c), d = c.d_model;
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const auto p = fmt::format("model.layers.{}.mlp.experts.", l);
      expected[p + "gate_up_proj"] = {experts, 2 * inner, d};
      expected[p + "down_proj"] = {experts, d, inner};
    }
  }
  for (const auto& [name, t] : hf) {
    const auto it = expected.find(name);
    if (it == expected.end() || t.sizes().vec() == it->second) continue;  // ours_from_stock names the rest
    throw Error(
        fmt::format("tensor {} has shape {}, but config.json's sizes give it {}", name,
                    fmt::join(t.sizes(), "x"), fmt::join(it->second, "x")),
        where,
        fmt::format("check that config.json describes these weights: hidden_size {}, "
                    "num_attention_heads {}, num_key_value_heads {}, intermediate_size {}, vocab_size {}{}",
                    c.d_model, c.n_heads, model::kv_head_count(c), model::mlp_inner_size(c), c.embedding_size,
                    cls.moe ? fmt::format(", num_experts {}", c.moe_num_experts) : std::string()));
  }
}

config::TrainConfig config_from_stock(const StockClass& cls, const nlohmann::json& j, const fs::path& dir) {
  const std::string where = (dir / "config.json").string();
  // Sizes are positive integers; a string or a fraction is named with its key, not left to
  // the JSON library's type error.
  auto need = [&](const char* key) -> int64_t {
    if (!j.contains(key)) throw Error(std::string("missing key ") + key, where);
    const auto& v = j.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1)
      throw Error(
          fmt::format("config key {} is {}, not a positive integer", key, v.dump()), where,
          fmt::format("write {} as a number such as {}", key, key == std::string("vocab_size") ? 50304 : 16));
    return v.get<int64_t>();
  };
  // Optional keys: absent or null gives the default (transformers' own), and a value of the
  // wrong type is named with its key and what it should be.
  auto optional = [&](const nlohmann::json& obj, const char* key, auto fallback) {
    using T = decltype(fallback);
    if (!obj.contains(key) || obj.at(key).is_null()) return fallback;
    const auto& v = obj.at(key);
    bool fits = false;
    const char* kind = "";
    if constexpr (std::is_same_v<T, bool>) {
      fits = v.is_boolean(), kind = "true or false";
    } else if constexpr (std::is_integral_v<T>) {
      fits = v.is_number_integer() && v.template get<int64_t>() >= 1, kind = "a positive integer";
    } else if constexpr (std::is_floating_point_v<T>) {
      fits = v.is_number(), kind = "a number";
    } else {
      fits = v.is_string(), kind = "a string";
    }
    if (!fits)
      throw Error(fmt::format("config key {} is {}, not {}", key, v.dump(), kind), where,
                  fmt::format("write {} as {}, or leave it out", key, kind));
    return v.template get<T>();
  };
  auto refuse = [&](const char* key, const std::string& why) {
    throw Error(fmt::format("config key {} ({}) cannot be represented: {}", key, j.at(key).dump(), why),
                where,
                "only configs the stock " + cls.architecture + " computes without options can be imported");
  };
  if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) refuse("rope_scaling", "RoPE scaling");
  // Olmo3 keeps RoPE per layer type ({"sliding_attention": {...}, "full_attention": {...}}),
  // the others one set.
  std::vector<nlohmann::json> ropes;
  if (j.contains("rope_parameters") && j.at("rope_parameters").is_object()) {
    const auto& r = j.at("rope_parameters");
    if (cls.windows && (r.contains("sliding_attention") || r.contains("full_attention"))) {
      for (const char* type : {"sliding_attention", "full_attention"})
        if (r.contains(type) && r.at(type).is_object()) ropes.push_back(r.at(type));
    } else {
      ropes.push_back(r);
    }
  }
  for (const auto& r : ropes)
    if (optional(r, "rope_type", std::string("default")) != "default")
      refuse("rope_parameters", "RoPE scaling");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (optional(j, key, false)) refuse(key, "biases");
  if (optional(j, "hidden_act", std::string("silu")) != "silu") refuse("hidden_act", "SwiGLU uses silu");
  if (j.contains("clip_qkv") && !j.at("clip_qkv").is_null())
    refuse("clip_qkv", "OLMoE clips after its Q/K norms");
  config::TrainConfig cfg;
  auto& m = cfg.model;
  m.residual = cls.topology;
  m.attention_layer_norm = cls.qk_norm;
  m.layer_norm_type = config::LayerNormType::RMS;
  m.activation_type = config::Activation::SwiGLU;
  m.rope = true;
  m.include_bias = false;
  m.attention_dropout = m.residual_dropout = m.embedding_dropout = 0.0;
  m.d_model = need("hidden_size");
  m.n_layers = need("num_hidden_layers");
  m.n_heads = need("num_attention_heads");
  m.n_kv_heads = optional(j, "num_key_value_heads", m.n_heads);
  if (j.contains("head_dim") && !j.at("head_dim").is_null() && j.at("head_dim") != m.d_model / m.n_heads)
    refuse("head_dim", "the head size must be hidden_size / num_attention_heads");
  m.mlp_hidden_size = 2 * need("intermediate_size");
  if (cls.moe) {
    m.block_type = config::BlockType::Moe;
    m.moe_num_experts = need("num_experts");
    m.moe_top_k = need("num_experts_per_tok");
    m.moe_norm_topk_prob = optional(j, "norm_topk_prob", false);
    m.moe_loss_weight = optional(j, "router_aux_loss_coef", 0.01) * double(m.moe_top_k);
  }
  check_stock_relations(m, where);
  m.layer_norm_eps = optional(j, "rms_norm_eps", 1e-6);
  // transformers' own default period, Olmo3's 500000 included, where none is written.
  const double theta = optional(j, "rope_theta", cls.windows ? 500000.0 : 10000.0);
  m.rope_theta = ropes.empty() ? theta : optional(ropes.front(), "rope_theta", theta);
  for (const auto& r : ropes)
    if (optional(r, "rope_theta", theta) != m.rope_theta)
      refuse("rope_parameters", "RoPE periods that differ between layer types");
  if (cls.windows) {
    // layer_types (absent: Olmo3Config's three sliding layers to one full) and sliding_window
    // (null: the sliding layers read everything), written as the pattern's shortest period.
    const bool unbounded = j.contains("sliding_window") && j.at("sliding_window").is_null();
    const int64_t w = unbounded ? -1 : optional(j, "sliding_window", int64_t(4096));
    std::vector<int64_t> windows;
    for (int64_t l = 0; l < m.n_layers; ++l) windows.push_back((l + 1) % 4 ? w : -1);
    if (j.contains("layer_types") && !j.at("layer_types").is_null()) {
      const auto& types = j.at("layer_types");
      if (!types.is_array() || int64_t(types.size()) != m.n_layers)
        refuse("layer_types", "it needs one entry per layer");
      for (int64_t l = 0; l < m.n_layers; ++l) {
        if (types[l] == "sliding_attention")
          windows[l] = w;
        else if (types[l] == "full_attention")
          windows[l] = -1;
        else
          refuse("layer_types", "only sliding_attention and full_attention layers exist here");
      }
    }
    size_t period = 1;
    auto repeats = [&](size_t p) {
      for (size_t l = 0; l < windows.size(); ++l)
        if (windows[l] != windows[l % p]) return false;
      return true;
    };
    while (period < windows.size() && !repeats(period)) ++period;
    m.sliding_window_pattern.assign(windows.begin(), windows.begin() + std::ptrdiff_t(period));
  }
  m.vocab_size = m.embedding_size = need("vocab_size");
  m.max_sequence_length = optional(j, "max_position_embeddings", int64_t(2048));
  m.weight_tying = optional(j, "tie_word_embeddings", false);
  if (j.contains("eos_token_id") && j.at("eos_token_id").is_number()) m.eos_token_id = j.at("eos_token_id");
  m.pad_token_id = j.contains("pad_token_id") && j.at("pad_token_id").is_number()
                       ? j.at("pad_token_id").get<int64_t>()
                       : m.eos_token_id;
  return cfg;
}

}  // namespace siamese::hf
