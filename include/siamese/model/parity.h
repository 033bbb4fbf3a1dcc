#pragma once
// Parity with the official PyTorch code on a golden folder (shared/golden/README.md
// layout): config.json (OLMo's model_config_full), weights/<OLMo key>.npy, input_ids.npy,
// logits.npy, loss.npy, grad/<OLMo key>.npy and optionally hidden/<stream>_after_block_<i>.npy
// and hidden/final_hidden.npy, intermediates/block<i>/{attn_in,attn_out,ffn_in,ffn_out}.npy
// (the sublayer probe). Behind `siamese parity` and tests/model/parity_test.cpp.
#include <string>
#include <vector>

#include "siamese/config/config.h"

namespace siamese::model {

// OLMo's ModelConfig (config.json's model_config_full) as ours. The topology comes from the
// HybridNorm flags (attn_norm, ffn_norm, *_residual_after_norm, norm_pos_special_config)
// and, for SiameseNorm's second stream, from the checkpoint keys (`olmo_keys`: a
// transformer.ln_y_f.* key means hybrid_pre). Options our model does not implement
// (alibi, block groups, norm_after, context norm, ...) throw siamese::Error listing them.
config::ModelConfig model_config_from_olmo(const std::string& config_json,
                                           const std::vector<std::string>& olmo_keys);

struct ParityRow {
  std::string name;    // "logits", "loss", "grad <key>", "hidden <file>", "intermediate <file>"
  double max_abs = 0;  // max |ours - reference|
  double max_rel = 0;  // max_abs / max |reference| (the scale-relative error)
};

struct ParityResult {
  std::string topology;
  std::vector<ParityRow> rows;
  std::vector<std::string> not_compared;  // reference files with no counterpart here
  double worst_rel() const;
};

// Loads the folder, runs forward and backward in float32 on CPU (eval mode, loss = mean
// cross-entropy of logits[:, :-1] against input_ids[:, 1:]) and compares everything.
ParityResult run_parity(const std::string& golden_dir);

}  // namespace siamese::model
