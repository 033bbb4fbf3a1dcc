// Background loader threads: same batches in the same order as loading inline, errors
// reach the step that needed the failed batch, and an early stop does not hang.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "siamese/data/prefetcher.h"

using siamese::data::BatchPrefetcher;

namespace {

torch::Tensor batch_of(int64_t step) { return torch::arange(step * 4, step * 4 + 4); }

}  // namespace

TEST(Prefetcher, BatchesComeInStepOrderForAnyNumberOfWorkers) {
  for (int64_t workers : {0, 1, 2, 5}) {
    SCOPED_TRACE(workers);
    BatchPrefetcher p(batch_of, 3, 20, workers);
    for (int64_t step = 3; step < 20; ++step) EXPECT_TRUE(torch::equal(p.next(), batch_of(step)));
    EXPECT_THROW(p.next(), std::out_of_range);
  }
}

TEST(Prefetcher, AWorkersErrorIsRaisedAtItsStep) {
  for (int64_t workers : {0, 3}) {
    SCOPED_TRACE(workers);
    BatchPrefetcher p(
        [](int64_t step) {
          if (step == 5) throw std::runtime_error("token file shrank");
          return batch_of(step);
        },
        0, 10, workers);
    for (int64_t step = 0; step < 5; ++step) EXPECT_TRUE(torch::equal(p.next(), batch_of(step)));
    EXPECT_THROW(
        try { p.next(); } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "token file shrank");
          throw;
        },
        std::runtime_error);
  }
}

TEST(Prefetcher, LoadsAtMostTwoAheadPerWorkerAndStopsEarlyWithoutHanging) {
  std::atomic<int64_t> loaded{0};
  {
    BatchPrefetcher p(
        [&](int64_t step) {
          ++loaded;
          return batch_of(step);
        },
        0, 1000, 2);
    p.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_LE(loaded.load(), 1 + 2 * 2);  // the one taken, two per worker ready or in hand
  }
  EXPECT_LT(loaded.load(), 10);
}
