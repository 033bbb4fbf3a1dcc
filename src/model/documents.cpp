#include "siamese/model/documents.h"

namespace siamese::model {

Documents find_documents(const torch::Tensor& input_ids, int64_t eos_id, bool restart_positions) {
  TORCH_CHECK(input_ids.dim() == 2, "input_ids must be [batch, seq], got ", input_ids.sizes());
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  const auto eos = input_ids.eq(eos_id).to(torch::kInt64);
  // Document number within the row: EOS tokens strictly before, so an EOS stays in the
  // document it closes.
  const auto doc = eos.cumsum(1) - eos;
  const auto flags = torch::dtype(torch::kBool).device(input_ids.device());
  const auto causal = torch::ones({T, T}, flags).tril();
  Documents d;
  d.allowed = doc.unsqueeze(2).eq(doc.unsqueeze(1)).logical_and(causal).unsqueeze(1);
  // A document starts at the row's first token and after every EOS.
  auto starts = torch::zeros({B, T}, flags);
  if (T > 0) starts.select(1, 0).fill_(true);
  if (T > 1) starts.narrow(1, 1, T - 1).copy_(eos.narrow(1, 0, T - 1).to(torch::kBool));
  if (restart_positions) {
    const auto index = torch::arange(T, input_ids.options()).expand({B, T});
    const auto first = std::get<0>(torch::where(starts, index, torch::zeros_like(index)).cummax(1));
    d.positions = index - first;
  }
  if (input_ids.is_cuda()) {
    const auto begin = starts.flatten().nonzero().flatten();
    const auto end = torch::full({1}, B * T, begin.options());
    const auto offsets = torch::cat({begin, end});
    d.cu_seqlens = offsets.to(torch::kInt32);
    // No document is longer than its row: the row length bounds the kernel's grid without
    // reading the lengths back from the device.
    d.max_seqlen = T;
  }
  return d;
}

}  // namespace siamese::model
