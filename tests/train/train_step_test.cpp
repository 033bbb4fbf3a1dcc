// The one training step (train_step.h) that train and bench run, with intra-document
// attention and with the rows the instance filter left out.
#include <gtest/gtest.h>

#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "siamese/data/instance_filter.h"
#include "siamese/dist/parallel_plan.h"
#include "siamese/model/lm_loss.h"
#include "siamese/model/transformer.h"
#include "siamese/train/loss_scale.h"
#include "siamese/train/metrics.h"
#include "siamese/train/optimizer.h"
#include "siamese/train/setup.h"
#include "siamese/train/train_step.h"
#include "support/tiny_configs.h"

namespace siamese::train {
namespace {

// The model, optimizer (with its post-step hooks) and scaler as train sets them up.
struct Subject {
  dist::ParallelPlan plan;
  Trainee trainee;
  model::Transformer& model;
  std::unique_ptr<Optimizer>& optim;

  explicit Subject(const config::TrainConfig& c)
      : trainee(build_trainee(c, torch::kCPU, plan)), model(trainee.model), optim(trainee.optim) {}
  TrainStep step(const config::TrainConfig& c, int64_t micro) {
    return TrainStep(config::step_section(c), *model, *optim, plan, *trainee.scaler, torch::kCPU, micro);
  }
};

config::TrainConfig no_dropout() {
  auto c = testing::tiny("unused");
  c.model.attention_dropout = c.model.residual_dropout = c.model.embedding_dropout = 0.0;
  return c;
}

torch::Tensor batch_of(const config::TrainConfig& c) {
  torch::manual_seed(9);
  return torch::randint(0, c.model.vocab_size, {c.global_train_batch_size, c.model.max_sequence_length});
}

// Micro-batches only split the work: the loss is the global batch's mean and the update the
// one the whole batch gives.
TEST(TrainStep, MicroBatchesGiveTheWholeBatchsLossAndUpdate) {
  const auto c = no_dropout();
  const auto batch = batch_of(c);
  Subject whole(c), split(c);
  auto one = whole.step(c, 4), two = split.step(c, 1);
  const auto a = one.run(batch, 1e-3), b = two.run(batch, 1e-3);
  torch::NoGradGuard no_grad;
  const auto mean = model::lm_loss_sum(*whole.model, batch).item<double>();  // after the update
  EXPECT_NEAR(a.values["loss"].item<double>(), b.values["loss"].item<double>(), 1e-6);
  EXPECT_NEAR(a.grad_norm.item<double>(), b.grad_norm.item<double>(), 1e-5);
  EXPECT_EQ(a.loss_scale.item<double>(), 1.0);
  const auto pa = whole.model->named_parameters(), pb = split.model->named_parameters();
  for (const auto& kv : pa) EXPECT_TRUE(torch::allclose(kv.value(), pb[kv.key()], 1e-5, 1e-6)) << kv.key();
  EXPECT_LT(mean / double(4 * 31), a.values["loss"].item<double>());  // the step lowered the loss
}

// Autocast's casts that its cache may keep while fn runs on this thread (where the step's
// forwards and, on the CPU, its backward run): aten::_to_copy of a parameter itself, a leaf
// that requires grad and is no view. On CUDA every linear's weight is cast so. On the CPU the
// blocks' products cast transposed views of their weights, which the cache never keeps, and
// the tied head's linear casts the embedding matrix itself.
int64_t weight_casts(const std::function<void()>& fn) {
  static thread_local int64_t casts = 0;
  casts = 0;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& f) -> std::unique_ptr<at::ObserverContext> {
        if (std::string(f.name()) != "aten::_to_copy") return nullptr;
        const auto inputs = f.inputs();
        if (!inputs.empty() && inputs[0].isTensor()) {
          const auto& t = inputs[0].toTensor();
          casts += t.is_leaf() && t.requires_grad() && !t.is_view() ? 1 : 0;
        }
        return nullptr;
      }).needsInputs(true));
  fn();
  at::removeCallback(handle);
  return casts;
}

// Under autocast a step casts each weight once however many micro-batches it runs (and, with
// every block recomputed, its recomputations reuse the forward's casts), and reusing them
// changes no bit of the update: the same step with autocast's cache off, which casts a weight
// at each use, ends at the same weights.
TEST(TrainStep, AutocastCastsEachWeightOncePerStep) {
  for (const auto checkpointing :
       {config::ActivationCheckpointing::None, config::ActivationCheckpointing::WholeLayer}) {
    SCOPED_TRACE(static_cast<int>(checkpointing));
    auto c = no_dropout();
    c.precision = config::Precision::AmpBf16;
    c.model.activation_checkpointing = checkpointing;
    const auto batch = batch_of(c);
    const int64_t micro_batches = batch.size(0);
    Subject split(c), whole(c), uncached(c);
    auto per_row = split.step(c, 1), at_once = whole.step(c, micro_batches), every_use = uncached.step(c, 1);
    const int64_t split_casts = weight_casts([&] { per_row.run(batch, 1e-3); });
    const int64_t whole_casts = weight_casts([&] { at_once.run(batch, 1e-3); });
    at::autocast::set_autocast_cache_enabled(false);
    const int64_t every_use_casts = weight_casts([&] { every_use.run(batch, 1e-3); });
    at::autocast::set_autocast_cache_enabled(true);
    ASSERT_GT(micro_batches, 1);
    EXPECT_GT(whole_casts, 0);
    EXPECT_EQ(split_casts, whole_casts);
    EXPECT_GE(every_use_casts, micro_batches * whole_casts);
    const auto ours = split.model->named_parameters(), theirs = uncached.model->named_parameters();
    for (const auto& kv : ours) EXPECT_TRUE(torch::equal(kv.value(), theirs[kv.key()])) << kv.key();
  }
}

// fused_loss (the chunked LM-head loss) changes memory, not training: the same losses,
// z-losses, gradient norms and weights over steps of several micro-batches.
TEST(TrainStep, ChunkedLossTrainsAsTheUnchunkedOne) {
  auto plain = no_dropout();
  plain.softmax_auxiliary_loss = true;
  plain.auxiliary_loss_multiplier = 1e-2;
  auto chunked = plain;
  chunked.model.fused_loss = true;
  chunked.model.fused_loss_chunk_tokens = 13;  // 2 x 31 tokens per micro-batch: a partial chunk
  const auto batch = batch_of(plain);
  Subject a(plain), b(chunked);
  auto step_a = a.step(plain, 2), step_b = b.step(chunked, 2);
  for (int i = 0; i < 3; ++i) {
    const auto ra = step_a.run(batch, 1e-3), rb = step_b.run(batch, 1e-3);
    EXPECT_NEAR(rb.values["loss"].item<double>(), ra.values["loss"].item<double>(),
                1e-6 * ra.values["loss"].item<double>())
        << "step " << i;
    EXPECT_NEAR(rb.values["z_loss"].item<double>(), ra.values["z_loss"].item<double>(),
                1e-6 * ra.values["z_loss"].item<double>());
    EXPECT_NEAR(rb.grad_norm.item<double>(), ra.grad_norm.item<double>(), 1e-5 * ra.grad_norm.item<double>());
  }
  const auto pa = a.model->named_parameters(), pb = b.model->named_parameters();
  for (const auto& kv : pa) EXPECT_TRUE(torch::allclose(pb[kv.key()], kv.value(), 1e-5, 1e-6)) << kv.key();
}

// A step whose loss is not finite leaves every weight as it was: its update is cancelled on
// the device.
TEST(TrainStep, NonFiniteLossLeavesTheWeightsAlone) {
  const auto c = no_dropout();
  Subject s(c);
  auto step = s.step(c, 2);
  step.run(batch_of(c), 1e-3);  // optimizer state exists
  {
    torch::NoGradGuard no_grad;
    s.model->named_parameters()["wte.weight"][3][0] = std::numeric_limits<float>::quiet_NaN();
  }
  std::map<std::string, torch::Tensor> before;
  for (const auto& kv : s.model->named_parameters()) before[kv.key()] = kv.value().clone();
  auto ids = batch_of(c);
  ids[0][0] = 3;
  const auto r = step.run(ids, 1e-3);
  EXPECT_FALSE(std::isfinite(r.values["loss"].item<double>()));
  for (const auto& kv : s.model->named_parameters())
    EXPECT_TRUE(torch::equal(kv.value().nan_to_num(), before[kv.key()].nan_to_num())) << kv.key();
}

// nGPT keeps its matrices on the unit sphere: the step's AdamW update moves them off, and the
// topology's project_weights, which the step calls after the optimizer, brings every
// embedding and head row, att_proj and ff_proj row and attn_out and ff_out column back.
TEST(TrainStep, NgptWeightsAreUnitNormAfterTheOptimizerStep) {
  auto c = no_dropout();
  c.model.residual = "ngpt";
  c.model.use_query_norm = c.model.use_key_norm = c.model.use_value_norm = false;
  c.model.weight_tying = false;
  Subject s(c);
  std::vector<std::pair<std::string, int64_t>> matrices = {{"wte.weight", 1}, {"ff_out.weight", 1}};
  for (int64_t l = 0; l < c.model.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    matrices.insert(matrices.end(), {{b + "attn.att_proj.weight", 1},
                                     {b + "attn.attn_out.weight", 0},
                                     {b + "mlp.ff_proj.weight", 1},
                                     {b + "mlp.ff_out.weight", 0}});
  }
  auto params = s.model->named_parameters();
  std::map<std::string, torch::Tensor> before;
  for (const auto& [name, dim] : matrices) before[name] = params[name].detach().clone();
  auto step = s.step(c, 2);
  for (int i = 0; i < 3; ++i) step.run(batch_of(c), 1e-2);
  double worst = 0.0, least_moved = 1.0;
  for (const auto& [name, dim] : matrices) {
    const auto& w = params[name];
    const double off = (w.norm(2, dim) - 1).abs().max().item<double>();
    const double moved = (w - before[name]).abs().max().item<double>();
    EXPECT_LT(off, 1e-6) << name;
    EXPECT_GT(moved, 1e-3) << name << " did not train";
    worst = std::max(worst, off);
    least_moved = std::min(least_moved, moved);
  }
  // Control: an optimizer's update without the projection hook leaves the sphere.
  const auto bare = build_optimizer(c.optimizer, s.model->named_parameters());
  bare->zero_grad();
  model::lm_loss_sum(*s.model, batch_of(c)).backward();
  bare->update();
  double off_without = 0.0;
  for (const auto& [name, dim] : matrices)
    off_without = std::max(off_without, (params[name].norm(2, dim) - 1).abs().max().item<double>());
  EXPECT_GT(off_without, 1e-3);
  std::cout << "[ngpt step] after 3 steps at lr 1e-2: max | ||row|| - 1 | = " << worst
            << ", every matrix moved by at least " << least_moved << "; a bare AdamW update: " << off_without
            << "\n";
}

// OLMo's z-loss (softmax_auxiliary_loss): its gradient joins the cross-entropy's, and the
// step reports it apart, the loss staying the cross-entropy alone. Both against the
// formulas in float64 on the model's logits, over two micro-batches.
TEST(TrainStep, ZLossJoinsTheGradientAndIsReportedApartFromTheCrossEntropy) {
  auto plain = no_dropout();
  plain.max_grad_norm = std::nullopt;  // the gradients the step leaves are the unclipped ones
  auto c = plain;
  c.softmax_auxiliary_loss = true;
  c.auxiliary_loss_multiplier = 1e-2;
  const auto batch = batch_of(c);
  Subject with_z(c), without_z(plain), direct(c);
  std::map<std::string, torch::Tensor> grads, plain_grads;
  auto keep = [](Subject& s, std::map<std::string, torch::Tensor>& into) {
    for (const auto& kv : s.model->named_parameters()) into[kv.key()] = kv.value().grad().clone();
  };
  const auto r = with_z.step(c, 2).run(batch, 1e-3);
  keep(with_z, grads);
  const auto r0 = without_z.step(plain, 2).run(batch, 1e-3);
  keep(without_z, plain_grads);
  EXPECT_EQ(r.values["loss"].item<double>(), r0.values["loss"].item<double>());
  EXPECT_FALSE(r0.values["z_loss"].defined());

  const int64_t T = batch.size(1);
  const auto logits = direct.model->forward(batch.narrow(1, 0, T - 1)).to(torch::kFloat64);
  const auto rows = logits.reshape({-1, logits.size(-1)});
  const double n = double(rows.size(0));
  const auto nll = torch::nn::functional::cross_entropy(rows, batch.narrow(1, 1, T - 1).reshape({-1}));
  const auto z = c.auxiliary_loss_multiplier * rows.exp().sum(-1).log().pow(2).sum() / n;
  EXPECT_NEAR(r.values["loss"].item<double>(), nll.item<double>(), 1e-6);
  EXPECT_NEAR(r.values["z_loss"].item<double>() / z.item<double>(), 1.0, 1e-6);
  (nll + z).backward();
  double z_effect = 0, grad_diff = 0;
  for (const auto& kv : direct.model->named_parameters()) {
    EXPECT_TRUE(torch::allclose(grads[kv.key()], kv.value().grad(), 1e-4, 1e-7)) << kv.key();
    grad_diff = std::max(grad_diff, (grads[kv.key()] - kv.value().grad()).abs().max().item<double>());
    z_effect = std::max(z_effect, (grads[kv.key()] - plain_grads[kv.key()]).abs().max().item<double>());
  }
  EXPECT_GT(z_effect, 1e-4);  // the z-loss's share of the gradient is far above the tolerance
  std::cout << "[z-loss] " << r.values["z_loss"].item<double>() << ", relative difference from float64 "
            << std::abs(r.values["z_loss"].item<double>() / z.item<double>() - 1)
            << "; max |gradient - float64 gradient| " << grad_diff << ", the z-loss's share up to "
            << z_effect << "\n";
}

// Rows of random tokens in which EOS (token 10 in tiny configs) closes several documents.
torch::Tensor packed_batch(const config::TrainConfig& c) {
  torch::manual_seed(9);
  auto batch =
      torch::randint(0, c.model.vocab_size, {c.global_train_batch_size, c.model.max_sequence_length});
  batch.index_put_({torch::indexing::Slice(), torch::tensor({4, 11, 19, 20})}, c.model.eos_token_id);
  return batch;
}

// The global mean the step reports, summed as the step sums it (float64 of float32 sums).
double reported_loss(const config::TrainConfig& c, model::TransformerImpl& m, const torch::Tensor& batch,
                     const std::optional<model::DocumentRule>& docs) {
  torch::NoGradGuard no_grad;
  auto total = torch::zeros({}, torch::kFloat64);
  const double predicted = double(c.global_train_batch_size) * double(c.model.max_sequence_length - 1);
  total.add_(model::lm_loss_sums(m, batch, std::nullopt, docs).nll / predicted);
  return total.item<double>();
}

// With the key off the step is the one before document masking existed: the plain causal
// loss, bit for bit. With it on, the loss is the document-masked one.
TEST(DocumentsStep, KeyOffIsThePlainLossBitForBitAndKeyOnIsTheMaskedLoss) {
  auto off = no_dropout();
  const auto batch = packed_batch(off);
  Subject plain(off);
  const double plain_expected = reported_loss(off, *plain.model, batch, std::nullopt);
  EXPECT_EQ(plain.step(off, 4).run(batch, 1e-3).values["loss"].item<double>(), plain_expected);

  auto on = off;
  on.data.generate_doc_lengths = true;
  on.data.rope_restart_per_document = true;
  Subject masked(on);
  const double masked_expected =
      reported_loss(on, *masked.model, batch, model::DocumentRule{on.model.eos_token_id, true});
  EXPECT_EQ(masked.step(on, 4).run(batch, 1e-3).values["loss"].item<double>(), masked_expected);
  EXPECT_GT(std::abs(masked_expected - plain_expected), 1e-4);
}

// Rows with a long repeated n-gram.
torch::Tensor repetitive_row(const config::TrainConfig& c, int64_t a, int64_t b) {
  auto row = torch::randint(0, c.model.vocab_size, {c.model.max_sequence_length}, torch::kInt64);
  for (int64_t i = 2; i < 26; ++i) row[i] = i % 2 ? a : b;
  return row;
}

// An instance the filter rejects never reaches the model: replacing it by another rejected
// instance leaves the update bit for bit the same, and the loss is the kept rows' sum over
// the whole global batch's predicted tokens (OLMo's loss over masked instances).
TEST(DocumentsStep, AFilteredInstanceNeverReachesTheModel) {
  auto c = no_dropout();
  c.data.instance_filter.repetition_max_count = 8;
  auto one = packed_batch(c), two = one.clone();
  torch::manual_seed(4);
  one[1] = repetitive_row(c, 3, 4);
  two[1] = repetitive_row(c, 5, 6);
  int64_t dropped_one = 0, dropped_two = 0;
  const auto kept_one = data::keep_instances(one, c.data.instance_filter, dropped_one);
  const auto kept_two = data::keep_instances(two, c.data.instance_filter, dropped_two);
  ASSERT_EQ(dropped_one, 1);
  ASSERT_EQ(dropped_two, 1);
  Subject a(c), b(c);
  const double expected = reported_loss(c, *a.model, kept_one, std::nullopt);
  auto step_a = a.step(c, 2), step_b = b.step(c, 2);
  const auto ra = step_a.run(kept_one, 1e-3), rb = step_b.run(kept_two, 1e-3);
  EXPECT_NEAR(ra.values["loss"].item<double>(), expected, 1e-5);
  EXPECT_EQ(ra.values["loss"].item<double>(), rb.values["loss"].item<double>());
  const auto pa = a.model->named_parameters(), pb = b.model->named_parameters();
  for (const auto& kv : pa) EXPECT_TRUE(torch::equal(kv.value(), pb[kv.key()])) << kv.key();

  // A rank whose whole share was left out still takes the step (it joins the all-reduce).
  Subject empty(c);
  auto step_empty = empty.step(c, 2);
  const auto r = step_empty.run(one.narrow(0, 0, 0), 1e-3);
  EXPECT_EQ(r.values["loss"].item<double>(), 0.0);
}

config::TrainConfig moe_run() {
  auto c = no_dropout();
  c.model.block_type = config::BlockType::Moe;
  c.model.moe_num_experts = 4;
  c.model.moe_top_k = 2;
  c.model.moe_loss_weight = 0.3;
  c.model.moe_zloss_weight = 0.01;
  c.max_grad_norm = std::nullopt;  // the gradients the step leaves are the unclipped ones
  return c;
}

// block_type moe: the step differentiates mean NLL + moe_loss_weight * lbl + moe_zloss_weight
// * z of the whole batch, and reports the unweighted losses; with one row per micro-batch the
// reported losses are the mean of the rows' losses.
TEST(TrainStep, MoeLossesJoinTheLossAtTheirWeights) {
  const auto c = moe_run();
  const auto batch = batch_of(c);
  Subject trained(c), reference(c);
  std::map<std::string, torch::Tensor> grads;
  auto step = trained.step(c, c.global_train_batch_size);
  const auto r = step.run(batch, 1e-3);
  for (const auto& p : trained.model->named_parameters()) grads[p.key()] = p.value().grad().clone();
  const double predicted = double(batch.size(0) * (batch.size(1) - 1));
  // The blocks attach their losses at unit scale: the gradient of nll + 0.3 lbl + 0.01 z
  // (MoeMlp.AttachedLossesGiveTheGradientOfTheWeightedSum checks the attachment).
  model::AuxLosses moe(torch::ones({}, torch::kFloat64));
  const auto nll =
      model::lm_loss_sums(*reference.model, batch, std::nullopt, std::nullopt, &moe).nll / predicted;
  nll.backward();
  for (const auto& p : reference.model->named_parameters())
    EXPECT_TRUE(torch::allclose(grads[p.key()], p.value().grad(), 1e-5, 1e-7)) << p.key();
  EXPECT_NEAR(r.values["loss"].item<double>(), nll.item<double>(), 1e-6);
  EXPECT_NEAR(r.values["moe_lbl_loss"].item<double>(), moe.values["moe_lbl_loss"].item<double>(), 1e-6);
  EXPECT_NEAR(r.values["moe_z_loss"].item<double>(), moe.values["moe_z_loss"].item<double>(), 1e-6);
  // The routing, after the shares are taken: 4 experts, so an even split is 1/4 each.
  EXPECT_LE(r.values["moe_load_min"].item<double>(), 0.25);
  EXPECT_GE(r.values["moe_load_max"].item<double>(), 0.25);
  EXPECT_LE(r.values["moe_load_entropy"].item<double>(), std::log(4.0) + 1e-12);
  EXPECT_GT(r.values["moe_load_entropy"].item<double>(), 0.0);
  EXPECT_EQ(r.values["moe_dropped_fraction"].item<double>(), 0.0);
  EXPECT_FALSE(r.values["moe_expert_tokens"].defined()) << "kept only with moe_log_expert_assignment";

  Subject split(c), rows(c);
  auto by_row = split.step(c, 1);
  const auto s = by_row.run(batch, 1e-3);
  double lbl = 0.0, z = 0.0;
  torch::NoGradGuard no_grad;
  for (int64_t i = 0; i < batch.size(0); ++i) {
    model::AuxLosses l;
    // The step's forward: inputs without the last token.
    model::lm_loss_sums(*rows.model, batch.narrow(0, i, 1), std::nullopt, std::nullopt, &l);
    lbl += l.values["moe_lbl_loss"].item<double>() / double(batch.size(0));
    z += l.values["moe_z_loss"].item<double>() / double(batch.size(0));
  }
  EXPECT_NEAR(s.values["moe_lbl_loss"].item<double>(), lbl, 1e-6);
  EXPECT_NEAR(s.values["moe_z_loss"].item<double>(), z, 1e-6);
}

}  // namespace
}  // namespace siamese::train
