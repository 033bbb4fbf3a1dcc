#include "siamese/model/topology.h"

namespace siamese::model {

TopologyImpl::TopologyImpl(const config::ModelConfig& cfg) : cfg_(cfg) {
  // Per-block holders make a topology's parameters read blocks.{i}.<name>, the layout
  // of OLMo's state_dict (transformer.blocks.{i}.<name>).
  auto list = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    blocks_.push_back(std::make_shared<torch::nn::Module>());
    list->push_back(blocks_.back());
  }
}

void TopologyImpl::add_sublayer_norms(std::initializer_list<SublayerNormNames> names) {
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    for (const auto& n : names) n.norms->norms_.push_back(block_norm(l, n.attn));
    for (const auto& n : names) n.norms->norms_.push_back(block_norm(l, n.ff));
  }
}

Norm TopologyImpl::block_norm(int64_t layer, const std::string& name) {
  return block_module(layer, name, make_norm(cfg_, cfg_.d_model));
}

torch::Tensor TopologyImpl::block_param(int64_t layer, const std::string& name, torch::Tensor init) {
  return blocks_[layer]->register_parameter(name, std::move(init));
}

Norm TopologyImpl::top_norm(const std::string& name) {
  return register_module(name, make_norm(cfg_, cfg_.d_model));
}

}  // namespace siamese::model
