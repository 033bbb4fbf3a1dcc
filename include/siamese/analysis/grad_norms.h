#pragma once
// Per-layer gradient norms during training (paper Fig. 5). The trainer calls
//   if (interval > 0 && step % interval == 0)
//     metrics.write(analysis::layer_grad_norms_row(step, analysis::per_layer_grad_norms(model)));
// after the last backward of a step and before clipping, with interval =
// optimizer.metrics_log_interval (OLMo's knob for its per-parameter optimizer metrics).
#include <cstdint>
#include <string>
#include <vector>

#include "siamese/common/metrics_row.h"
#include "siamese/dist/shard_layout.h"
#include "siamese/model/transformer.h"

namespace siamese::analysis {

// L2 norm of the gradients of everything in block i: its attention and MLP weights and the
// residual-path parameters the topology registers under blocks.{i} (topology.blocks.{i}.*).
// Parameters without a gradient count as zero. Entry i = block i.
std::vector<double> per_layer_grad_norms(model::TransformerImpl& model);
// The same from the tensors an optimizer updates (Optimizer::named_params): the parameters,
// or a sharded strategy's shards of them, whose squares `layout` sums over ranks; every rank
// calls it then.
std::vector<double> per_layer_grad_norms(const torch::OrderedDict<std::string, torch::Tensor>& named,
                                         int64_t n_layers, dist::ShardLayout& layout);

// {"step": N, "layer_grad_norms": [g_0, ..., g_{L-1}]} (non-finite values as null).
MetricsRow layer_grad_norms_row(int64_t step, const std::vector<double>& norms);

}  // namespace siamese::analysis
