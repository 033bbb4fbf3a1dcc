#pragma once
// The run's optimizer (optimizer.name): AdamW for every parameter, or Muon (muon.h) for the
// hidden layers' matrices and AdamW for the rest (embeddings, the LM head, norms, biases).
//
// AdamW keeps OLMo's two parameter groups (olmo/optim.py get_param_groups): Linear weights
// decay; biases and norm weights decay only with decay_norm_and_bias, embeddings only with
// decay_embeddings. The topology's own tensors (mixing weights, gains) are a third group,
// with optimizer.topology_lr_multiplier and topology_weight_decay. optimizer.group_overrides
// (OLMo-core's form) then moves the parameters its globs match into groups of their own.
// Under model.parametrization mup / completep (model/parametrization.h) the hidden layers'
// matrices are a group of their own, "hidden", with their width's (and depth's) factors on
// lr, eps and weight decay, and completep's depth factor moves the vectors to "vector"; an
// override's lr / weight_decay values replace those factors, its multipliers multiply them.
// Names are sorted within each group, as OLMo does, so the optimizer state lines up across
// runs and resumes.
//
// The AdamW update is at::_fused_adamw_, one kernel for every parameter of a group on CPU and
// CUDA: the kernel of torch.optim.AdamW(fused=True), bit for bit (tests/train/muon_test.cpp),
// and 5-6x faster on CPU than one _foreach_ op per step of the arithmetic (docs/results.md).
// The step counts live on the parameters' device, so a step can be skipped on the device (a
// non-finite loss or gradient) without the host waiting.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/dist/shard_layout.h"
#include "siamese/model/parametrization.h"
#include "siamese/train/muon.h"

namespace siamese::train {

// One group of parameters and its settings. `lr_ratio` is its peak learning rate over
// optimizer.learning_rate: the schedule scales every group alike.
struct ParamGroup {
  std::string label;  // decay, no_decay, topology, hidden, vector, muon, group_overrides[i]
  bool muon = false;
  std::vector<std::string> names;
  double lr_ratio = 1, weight_decay = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-5;
};

struct ParamGroups {
  std::vector<ParamGroup> groups;
  // The names of every group labelled `label` (an override may make two, decayed or not).
  std::vector<std::string> names(const std::string& label) const;
};

// Throws siamese::Error, naming the key, for an override glob that matches no parameter, a
// parameter two overrides match, or (with muon) one of Muon's matrices.
// `shape` is the model's parametrization (none: standard).
ParamGroups param_groups(const config::OptimizerConfig& cfg,
                         const torch::OrderedDict<std::string, torch::Tensor>& params,
                         const model::Parametrization* shape = nullptr);

// One line per group for the start-up log, and the groups as run.json records them.
std::vector<std::string> describe_groups(const ParamGroups& g, double learning_rate);
nlohmann::json groups_json(const ParamGroups& g, double learning_rate);

// A parameter's AdamW state; `step_count` is a float32 scalar on the parameter's device.
struct AdamWState : torch::optim::AdamWParamState {
  torch::Tensor step_count;
};

class AdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  // One update of every parameter that has a gradient. `skip` (a 0/1 float32 scalar on the
  // parameters' device) cancels the whole update, step counts included, without a host sync.
  void update(const std::optional<torch::Tensor>& skip = std::nullopt);
  torch::Tensor step(LossClosure closure = nullptr) override;

  // The state of `param`, created (zero moments, step 0) when missing.
  AdamWState& state_of(const torch::Tensor& param);
};

// What the optimizer's parameters stand for when they are a strategy's shards
// (ShardLayout::optimizer_params): the whole parameters by name, whose shapes pick Muon's
// matrices, and the strategy that gathers a matrix for Newton-Schulz.
struct WholeParamsOf {
  torch::OrderedDict<std::string, torch::Tensor> params;
  dist::ShardLayout* layout = nullptr;
};

class Optimizer {
 public:
  Optimizer(const config::OptimizerConfig& cfg, const torch::OrderedDict<std::string, torch::Tensor>& params,
            const WholeParamsOf* whole = nullptr, const model::Parametrization* shape = nullptr);

  void zero_grad();
  // Zeroes the gradients where they are, keeping their storage (a CUDA graph accumulates into
  // the addresses it captured); a parameter without one keeps none.
  void zero_grad_in_place();
  // `lr` is the schedule's value for optimizer.learning_rate: AdamW's groups take it, Muon's
  // matrices the same fraction of their own peak (optimizer.muon.learning_rate).
  void set_learning_rate(double lr);
  // One update of every parameter with a gradient; `skip` as in AdamW::update. Then the
  // post-step hooks, in the order they were added, skipped step or not.
  void update(const std::optional<torch::Tensor>& skip = std::nullopt);
  // Work that follows every update (OLMo-core's optimizer callbacks): a sharded strategy
  // making its parameters whole, a topology projecting its weights (nGPT).
  void add_post_step_hook(std::function<void()> hook) { post_step_.push_back(std::move(hook)); }
  // Work between a step's last backward and anything reading its gradients (unscaling,
  // clipping, the update): a gradient strategy waiting for its communication.
  void add_pre_step_hook(std::function<void()> hook) { pre_step_.push_back(std::move(hook)); }
  // Runs the pre-step hooks, in the order they were added: afterwards the gradients are final.
  void prepare_gradients();

  AdamW& adamw() { return *adamw_; }
  Muon* muon() { return muon_.get(); }  // null unless optimizer.name is muon
  const ParamGroups& groups() const { return groups_; }
  // What it updates, by parameter name: the parameters, or a sharded strategy's shards of
  // them (ShardLayout::optimizer_params).
  const torch::OrderedDict<std::string, torch::Tensor>& named_params() const { return named_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  // Creates AdamW's moments for every parameter now rather than at the first update, so
  // that the start-up log can say what this rank holds and a lack of memory shows at once.
  void allocate_state();
  // Bytes of the optimizer state that exists (moments, step counts, momentum buffers).
  int64_t state_bytes();

 private:
  torch::OrderedDict<std::string, torch::Tensor> named_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<AdamW> adamw_;
  std::unique_ptr<Muon> muon_;
  ParamGroups groups_;
  std::vector<double> adamw_lr_ratios_;  // per AdamW param group
  double muon_lr_ratio_ = 1;             // optimizer.muon.learning_rate / optimizer.learning_rate
  std::vector<std::function<void()>> pre_step_, post_step_;
};

std::unique_ptr<Optimizer> build_optimizer(const config::OptimizerConfig& cfg,
                                           const torch::OrderedDict<std::string, torch::Tensor>& params,
                                           const WholeParamsOf* whole = nullptr,
                                           const model::Parametrization* shape = nullptr);

void set_learning_rate(torch::optim::Optimizer& optim, double lr);

// Scales the gradients so their global 2-norm is at most `max_norm` (infinity: no scaling)
// and returns the norm before scaling as a scalar on the gradients' device, without a host
// sync (torch::nn::utils::clip_grad_norm_ returns a double, i.e. waits for the device).
// With `shards`, each rank's `params` hold a shard of the gradients and the norm is global.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             dist::ShardLayout* shards = nullptr);

}  // namespace siamese::train
