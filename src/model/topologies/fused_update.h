#pragma once
// The fused residual update (stream_update.h) as topologies use it: a sublayer's leave adds
// its output to the streams and computes, in the same pass, the norms that read them next;
// those wait in State::normalized until enter (or finish) asks for them. SiameseNorm fuses
// both of its streams, Pre-Norm its one. One rule for when the kernel applies, here.
#include <initializer_list>

#include "siamese/kernels/fused_norm.h"
#include "siamese/model/topology.h"

namespace siamese::model::fused {

// The kernel covers RMSNorm and LayerNorm, streams and f of one shape and device, and a dtype
// with a kernel that f's does not outrank (y undefined: one stream). LayerNorm of half streams
// under autocast returns float32 (NormImpl), which the kernel's half output is not.
bool fits(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& f,
          std::initializer_list<const Norm*> next);

// The kernel's description of norm n (off when n is empty).
kernels::StreamNormSpec spec(const Norm& n);

// Keeps the kernel's normalized stream i as n's output (its bias added as NormImpl adds it).
void keep_normalized(State& st, size_t i, const Norm& n, const torch::Tensor& value);

// Stream i through n: what the last fused update kept for it, else n applied now (the stream
// itself when n is empty).
torch::Tensor normed_stream(const State& st, size_t i, Norm n);

}  // namespace siamese::model::fused
