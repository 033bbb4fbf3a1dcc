#include "fused_update.h"

#include <ATen/autocast_mode.h>

namespace siamese::model::fused {

bool fits(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& f,
          std::initializer_list<const Norm*> next) {
  const auto t = x.scalar_type();
  for (const Norm* n : next) {
    if (n->is_empty()) continue;
    const NormKind kind = (*n)->kind();
    if (kind == NormKind::LayerNorm && x.element_size() < 4 &&
        at::autocast::is_autocast_enabled(x.device().type()))
      return false;
    if (kind != NormKind::RMS && kind != NormKind::LayerNorm) return false;
  }
  const bool y_fits =
      !y.defined() || (y.scalar_type() == t && y.sizes() == x.sizes() && y.device() == x.device());
  return kernels::norm_supports(x) && y_fits && f.sizes() == x.sizes() && f.device() == x.device() &&
         c10::promoteTypes(t, f.scalar_type()) == t;
}

kernels::StreamNormSpec spec(const Norm& n) {
  if (n.is_empty()) return {};
  return {true, n->weight, n->eps(), n->kind() == NormKind::LayerNorm};
}

void keep_normalized(State& st, size_t i, const Norm& n, const torch::Tensor& value) {
  if (n.is_empty()) return;
  st.normalized.push_back({n.get(), st[i], n->bias.defined() ? value + n->bias : value});
}

torch::Tensor normed_stream(const State& st, size_t i, Norm n) {
  if (n.is_empty()) return st[i];
  for (const auto& k : st.normalized)
    if (k.norm == n.get() && k.of.is_same(st[i])) return k.value;
  return n(st[i]);
}

}  // namespace siamese::model::fused
