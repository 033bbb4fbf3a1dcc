// scripts/bench_pytorch.py's plain-PyTorch model against siamese's, the premise of every
// siamese-vs-PyTorch figure in docs/results.md. For pre and hybrid_pre, with OLMo-1B's norms
// (LayerNorm without weights, tied head) and with RMSNorm with weights and an untied head, a
// small model is built here and its parameters, moved off their initial values, are written
// under siamese's names. The script's --parity builds its model from the same options, must
// find the same tensors name for name and shape for shape, loads them, and compares its
// float32 logits with siamese's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>
#include <vector>

#include "siamese/common/npy.h"
#include "siamese/export/safetensors.h"
#include "siamese/model/transformer.h"
#include "support/files.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace siamese {
namespace {

struct Case {
  std::string topology;
  bool layer_norm, affine, tied;
  std::string label() const {
    return topology + (layer_norm ? "_layer" : "_rms") + (affine ? "_affine" : "") + (tied ? "_tied" : "");
  }
};

config::ModelConfig model_of(const Case& c) {
  config::ModelConfig m;
  m.d_model = 32;
  m.n_heads = 4;
  m.n_layers = 3;
  m.mlp_ratio = 8;
  m.rope = true;
  m.include_bias = false;
  m.layer_norm_type = c.layer_norm ? config::LayerNormType::Default : config::LayerNormType::RMS;
  m.layer_norm_with_affine = m.attention_layer_norm_with_affine = c.affine;
  m.bias_for_layer_norm = false;
  m.weight_tying = c.tied;
  m.vocab_size = m.embedding_size = 256;
  m.max_sequence_length = 32;
  m.attention_dropout = m.residual_dropout = m.embedding_dropout = 0.0;
  siamese::testing::set_topology(m, c.topology);
  return m;
}

// bench_pytorch.py's options for the same model, as its --parity reads them.
std::string options_of(const Case& c, const config::ModelConfig& m) {
  return "{\"topology\": \"" + c.topology + "\", \"d_model\": " + std::to_string(m.d_model) +
         ", \"heads\": " + std::to_string(m.n_heads) + ", \"layers\": " + std::to_string(m.n_layers) +
         ", \"mlp_ratio\": " + std::to_string(m.mlp_ratio) +
         ", \"vocab\": " + std::to_string(m.embedding_size) +
         ", \"seq\": " + std::to_string(m.max_sequence_length) + ", \"norm\": \"" +
         (c.layer_norm ? "layer" : "rms") + "\", \"no_affine\": " + (c.affine ? "false" : "true") +
         ", \"tied\": " + (c.tied ? "true" : "false") + "}";
}

TEST(BenchPytorch, ThePlainPyTorchModelIsSiamesesParameterForParameter) {
  siamese::testing::TempDir dir;
  const std::vector<Case> cases{{"pre", true, false, true},
                                {"hybrid_pre", true, false, true},
                                {"pre", false, true, false},
                                {"hybrid_pre", false, true, false}};
  std::string folders;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label());
    const std::string folder = dir.file(c.label());
    std::filesystem::create_directories(folder);
    const auto cfg = model_of(c);
    torch::manual_seed(0);
    model::Transformer m(cfg);
    m->eval();
    model::NamedTensors params;
    {
      torch::NoGradGuard g;
      // Every vector (norm weights, c1) off its initial value, so that a misplaced one shows.
      for (auto& p : m->named_parameters()) {
        if (p.value().dim() == 1) p.value().copy_(1.0 + 0.3 * torch::randn_like(p.value()));
        params.emplace_back(p.key(), p.value().detach().clone());
      }
      const auto ids = torch::randint(cfg.embedding_size, {2, 16}, torch::kLong);
      write_npy(folder + "/ids.npy", ids);
      write_npy(folder + "/logits.npy", m->forward(ids));
    }
    hf::write_safetensors(folder + "/weights.safetensors", params);
    std::ofstream(folder + "/model.json") << options_of(c, cfg);
    folders += " " + folder;
  }
  const std::string log = dir.file("parity.log");
  const int status =
      siamese::testing::run_python(
          std::string(SIAMESE_SOURCE_DIR) + "/scripts/bench_pytorch.py --parity" + folders, log)
          .exit_code;
  const std::string text = siamese::testing::read_all(log);
  std::cout << text;
  for (const auto& c : cases)
    EXPECT_NE(text.find("case " + dir.file(c.label()) + ": ok"), std::string::npos) << c.label();
  EXPECT_EQ(status, 0);
}

}  // namespace
}  // namespace siamese
