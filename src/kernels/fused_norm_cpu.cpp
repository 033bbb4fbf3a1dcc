// CPU backend of the fused norms and SiameseNorm stream update (fused_norm_kernels.h):
// the row maths of fused_norm_math.h, one row at a time per thread (at::parallel_for), in
// float for float32 and bfloat16, in double for float64. The weight gradient is summed over
// fixed row groups and then per column, so it does not depend on the thread count.
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <initializer_list>
#include <stdexcept>
#include <utility>

#include "fused_norm_kernels.h"
#include "fused_norm_math.h"

namespace siamese::kernels {
namespace {

using namespace row_math;

// Independent partial sums per row pass (see share_sum): 8 fill an AVX register of floats.
constexpr int kLanes = 8;

// A CPU thread holds the whole row: its share's sum is already the row's.
struct WholeRow {
  template <typename Acc, int K>
  void operator()(Acc (&)[K]) const {}
};

// Rows per parallel task: about 32k elements, so small tensors stay on one thread.
int64_t grain(int64_t d) { return d >= 32768 ? 1 : 32768 / d; }

// Calls run(T{}, U{}, Acc{}) for the input and output storage types of `a` and their
// accumulation type.
template <typename Args, typename Run>
void by_dtypes(const Args& a, Run run) {
  const bool float_out = out_dtype(a) != a.dtype;
  switch (a.dtype) {
    case DType::Float32:
      return run(float{}, float{}, float{});
    case DType::Float64:
      return run(double{}, double{}, double{});
    case DType::BFloat16:
      return float_out ? run(c10::BFloat16{}, float{}, float{})
                       : run(c10::BFloat16{}, c10::BFloat16{}, float{});
    default:
      throw std::invalid_argument("fused norm: unsupported dtype on CPU");
  }
}

// Every row, spread over the threads.
template <typename Args>
void forward(const Args& a) {
  by_dtypes(a, [&](auto t, auto u, auto acc) {
    at::parallel_for(0, a.rows, grain(a.d), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row)
        forward_row<kLanes, decltype(acc), decltype(t), decltype(u)>(a, row, 0, 1, WholeRow{});
    });
  });
}

// Every row group spread over the threads, then each weight's partial sums (partial, dw)
// per column: parts * d additions, too few to be worth threads.
template <typename Args>
void backward(const Args& a, std::initializer_list<std::pair<const void*, void*>> weights) {
  const int64_t rows_per = rows_per_part(a.rows, /*cuda=*/false);
  const int64_t parts = weight_grad_parts(a.rows, /*cuda=*/false);
  by_dtypes(a, [&](auto t, auto u, auto acc) {
    using Acc = decltype(acc);
    at::parallel_for(0, parts, 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p)
        backward_part<kLanes, Acc, decltype(t), decltype(u)>(a, p, rows_per, 0, 1, WholeRow{});
    });
    for (const auto& [partial, dw] : weights) sum_parts<Acc>(partial, parts, a.d, dw, 0, 1);
  });
}

}  // namespace

void run_cpu(const NormForwardArgs& a) { forward(a); }

void run_cpu(const StreamForwardArgs& a) { forward(a); }

void run_cpu(const NormBackwardArgs& a) { backward(a, {{a.dw_partial, a.dw}}); }

void run_cpu(const StreamBackwardArgs& a) {
  backward(a, {{a.nx.dw_partial, a.nx.dw}, {a.ny.dw_partial, a.ny.dw}});
}

}  // namespace siamese::kernels
