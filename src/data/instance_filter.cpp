#include "siamese/data/instance_filter.h"

#include <algorithm>

namespace siamese::data {

int64_t longest_repetition(const int64_t* tokens, int64_t n, int64_t max_period, int64_t min_period) {
  int64_t longest = 0;
  // OLMo-core checks periods up to n / 3: a run must span three periods to count.
  const int64_t top = std::min(max_period, n / 3);
  for (int64_t p = std::max<int64_t>(min_period, 1); p <= top; ++p) {
    // Position i matches the one a period earlier; positions past the end are padding,
    // which matches nothing.
    auto same = [&](int64_t i) { return i < n && tokens[i] == tokens[i - p]; };
    auto row_same = [&](int64_t row) {
      for (int64_t j = 0; j < p; ++j)
        if (!same(row * p + j)) return false;
      return true;
    };
    // Only rows 1..n/p-1 are whole rows that can equal the row before; row 0 is compared
    // with the padded last row (numpy's roll) and never matches in full.
    const int64_t whole = n / p;
    for (int64_t row = 1; row < whole;) {
      if (!row_same(row)) {
        ++row;
        continue;
      }
      const int64_t first = row;
      while (row < whole && row_same(row)) ++row;
      const int64_t last = row - 1;
      // Matching tail of the row before the run (row 0's comparison is with padding: none).
      int64_t tail = 0;
      if (first - 1 >= 1)
        while (tail < p && same((first - 1) * p + (p - 1 - tail))) ++tail;
      int64_t head = 0;
      while (head < p && same((last + 1) * p + head)) ++head;
      const int64_t start = (first - 1) * p - tail, end = (last + 1) * p + head;
      const int64_t times = (end - start) / p;
      if (times > 2) longest = std::max(longest, times);
    }
  }
  return longest;
}

bool is_repetitive(const int64_t* tokens, int64_t n, const config::InstanceFilterConfig& cfg) {
  if (!cfg.enabled()) return false;
  const int64_t times = longest_repetition(tokens, n, cfg.max_period(), cfg.min_period());
  return times > 0 && times >= cfg.max_count();
}

torch::Tensor keep_instances(const torch::Tensor& batch, const config::InstanceFilterConfig& cfg,
                             int64_t& dropped) {
  TORCH_CHECK(
      batch.dim() == 2 && batch.scalar_type() == torch::kInt64 && batch.is_cpu() && batch.is_contiguous(),
      "keep_instances takes a contiguous int64 CPU batch [B, T]");
  dropped = 0;
  if (!cfg.enabled()) return batch;
  const int64_t B = batch.size(0), T = batch.size(1);
  const int64_t* p = batch.data_ptr<int64_t>();
  std::vector<int64_t> kept;
  for (int64_t r = 0; r < B; ++r)
    if (!is_repetitive(p + r * T, T, cfg)) kept.push_back(r);
  dropped = B - int64_t(kept.size());
  if (dropped == 0) return batch;
  return batch.index_select(0, torch::tensor(kept, torch::kInt64));
}

}  // namespace siamese::data
