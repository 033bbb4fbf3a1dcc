#pragma once
// OLMo-2's instance filter (data.instance_filter): a training instance holding a long run of
// one repeated n-gram is left out of training. The rule is OLMo-core's
// (olmo_core/data/utils.py find_periodic_sequences, numpy_dataset.py _validate_instance),
// restated here. For each period p in [min_period, min(max_period, n / 3)] the tokens are
// cut into rows of p (the last row padded with a value no token has); a run of rows each
// equal to the row before it, extended by the matching tail of the row before the run and the
// matching head of the row after it, spans `times` = length / p periods; the instance is
// rejected when some run has times > 2 and times >= max_count. The decision reads only the
// instance's tokens, so the data order and exact resume are unchanged.
#include <torch/torch.h>

#include <cstdint>

#include "siamese/config/config.h"

namespace siamese::data {

// The largest `times` over every period in [min_period, max_period] (0 when no run reaches
// 3 periods) of tokens[0..n).
int64_t longest_repetition(const int64_t* tokens, int64_t n, int64_t max_period, int64_t min_period);

// Whether the filter rejects the instance.
bool is_repetitive(const int64_t* tokens, int64_t n, const config::InstanceFilterConfig& cfg);

// The rows of batch [B, T] (int64, CPU) the filter keeps, in order; `dropped` receives how
// many it rejected.
torch::Tensor keep_instances(const torch::Tensor& batch, const config::InstanceFilterConfig& cfg,
                             int64_t& dropped);

}  // namespace siamese::data
