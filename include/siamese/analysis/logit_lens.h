#pragma once
// Logit lens per residual stream (paper Sec. 5: how often each stream's own projection to
// the vocabulary matches the model's final prediction). A stream's own projection is the
// topology's final path (finish + LM head) applied to the last block's state with every
// other stream set to zero; for SiameseNorm that is LN_final(LN_x(X)) resp.
// LN_final(LN_y(Y)) (bias-free norms map 0 to 0). Streams are read through the probe hook
// and the topology's public finish(), so no topology internals are touched. A single-stream
// topology reports its one stream, which agrees with itself everywhere.
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "siamese/model/transformer.h"

namespace siamese::analysis {

struct LogitLens {
  int64_t positions = 0;                    // predicted positions examined
  int64_t disagreeing = 0;                  // positions where the streams' own predictions differ
  std::map<std::string, double> agreement;  // stream -> fraction matching final
  std::map<std::string, double> agreement_where_disagree;  // the same over disagreeing positions
};

LogitLens logit_lens(model::TransformerImpl& model, const std::vector<torch::Tensor>& batches);

}  // namespace siamese::analysis
