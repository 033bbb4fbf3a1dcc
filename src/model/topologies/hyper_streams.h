#pragma once
// What the n-stream topologies (hc, mhc, mhc_lite) share: the residual is n streams
// h0..h{n-1}, each [B, T, d], all starting at the embeddings. A sublayer's enter mixes the
// streams and leaves in State::carry the weights w [.., n] with which leave adds F's output
// to each stream: h_i += w_i * f.
#include <string>

#include "siamese/model/topology.h"

namespace siamese::model::hyper {

inline State begin(const torch::Tensor& emb, int64_t n) {
  State st;
  for (int64_t i = 0; i < n; ++i) {
    st.names.push_back("h" + std::to_string(i));
    st.streams.push_back(emb);
  }
  return st;
}

// The streams as one tensor [B, T, n, d].
inline torch::Tensor stacked(const State& st) { return torch::stack(st.streams, -2); }

// Replaces the streams by `mixed` [B, T, n, d] and hands `weights` to leave.
inline void mix(State& st, const torch::Tensor& mixed, torch::Tensor weights) {
  st.streams = mixed.unbind(-2);
  st.carry = std::move(weights);
}

inline void leave(State& st, const torch::Tensor& f, const char* topology) {
  TORCH_CHECK(st.carry.defined(), topology, ": leave without enter");
  auto w = st.carry.unsqueeze(-1);  // [.., n, 1]
  st.carry = torch::Tensor();
  for (size_t i = 0; i < st.streams.size(); ++i) st[i] = st[i] + w.select(-2, static_cast<int64_t>(i)) * f;
}

}  // namespace siamese::model::hyper
