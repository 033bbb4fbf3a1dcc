// dist::BufferPool: what a sharded step takes comes back at its next take, so the step
// allocates nothing once it has run; shrink_to frees what a save held whole at once.
#include "siamese/dist/buffer_pool.h"

#include <gtest/gtest.h>

using siamese::dist::BufferPool;

TEST(BufferPool, AGivenBufferIsTheNextTakeOfItsSizeAndType) {
  BufferPool pool;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  torch::Tensor a = pool.take(100, f32);
  void* const bytes = a.data_ptr();
  EXPECT_EQ(pool.bytes(), 400);
  pool.give(a);
  EXPECT_FALSE(a.defined());
  // Another size or dtype is another buffer.
  torch::Tensor other = pool.take(100, f32.dtype(torch::kUInt8));
  EXPECT_NE(other.data_ptr(), bytes);
  torch::Tensor b = pool.take(100, f32);
  EXPECT_EQ(b.data_ptr(), bytes);
  EXPECT_EQ(b.numel(), 100);
  EXPECT_EQ(pool.bytes(), 500);
}

TEST(BufferPool, AViewGivenBackIsKeptWhole) {
  BufferPool pool;
  torch::Tensor a = pool.take(12, torch::kFloat);
  void* const bytes = a.data_ptr();
  torch::Tensor rows = a.view({3, 4});
  a = torch::Tensor();
  pool.give(rows);
  const torch::Tensor b = pool.take(12, torch::kFloat);
  EXPECT_EQ(b.data_ptr(), bytes);
  EXPECT_EQ(b.dim(), 1);
}

TEST(BufferPool, ShrinkToFreesWhatIsInItsHandsOnly) {
  BufferPool pool;
  torch::Tensor kept = pool.take(1000, torch::kFloat);
  torch::Tensor a = pool.take(1000, torch::kFloat), b = pool.take(10, torch::kFloat);
  EXPECT_EQ(pool.bytes(), 8040);
  pool.give(a);
  pool.give(b);
  pool.shrink_to(4040);  // the larger free buffer goes first
  EXPECT_EQ(pool.bytes(), 4040);
  pool.shrink_to(0);  // what is taken stays allocated
  EXPECT_EQ(pool.bytes(), 4000);
  EXPECT_EQ(kept.numel(), 1000);
}
