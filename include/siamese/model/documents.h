#pragma once
// Where the documents of a packed training sequence begin and end, for intra-document
// attention (data.generate_doc_lengths): OLMo packs documents end to end, each closed by
// model.eos_token_id, and with the key on a token reads only earlier tokens of its own
// document. The EOS token belongs to the document it closes; every row of a batch starts a
// document. Built once per micro-batch from the token ids and handed to every attention
// sublayer through ForwardOptions, so attention needs no knowledge of the data.
#include <torch/torch.h>

#include <cstdint>
#include <optional>

#include "siamese/config/config.h"

namespace siamese::model {

struct Documents {
  // [B, 1, T, T] bool: query i may read key j (same document and j <= i). SDPA's mask.
  torch::Tensor allowed;
  // [B, T] int64 RoPE positions counted from each document's first token; undefined when
  // positions run over the whole row (data.rope_restart_per_document off).
  torch::Tensor positions;
  // CUDA only (undefined on other devices): int32 [documents + 1] offsets of the documents
  // in the flattened [B * T] tokens, and a bound on their length (T), for the
  // variable-length flash kernel.
  torch::Tensor cu_seqlens;
  int64_t max_seqlen = 0;
};

// How a run finds documents (data.generate_doc_lengths, data.rope_restart_per_document).
struct DocumentRule {
  int64_t eos_id = 0;
  bool restart_positions = false;
};

// The documents of input_ids [B, T] separated by `eos_id`.
Documents find_documents(const torch::Tensor& input_ids, int64_t eos_id, bool restart_positions);

}  // namespace siamese::model
