// The CPU backend of the attention's head preparation (qkv_heads_kernel.h): one head row at a
// time, in float, with qkv_heads_math.h's arithmetic. It is the reference the CUDA kernels are
// checked against; the model takes the composite of the norms' and RoPE's own CPU passes.
#include <c10/util/BFloat16.h>

#include <cmath>
#include <type_traits>

#include "cpu_loops.h"
#include "qkv_heads_kernel.h"
#include "qkv_heads_math.h"

namespace siamese::kernels {
namespace {

using cpu_loops::load;
using cpu_loops::store;

constexpr int kMaxHeadDim = 256;

float rsqrt_cpu(float v) { return 1.0f / std::sqrt(v); }

// u = the row normalized (or as it is), in place; returns r (1 without a norm).
float normalize(float* u, const QkvHeadsArgs& a, bool norm) {
  if (!norm) return 1.0f;
  const int hd = static_cast<int>(a.hd);
  float sum = 0.0f;
  for (int j = 0; j < hd; ++j) sum += u[j];
  const float mu = qkv_math::mean_of(sum, hd, a.centered);
  float sq = 0.0f;
  for (int j = 0; j < hd; ++j) sq += (u[j] - mu) * (u[j] - mu);
  const float r = qkv_math::rstd_of(sq, hd, a.eps, rsqrt_cpu);
  for (int j = 0; j < hd; ++j) u[j] = (u[j] - mu) * r;
  return r;
}

void rotate_row(float* u, const QkvHeadsArgs& a, int64_t t, float sign) {
  const int64_t h = a.hd / 2;
  for (int64_t i = 0; i < h; ++i) {
    const auto p = qkv_math::rotate(u[i], u[i + h], a.cos[t * h + i], a.sin[t * h + i], sign);
    u[i] = p.first;
    u[i + h] = p.second;
  }
}

template <typename T>
void forward(const QkvHeadsArgs& a) {
  const T* qkv = static_cast<const T*>(a.qkv);
  const int64_t rows = a.B * a.T * (a.heads + 2 * a.kv_heads);
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    float u[kMaxHeadDim];
    for (int64_t r = begin; r < end; ++r) {
      const HeadRow row = head_row(a, r);
      for (int64_t j = 0; j < a.hd; ++j) u[j] = load(qkv + r * a.hd, j);
      normalize(u, a, a.norm[row.part]);
      if (a.rope && row.part < 2) rotate_row(u, a, row.t, 1.0f);
      const int64_t heads = row.part == 0 ? a.heads : a.kv_heads;
      T* out = static_cast<T*>(a.out[row.part]) + ((row.b * a.T + row.t) * heads + row.head) * a.hd;
      for (int64_t j = 0; j < a.hd; ++j) store(out, j, u[j]);
    }
  });
}

template <typename T>
void backward(const QkvHeadsArgs& a) {
  const T* qkv = static_cast<const T*>(a.qkv);
  T* dqkv = static_cast<T*>(a.dqkv);
  const int64_t rows = a.B * a.T * (a.heads + 2 * a.kv_heads);
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    float du[kMaxHeadDim], u[kMaxHeadDim];
    for (int64_t r = begin; r < end; ++r) {
      const HeadRow row = head_row(a, r);
      const int64_t* s = a.grad_stride[row.part];
      const T* g = static_cast<const T*>(a.grad[row.part]) + row.b * s[0] + row.head * s[1] + row.t * s[2];
      for (int64_t j = 0; j < a.hd; ++j) du[j] = load(g, j);
      if (a.rope && row.part < 2) rotate_row(du, a, row.t, -1.0f);
      T* dx = dqkv + r * a.hd;
      if (!a.norm[row.part]) {
        for (int64_t j = 0; j < a.hd; ++j) store(dx, j, du[j]);
        continue;
      }
      for (int64_t j = 0; j < a.hd; ++j) u[j] = load(qkv + r * a.hd, j);
      const float rstd = normalize(u, a, true);
      float sum_du = 0.0f, sum_du_u = 0.0f;
      for (int64_t j = 0; j < a.hd; ++j) {
        sum_du += du[j];
        sum_du_u += du[j] * u[j];
      }
      const float n = float(a.hd);
      for (int64_t j = 0; j < a.hd; ++j)
        store(dx, j, qkv_math::norm_grad(du[j], u[j], rstd, sum_du / n, sum_du_u / n, a.centered));
    }
  });
}

}  // namespace

void qkv_heads_forward_cpu(const QkvHeadsArgs& a) {
  if (a.dtype == DType::BFloat16) return forward<c10::BFloat16>(a);
  forward<float>(a);
}

void qkv_heads_backward_cpu(const QkvHeadsArgs& a) {
  if (a.dtype == DType::BFloat16) return backward<c10::BFloat16>(a);
  backward<float>(a);
}

}  // namespace siamese::kernels
