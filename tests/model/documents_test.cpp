// Intra-document attention (documents.h, data.generate_doc_lengths): a packed row computes
// each document as if it were run alone.
#include "siamese/model/documents.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "siamese/model/lm_loss.h"
#include "siamese/model/transformer.h"
#include "support/tiny_configs.h"

namespace siamese::model {
namespace {

constexpr int64_t kEos = 7;

config::ModelConfig packed_model(const std::string& residual) {
  config::ModelConfig c = siamese::testing::tiny_model(residual, {32, 4, 2, 50, 64, 64});
  c.rope = true;
  c.eos_token_id = kEos;
  return c;
}

// Documents of the given lengths, each closed by EOS except the last when `open_end`.
struct Packing {
  std::vector<std::vector<int64_t>> docs;
  std::vector<int64_t> offsets;  // where each starts in the row
  torch::Tensor row;             // [1, sum of lengths]
};

Packing pack(const std::vector<int64_t>& lengths, bool open_end, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> token(0, 49);
  Packing p;
  std::vector<int64_t> all;
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int64_t> doc;
    for (int64_t i = 0; i < lengths[d]; ++i) {
      int64_t t = token(rng);
      while (t == kEos) t = token(rng);
      doc.push_back(t);
    }
    if (!(open_end && d + 1 == lengths.size())) doc.back() = kEos;
    p.offsets.push_back(int64_t(all.size()));
    all.insert(all.end(), doc.begin(), doc.end());
    p.docs.push_back(doc);
  }
  p.row = torch::tensor(all, torch::kInt64).unsqueeze(0);
  return p;
}

// Per-position cross-entropy of logits [1, T, V] against the next token of ids [1, T]
// (positions 0..T-2).
torch::Tensor token_losses(const torch::Tensor& logits, const torch::Tensor& ids) {
  const int64_t T = ids.size(1);
  return torch::nll_loss(torch::log_softmax(logits[0].narrow(0, 0, T - 1), -1), ids[0].narrow(0, 1, T - 1),
                         {}, at::Reduction::None);
}

torch::Tensor forward_documents(TransformerImpl& m, const torch::Tensor& ids, bool restart) {
  const Documents docs = find_documents(ids, kEos, restart);
  ForwardOptions opts;
  opts.documents = &docs;
  return m.forward(ids, opts);
}

TEST(Documents, MaskAndPositionsFollowTheEosTokens) {
  // Documents [3 1 E] [4 E] [E] [5 6]: an EOS closes its own document.
  const auto ids = torch::tensor(std::vector<int64_t>{3, 1, kEos, 4, kEos, kEos, 5, 6}).unsqueeze(0);
  const auto d = find_documents(ids, kEos, true);
  const std::vector<int64_t> doc_of = {0, 0, 0, 1, 1, 2, 3, 3}, position = {0, 1, 2, 0, 1, 0, 0, 1};
  ASSERT_EQ(d.allowed.sizes(), torch::IntArrayRef({1, 1, 8, 8}));
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(d.positions[0][i].item<int64_t>(), position[i]) << "token " << i;
    for (int64_t j = 0; j < 8; ++j)
      EXPECT_EQ(d.allowed[0][0][i][j].item<bool>(), j <= i && doc_of[i] == doc_of[j]) << i << " reads " << j;
  }
  EXPECT_FALSE(find_documents(ids, kEos, false).positions.defined());
  EXPECT_FALSE(d.cu_seqlens.defined());  // the flash kernel's offsets are built on CUDA only
}

class PackedDocuments : public ::testing::TestWithParam<std::string> {};

// With positions restarted, a document inside a packed row is the document run alone from
// position 0: every logit, so every token's loss, agrees.
TEST_P(PackedDocuments, EachTokensLossIsTheDocumentRunAlone) {
  torch::manual_seed(11);
  Transformer m(packed_model(GetParam()));
  m->eval();
  torch::NoGradGuard no_grad;
  const auto p = pack({9, 4, 13, 1, 6}, /*open_end=*/true, 5);
  const auto logits = forward_documents(*m, p.row, /*restart=*/true);
  const auto losses = token_losses(logits, p.row);
  for (size_t d = 0; d < p.docs.size(); ++d) {
    const int64_t L = int64_t(p.docs[d].size()), at = p.offsets[d];
    const auto alone_ids = torch::tensor(p.docs[d], torch::kInt64).unsqueeze(0);
    const auto alone = m->forward(alone_ids);
    EXPECT_LT((logits[0].narrow(0, at, L) - alone[0]).abs().max().item<double>(), 1e-5) << "document " << d;
    if (L < 2) continue;
    const auto alone_losses = token_losses(alone, alone_ids);
    EXPECT_LT((losses.narrow(0, at, L - 1) - alone_losses).abs().max().item<double>(), 1e-5)
        << "document " << d;
  }
  // RoPE's scores depend only on the distance between positions, so without the restart the
  // document is the same computation at shifted angles: equal up to rounding too.
  const auto shifted = forward_documents(*m, p.row, false);
  for (size_t d = 0; d < p.docs.size(); ++d) {
    const auto alone = m->forward(torch::tensor(p.docs[d], torch::kInt64).unsqueeze(0));
    const int64_t L = int64_t(p.docs[d].size());
    EXPECT_LT((shifted[0].narrow(0, p.offsets[d], L) - alone[0]).abs().max().item<double>(), 1e-5)
        << "document " << d;
  }
}

// Without the restart, positions run over the row, so the reference is the row itself with
// every other document's tokens replaced: the mask alone must keep the document's losses.
TEST_P(PackedDocuments, TheMaskAloneHidesTheOtherDocuments) {
  torch::manual_seed(12);
  Transformer m(packed_model(GetParam()));
  m->eval();
  torch::NoGradGuard no_grad;
  const auto p = pack({7, 12, 5, 10}, /*open_end=*/false, 6);
  const auto q = pack({7, 12, 5, 10}, /*open_end=*/false, 99);  // same boundaries, other tokens
  for (size_t d = 0; d < p.docs.size(); ++d) {
    const int64_t L = int64_t(p.docs[d].size()), at = p.offsets[d];
    auto other = q.row.clone();
    other.narrow(1, at, L).copy_(p.row.narrow(1, at, L));
    ASSERT_FALSE(torch::equal(other, p.row));
    const auto mine = token_losses(forward_documents(*m, p.row, false), p.row).narrow(0, at, L - 1);
    const auto theirs = token_losses(forward_documents(*m, other, false), other).narrow(0, at, L - 1);
    EXPECT_LT((mine - theirs).abs().max().item<double>(), 1e-5) << "document " << d;
    // The check can fail: without the mask the documents after the first read the others.
    if (d > 0) {
      const auto unmasked = token_losses(m->forward(p.row), p.row).narrow(0, at, L - 1);
      const auto unmasked_other = token_losses(m->forward(other), other).narrow(0, at, L - 1);
      EXPECT_GT((unmasked - unmasked_other).abs().max().item<double>(), 1e-3) << "document " << d;
    }
  }
}

// Several rows, activation checkpointing and the loss function: the training path's
// per-token losses equal the documents run alone.
TEST_P(PackedDocuments, TrainingLossSumsMatchTheDocumentsAlone) {
  torch::manual_seed(13);
  config::ModelConfig c = packed_model(GetParam());
  c.activation_checkpointing = config::ActivationCheckpointing::WholeLayer;
  Transformer m(c);
  m->train();  // dropout is off in tiny models; checkpointing only runs in training
  const auto a = pack({5, 11, 8}, false, 1), b = pack({3, 3, 18}, false, 2);
  const auto rows = torch::cat({a.row, b.row});
  const auto packed = lm_loss_sums(*m, rows, std::nullopt, DocumentRule{kEos, true}).nll;
  // Each document alone, plus the loss of each EOS on the first token of the next document
  // (a position of the packed row whose target lies outside its document).
  torch::Tensor expected = torch::zeros({}, torch::kFloat);
  for (const auto* p : {&a, &b}) {
    const auto row_logits = forward_documents(*m, p->row, true);
    const auto row_losses = token_losses(row_logits, p->row);
    for (size_t d = 0; d < p->docs.size(); ++d) {
      const auto ids = torch::tensor(p->docs[d], torch::kInt64).unsqueeze(0);
      expected = expected + lm_loss_sum(*m, ids);
      if (d + 1 < p->docs.size()) expected = expected + row_losses[p->offsets[d + 1] - 1];
    }
  }
  EXPECT_LT((packed - expected).abs().item<double>(), 1e-4 * expected.item<double>());
  packed.backward();  // the checkpointed blocks recompute with the same documents
  for (const auto& g : m->parameters())
    ASSERT_TRUE(g.grad().defined() && torch::isfinite(g.grad()).all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(Topologies, PackedDocuments, ::testing::Values("pre", "hybrid_pre"));

// On CUDA in bf16 attention runs LibTorch's variable-length flash kernel over the rows laid
// end to end: its offsets are the documents', and its logits and gradients follow the float32
// masked SDPA path to bf16 precision (ctest label gpu; skips without a CUDA device).
TEST(GpuDocuments, VarlenFlashFollowsTheMaskedFloat32Path) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the flash kernel needs a GPU";
  const auto a = pack({9, 4, 13, 1, 6}, true, 5), b = pack({20, 13}, true, 8);
  const auto rows = torch::cat({a.row, b.row}).to(torch::kCUDA);
  const auto docs = find_documents(rows, kEos, true);
  const std::vector<int64_t> offsets = {0, 9, 13, 26, 27, 33, 53, 66};
  EXPECT_TRUE(torch::equal(docs.cu_seqlens.cpu(), torch::tensor(offsets).to(torch::kInt32)));
  EXPECT_EQ(docs.max_seqlen, 33);

  auto build = [](torch::Dtype dtype) {
    torch::manual_seed(21);  // the same weights for both
    Transformer m(packed_model("hybrid_pre"));
    m->to(torch::kCUDA, dtype);
    return m;
  };
  Transformer full = build(torch::kFloat), half = build(torch::kBFloat16);
  const auto want = forward_documents(*full, rows, true);  // float32: SDPA with the mask
  const auto got = forward_documents(*half, rows, true);   // bf16: the varlen flash kernel
  const double scale = want.abs().max().item<double>();
  EXPECT_LT((got.to(torch::kFloat) - want).abs().max().item<double>(), 5e-2 * scale);
  // The kernel's backward: the bf16 gradients follow the float32 ones too, each module's
  // (a block's attention, its MLP, the embedding, ...) within 10% in norm: a bf16 model
  // rounds every weight, activation and gradient, and a wrong document boundary moves them
  // by their whole size. Per module rather than per parameter: some parameters' gradients
  // nearly cancel (a bias added to every key shifts all of a query's scores alike, which
  // the softmax ignores except through RoPE), so rounding is large against them alone.
  const auto weights = torch::randn(want.sizes(), want.options());
  (want * weights).sum().backward();
  (got.to(torch::kFloat) * weights).sum().backward();
  const auto wh = half->named_parameters();
  auto module_of = [](const std::string& name) {  // blocks.N.attn.k_norm.bias: blocks.N.attn
    const auto first = name.find('.'), second = name.find('.', first + 1);
    const bool in_block = name.rfind("blocks.", 0) == 0 && second != std::string::npos;
    return name.substr(0, in_block ? name.find('.', second + 1) : name.rfind('.'));
  };
  std::map<std::string, std::pair<double, double>> module_sq;  // squared error, squared norm
  for (const auto& kv : full->named_parameters()) {
    const auto& g = kv.value().grad();
    const auto gh = wh[kv.key()].grad().to(torch::kFloat);
    auto& [err, norm] = module_sq[module_of(kv.key())];
    err += (gh - g).pow(2).sum().item<double>();
    norm += g.pow(2).sum().item<double>();
  }
  double worst = 0;
  for (const auto& [module, sq] : module_sq) {
    const double rel = std::sqrt(sq.first / std::max(sq.second, 1e-30));
    EXPECT_LT(rel, 0.1) << module;
    worst = std::max(worst, rel);
  }
  std::printf("[gpu documents] worst module gradient difference %.4f (relative, in norm)\n", worst);
}

TEST(Documents, RopeAtRowPositionsIsTheOffsetRopeBitForBit) {
  Rope rope(8, 10000, true);
  torch::manual_seed(3);
  const auto q = torch::randn({2, 4, 10, 8}), k = torch::randn({2, 2, 10, 8});
  const auto [q0, k0] = rope.apply(q, k, 0);
  const auto [q1, k1] = rope.apply(q, k, torch::arange(10, torch::kInt64).expand({2, 10}));
  EXPECT_TRUE(torch::equal(q0, q1));
  EXPECT_TRUE(torch::equal(k0, k1));
}

TEST(Documents, KvCacheDecodingTakesNoDocuments) {
  Transformer m(packed_model("pre"));
  torch::NoGradGuard no_grad;
  const auto ids = torch::tensor(std::vector<int64_t>{1, 2, kEos, 3}).unsqueeze(0);
  const Documents docs = find_documents(ids, kEos, false);
  KvCache cache(2, 8);
  ForwardOptions opts;
  opts.cache = &cache;
  opts.documents = &docs;
  EXPECT_THROW(m->forward(ids, opts), c10::Error);
}

}  // namespace
}  // namespace siamese::model
