#pragma once
// The row maths of the fused RMSNorm and SiameseNorm stream update, written once for both
// backends: the CUDA kernels (fused_norm.cu) and the CPU loops (fused_norm_cpu.cpp). Each
// function makes one pass over a share of a row, the elements start, start + step, ... < d.
// A CUDA block runs a row with start = thread index and step = block size, and its RowSum
// adds the threads' partial sums across the block between passes; a CPU thread runs it
// with start 0, step 1 and a RowSum with nothing left to add. The backends differ only in
// that and in how rows are spread over threads.
//
// RMSNorm (OLMo's RMSLayerNorm), in the accumulation type Acc (float; double for double):
//   r = rsqrt(mean(x^2) + eps),  y = x r w
// and its backward with xhat = x r, dxhat = dy w:
//   dx = r (dxhat - xhat mean(dxhat xhat)),  dw = sum over rows of dy xhat.
// LayerNorm without bias (the bias is added outside) centers the row first:
//   mu = mean(x),  r = rsqrt(mean((x - mu)^2) + eps),  xhat = (x - mu) r,  y = xhat w
//   dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),  dw as for RMSNorm;
// RMSNorm is the case mu = 0 without the mean(dxhat) term, and shares every loop with it.
// SiameseNorm's stream update: X' = X + alpha o, Y' = Y + o, then the norm (RMSNorm or
// LayerNorm) of X' and of Y'. Without Y (null y, y_out, dy; Y's norm off) it is one stream's
// residual add and the next sublayer's norm: X' = X + alpha o, norm(X'), as Pre-Norm has.
#include <cmath>
#include <cstdint>

#include "fused_norm_kernels.h"
#include "host_device.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

// A namespace of its own: its load and store would clash with cpu_loops.h's.
namespace siamese::kernels::row_math {

// Storage <-> accumulation type. CUDA's half types get their intrinsics, which work even
// where LibTorch's flags (__CUDA_NO_HALF_CONVERSIONS__ ...) remove the conversion operators;
// every other type converts with a cast.
template <typename T>
SIAMESE_HD inline T widen(T v) {
  return v;
}
template <typename T, typename Acc>
SIAMESE_HD inline T narrow(Acc v) {
  return static_cast<T>(v);
}
#if defined(__CUDACC__)
SIAMESE_HD inline float widen(__half v) { return __half2float(v); }
SIAMESE_HD inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
SIAMESE_HD inline __half narrow<__half, float>(float v) {
  return __float2half_rn(v);
}
template <>
SIAMESE_HD inline __nv_bfloat16 narrow<__nv_bfloat16, float>(float v) {
  return __float2bfloat16_rn(v);
}
#endif

template <typename Acc, typename T>
SIAMESE_HD inline Acc load(const T* p, int64_t i) {
  return static_cast<Acc>(widen(p[i]));
}
template <typename T, typename Acc>
SIAMESE_HD inline void store(T* p, int64_t i, Acc v) {
  p[i] = narrow<T>(v);
}

template <typename Acc>
SIAMESE_HD inline Acc rsqrt_of(Acc v) {
#if defined(__CUDA_ARCH__)
  return rsqrt(v);  // the hardware's approximation (2 ulp): r needs no more
#else
  return Acc(1) / std::sqrt(v);
#endif
}

// Sum of f(i) over the share. kLanes independent partial sums let a CPU core overlap (and
// vectorize) the additions, which a single running sum serializes; a GPU thread's share is
// a few elements and the block supplies the parallelism, so it uses one.
template <int kLanes, typename V, typename F>
SIAMESE_HD inline V share_sum(int64_t d, int64_t start, int64_t step, F f) {
  V lane[kLanes] = {};
  int64_t i = start;
  for (; i + (kLanes - 1) * step < d; i += kLanes * step)
    for (int l = 0; l < kLanes; ++l) lane[l] += f(i + l * step);
  for (; i < d; i += step) lane[0] += f(i);
  for (int l = 1; l < kLanes; ++l) lane[0] += lane[l];
  return lane[0];
}

// Sum of (x - mu)^2 over the share: mu = 0 for RMSNorm, the row's mean for LayerNorm.
template <int kLanes, typename Acc, typename T>
SIAMESE_HD inline Acc sum_squares(const T* x, Acc mu, int64_t d, int64_t start, int64_t step) {
  return share_sum<kLanes, Acc>(d, start, step, [&](int64_t i) {
    const Acc v = load<Acc>(x, i) - mu;
    return v * v;
  });
}

template <int kLanes, typename Acc, typename T>
SIAMESE_HD inline Acc sum_values(const T* x, int64_t d, int64_t start, int64_t step) {
  return share_sum<kLanes, Acc>(d, start, step, [&](int64_t i) { return load<Acc>(x, i); });
}

// r from the whole row's sum of squares (about mu).
template <typename Acc>
SIAMESE_HD inline Acc inv_rms(Acc sum_sq, int64_t d, Acc eps) {
  return rsqrt_of(sum_sq / static_cast<Acc>(d) + eps);
}

// y = (x - mu) r w. Weights are never null: an unweighted norm gets ones from the dispatcher,
// which costs nothing measurable and keeps the element loops free of branches (a CPU
// compiler vectorizes them only then).
template <typename Acc, typename T, typename U>
SIAMESE_HD inline void scale_share(const T* __restrict__ x, const Acc* __restrict__ w, Acc r, Acc mu,
                                   U* __restrict__ y, int64_t d, int64_t start, int64_t step) {
  for (int64_t i = start; i < d; i += step) store(y, i, (load<Acc>(x, i) - mu) * r * w[i]);
}

// One normalized row seen from its backward: the norm's input x, its r, mean mu (0 unless
// centered) and weight, the gradient dn arriving at its output (null: none, or the norm is
// off; in the output's type G) and this row group's dw partial sums (null: the norm has no
// weight of its own).
template <typename Acc, typename T, typename G = T>
struct NormedRow {
  const T* x;
  Acc r, mu;
  bool centered;
  const Acc* w;
  const G* dn;
  Acc* dw_part;
};

// Share of sum(dxhat xhat); its mean over the row is the part of dxhat along xhat, which
// the norm's output cannot change and dx therefore drops.
template <int kLanes, typename Acc, typename T, typename G>
SIAMESE_HD inline Acc dot_dxhat_xhat(const NormedRow<Acc, T, G>& n, int64_t d, int64_t start, int64_t step) {
  if (!n.dn) return Acc(0);
  return share_sum<kLanes, Acc>(d, start, step, [&](int64_t i) {
    return load<Acc>(n.dn, i) * n.w[i] * ((load<Acc>(n.x, i) - n.mu) * n.r);
  });
}

// Share of sum(dxhat), whose mean a centered norm's dx drops too (the output does not move
// when every input does); 0 for RMSNorm.
template <int kLanes, typename Acc, typename T, typename G>
SIAMESE_HD inline Acc sum_dxhat(const NormedRow<Acc, T, G>& n, int64_t d, int64_t start, int64_t step) {
  if (!n.dn || !n.centered) return Acc(0);
  return share_sum<kLanes, Acc>(d, start, step, [&](int64_t i) { return load<Acc>(n.dn, i) * n.w[i]; });
}

// g = d_out + (the norm's gradient), given proj = mean(dxhat xhat) and mean_dxhat (0 for
// RMSNorm), adding dn xhat to the
// weight's partial sums (if any); kOut / kNorm false: that term is absent. Separate pointers marked
// __restrict__ so that a CPU compiler vectorizes without runtime overlap checks.
template <bool kOut, bool kNorm, typename Acc, typename T, typename G>
SIAMESE_HD inline void grad_share(const T* __restrict__ d_out, const T* __restrict__ x, Acc r, Acc mu,
                                  const Acc* __restrict__ w, const G* __restrict__ dn, Acc proj,
                                  Acc mean_dxhat, Acc* __restrict__ dw_part, T* __restrict__ g, int64_t d,
                                  int64_t start, int64_t step) {
  for (int64_t i = start; i < d; i += step) {
    Acc gi = kOut ? load<Acc>(d_out, i) : Acc(0);
    if (kNorm) {
      const Acc gn = load<Acc>(dn, i), xhat = (load<Acc>(x, i) - mu) * r;
      if (dw_part) dw_part[i] += gn * xhat;  // loop-invariant: compilers unswitch it
      gi += (gn * w[i] - mean_dxhat - xhat * proj) * r;
    }
    store(g, i, gi);
  }
}

// The gradient reaching a stream's updated value: what arrived at it directly (d_out, null:
// nothing) plus what came back through its norm (n), given the row's sums of dxhat xhat and
// of dxhat.
template <typename Acc, typename T, typename G>
SIAMESE_HD inline void stream_grad_share(const T* d_out, const NormedRow<Acc, T, G>& n, Acc dot,
                                         Acc dxhat_sum, T* g, int64_t d, int64_t start, int64_t step) {
  const Acc proj = dot / static_cast<Acc>(d), m = dxhat_sum / static_cast<Acc>(d);
  if (d_out && n.dn)
    grad_share<true, true>(d_out, n.x, n.r, n.mu, n.w, n.dn, proj, m, n.dw_part, g, d, start, step);
  else if (d_out)
    grad_share<true, false>(d_out, n.x, n.r, n.mu, n.w, n.dn, proj, m, n.dw_part, g, d, start, step);
  else if (n.dn)
    grad_share<false, true>(d_out, n.x, n.r, n.mu, n.w, n.dn, proj, m, n.dw_part, g, d, start, step);
  else
    grad_share<false, false>(d_out, n.x, n.r, n.mu, n.w, n.dn, proj, m, n.dw_part, g, d, start, step);
}

// X' = X + alpha o and Y' = Y + o over the share; X' alone without Y (null y: one stream,
// a single-stream topology's residual add fused with the next norm).
template <typename Acc, typename T>
SIAMESE_HD inline void add_streams_share(const T* __restrict__ x, const T* __restrict__ y,
                                         const T* __restrict__ o, Acc alpha, T* __restrict__ x_out,
                                         T* __restrict__ y_out, int64_t d, int64_t start, int64_t step) {
  if (!y) {
    for (int64_t i = start; i < d; i += step) store(x_out, i, load<Acc>(x, i) + alpha * load<Acc>(o, i));
    return;
  }
  for (int64_t i = start; i < d; i += step) {
    const Acc oi = load<Acc>(o, i);
    store(x_out, i, load<Acc>(x, i) + alpha * oi);
    store(y_out, i, load<Acc>(y, i) + oi);
  }
}

// do = alpha dX + dY from dX, dY as stored: o feeds X scaled by alpha and Y as it is (null
// dy: one stream).
template <typename Acc, typename T>
SIAMESE_HD inline void combine_share(const T* __restrict__ dx, const T* __restrict__ dy, Acc alpha,
                                     T* __restrict__ d_o, int64_t d, int64_t start, int64_t step) {
  if (!dy) {
    for (int64_t i = start; i < d; i += step) store(d_o, i, alpha * load<Acc>(dx, i));
    return;
  }
  for (int64_t i = start; i < d; i += step) store(d_o, i, alpha * load<Acc>(dx, i) + load<Acc>(dy, i));
}

// dw from the row groups' partial sums [parts, d], each column summed in group order; the
// columns start, start + step, ... (null partial: the norm is off).
template <typename Acc>
SIAMESE_HD inline void sum_parts(const void* partial, int64_t parts, int64_t d, void* dw, int64_t start,
                                 int64_t step) {
  if (!partial) return;
  for (int64_t col = start; col < d; col += step) {
    Acc s = 0;
    for (int64_t p = 0; p < parts; ++p) s += static_cast<const Acc*>(partial)[p * d + col];
    static_cast<Acc*>(dw)[col] = s;
  }
}

// ---- Whole rows: forward_row and backward_part for each operation, overloaded on its
// arguments so one kernel (one CPU loop) serves both operations. RowSum: called as
// row_sum(Acc (&sums)[K]), replaces each of the K shares' sums by the row's.

template <typename T>
SIAMESE_HD inline T* at_row(void* p, int64_t row, int64_t d) {
  return static_cast<T*>(p) + row * d;
}
template <typename T>
SIAMESE_HD inline const T* at_row(const void* p, int64_t row, int64_t d) {
  return static_cast<const T*>(p) + row * d;
}

// A norm's row, its output in U. A centered norm takes the row's mean first and then the
// squares about it: two passes, as exact as LayerNorm's own kernels.
template <int kLanes, typename Acc, typename T, typename U, typename RowSum>
SIAMESE_HD inline void forward_row(const NormForwardArgs& a, int64_t row, int64_t start, int64_t step,
                                   RowSum row_sum) {
  const T* x = at_row<T>(a.x, row, a.d);
  Acc mu[1] = {Acc(0)};
  if (a.centered) {
    mu[0] = sum_values<kLanes, Acc>(x, a.d, start, step);
    row_sum(mu);
    mu[0] /= static_cast<Acc>(a.d);
  }
  Acc sum[1] = {sum_squares<kLanes, Acc>(x, mu[0], a.d, start, step)};
  row_sum(sum);
  const Acc r = inv_rms(sum[0], a.d, static_cast<Acc>(a.eps));
  if (start == 0) {
    static_cast<Acc*>(a.r)[row] = r;
    if (a.centered) static_cast<Acc*>(a.mu)[row] = mu[0];
  }
  scale_share(x, static_cast<const Acc*>(a.w), r, mu[0], at_row<U>(a.y, row, a.d), a.d, start, step);
}

// Row group `part`'s dw partial sums, zeroed (null: the norm is off).
template <typename Acc>
SIAMESE_HD inline Acc* zeroed_part(void* partial, int64_t part, int64_t d, int64_t start, int64_t step) {
  if (!partial) return nullptr;
  Acc* p = static_cast<Acc*>(partial) + part * d;
  for (int64_t i = start; i < d; i += step) p[i] = Acc(0);
  return p;
}

// Row group `part` (rows_per rows from part * rows_per): dx of its rows and its share of dw;
// dy in U.
template <int kLanes, typename Acc, typename T, typename U, typename RowSum>
SIAMESE_HD inline void backward_part(const NormBackwardArgs& a, int64_t part, int64_t rows_per, int64_t start,
                                     int64_t step, RowSum row_sum) {
  Acc* dw_part = zeroed_part<Acc>(a.dw_partial, part, a.d, start, step);
  const int64_t end = (part + 1) * rows_per < a.rows ? (part + 1) * rows_per : a.rows;
  for (int64_t row = part * rows_per; row < end; ++row) {
    const NormedRow<Acc, T, U> n{at_row<T>(a.x, row, a.d),
                                 static_cast<const Acc*>(a.r)[row],
                                 a.centered ? static_cast<const Acc*>(a.mu)[row] : Acc(0),
                                 a.centered,
                                 static_cast<const Acc*>(a.w),
                                 at_row<U>(a.dy, row, a.d),
                                 dw_part};
    Acc sums[2] = {dot_dxhat_xhat<kLanes>(n, a.d, start, step), sum_dxhat<kLanes>(n, a.d, start, step)};
    row_sum(sums);
    stream_grad_share<Acc, T, U>(nullptr, n, sums[0], sums[1], at_row<T>(a.dx, row, a.d), a.d, start, step);
  }
}

// The stream's norm of its updated row x (when the norm is on), from x's sum of squares
// about its mean mu (0 unless centered).
template <typename Acc, typename T>
SIAMESE_HD inline void normalize_stream_share(const StreamNorm& sn, const T* x, Acc sum_sq, Acc mu,
                                              int64_t row, int64_t d, int64_t start, int64_t step) {
  if (!sn.on) return;
  const Acc r = inv_rms(sum_sq, d, static_cast<Acc>(sn.eps));
  if (start == 0) {
    static_cast<Acc*>(sn.r)[row] = r;
    if (sn.centered) static_cast<Acc*>(sn.mu)[row] = mu;
  }
  scale_share(x, static_cast<const Acc*>(sn.w), r, mu, at_row<T>(sn.n, row, d), d, start, step);
}

SIAMESE_HD inline bool centers(const StreamNorm& sn) { return sn.on && sn.centered; }

template <int kLanes, typename Acc, typename T, typename U, typename RowSum>
SIAMESE_HD inline void forward_row(const StreamForwardArgs& a, int64_t row, int64_t start, int64_t step,
                                   RowSum row_sum) {
  const int64_t d = a.d;
  T* x_out = at_row<T>(a.x_out, row, d);
  T* y_out = a.y ? at_row<T>(a.y_out, row, d) : nullptr;
  add_streams_share(at_row<T>(a.x, row, d), a.y ? at_row<T>(a.y, row, d) : nullptr, at_row<T>(a.o, row, d),
                    static_cast<Acc>(a.alpha), x_out, y_out, d, start, step);
  // The norms read X' and Y' as stored (rounded to T), as separate norms would. Each share
  // reads back only the elements it wrote, so no barrier is needed. Centered norms take
  // their rows' means first, as a norm's forward_row does; the condition is the same for
  // every share, so all reach each row_sum.
  Acc mu[2] = {Acc(0), Acc(0)};
  if (centers(a.nx) || centers(a.ny)) {
    mu[0] = centers(a.nx) ? sum_values<kLanes, Acc>(x_out, d, start, step) : Acc(0);
    mu[1] = centers(a.ny) ? sum_values<kLanes, Acc>(y_out, d, start, step) : Acc(0);
    row_sum(mu);
    mu[0] /= static_cast<Acc>(d);
    mu[1] /= static_cast<Acc>(d);
  }
  Acc sums[2] = {a.nx.on ? sum_squares<kLanes, Acc>(x_out, mu[0], d, start, step) : Acc(0),
                 a.ny.on ? sum_squares<kLanes, Acc>(y_out, mu[1], d, start, step) : Acc(0)};
  row_sum(sums);
  normalize_stream_share(a.nx, x_out, sums[0], mu[0], row, d, start, step);
  normalize_stream_share(a.ny, y_out, sums[1], mu[1], row, d, start, step);
}

// A stream's norm as its backward sees row `row`; an off norm, or one that got no gradient,
// contributes nothing.
template <typename Acc, typename T>
SIAMESE_HD inline NormedRow<Acc, T> stream_norm_row(const StreamNorm& sn, const void* x, int64_t row,
                                                    int64_t d, Acc* dw_part) {
  if (!sn.on || !sn.dn) return {nullptr, Acc(0), Acc(0), false, nullptr, nullptr, nullptr};
  return {at_row<T>(x, row, d),
          static_cast<const Acc*>(sn.r)[row],
          sn.centered ? static_cast<const Acc*>(sn.mu)[row] : Acc(0),
          sn.centered,
          static_cast<const Acc*>(sn.w),
          at_row<T>(sn.dn, row, d),
          dw_part};
}

// Row group `part`, as for a norm (the streams' type T throughout: U is T).
template <int kLanes, typename Acc, typename T, typename U, typename RowSum>
SIAMESE_HD inline void backward_part(const StreamBackwardArgs& a, int64_t part, int64_t rows_per,
                                     int64_t start, int64_t step, RowSum row_sum) {
  const int64_t d = a.d;
  Acc* dwx = zeroed_part<Acc>(a.nx.dw_partial, part, d, start, step);
  Acc* dwy = zeroed_part<Acc>(a.ny.dw_partial, part, d, start, step);
  const int64_t end = (part + 1) * rows_per < a.rows ? (part + 1) * rows_per : a.rows;
  for (int64_t row = part * rows_per; row < end; ++row) {
    const auto nx = stream_norm_row<Acc, T>(a.nx, a.x_out, row, d, dwx);
    const auto ny = stream_norm_row<Acc, T>(a.ny, a.y_out, row, d, dwy);
    Acc sums[4] = {dot_dxhat_xhat<kLanes>(nx, d, start, step), dot_dxhat_xhat<kLanes>(ny, d, start, step),
                   sum_dxhat<kLanes>(nx, d, start, step), sum_dxhat<kLanes>(ny, d, start, step)};
    row_sum(sums);
    T* dx = at_row<T>(a.dx, row, d);
    T* dy = a.dy ? at_row<T>(a.dy, row, d) : nullptr;
    stream_grad_share(a.dx_out ? at_row<T>(a.dx_out, row, d) : nullptr, nx, sums[0], sums[2], dx, d, start,
                      step);
    if (dy)
      stream_grad_share(a.dy_out ? at_row<T>(a.dy_out, row, d) : nullptr, ny, sums[1], sums[3], dy, d, start,
                        step);
    // Each share reads back only the elements it wrote, so no barrier is needed. No d_o: it
    // is dx itself (one stream, alpha 1), as an add's backward hands one gradient to both.
    if (a.d_o) combine_share(dx, dy, static_cast<Acc>(a.alpha), at_row<T>(a.d_o, row, d), d, start, step);
  }
}

}  // namespace siamese::kernels::row_math
