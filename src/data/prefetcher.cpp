#include "siamese/data/prefetcher.h"

#include <stdexcept>

namespace siamese::data {

BatchPrefetcher::BatchPrefetcher(Load load, int64_t first_step, int64_t end_step, int64_t num_workers)
    : load_(std::move(load)), first_(first_step), end_(end_step), next_(first_step) {
  for (int64_t w = 0; w < num_workers; ++w) slots_.push_back(std::make_unique<Slot>());
  try {
    for (int64_t w = 0; w < num_workers; ++w) workers_.emplace_back([this, w] { work(w); });
  } catch (...) {  // a thread that could not start: stop the others before giving up
    stop_workers();
    throw;
  }
}

BatchPrefetcher::~BatchPrefetcher() { stop_workers(); }

void BatchPrefetcher::stop_workers() {
  for (auto& slot : slots_) {
    std::lock_guard<std::mutex> lock(slot->mutex);
    stopping_ = true;
    slot->changed.notify_all();
  }
  for (auto& t : workers_) t.join();
}

void BatchPrefetcher::work(int64_t worker) {
  Slot& slot = *slots_[worker];
  const int64_t stride = int64_t(slots_.size());
  for (int64_t step = first_ + worker; step < end_; step += stride) {
    // Loaded while the previous batch may still wait in the slot: two per worker.
    torch::Tensor batch;
    std::exception_ptr error;
    try {
      batch = load_(step);
    } catch (...) {
      error = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(slot.mutex);
    slot.changed.wait(lock, [&] { return stopping_ || (!slot.batch && !slot.error); });
    if (stopping_) return;
    slot.batch = std::move(batch);
    slot.error = error;
    slot.changed.notify_all();
    if (error) return;
  }
}

torch::Tensor BatchPrefetcher::next() {
  if (next_ >= end_) throw std::out_of_range("BatchPrefetcher: no steps left");
  const int64_t step = next_++;
  if (workers_.empty()) return load_(step);
  Slot& slot = *slots_[(step - first_) % int64_t(slots_.size())];
  std::unique_lock<std::mutex> lock(slot.mutex);
  slot.changed.wait(lock, [&] { return slot.batch || slot.error; });
  if (slot.error) std::rethrow_exception(slot.error);
  torch::Tensor batch = std::move(*slot.batch);
  slot.batch.reset();
  slot.changed.notify_all();
  return batch;
}

}  // namespace siamese::data
