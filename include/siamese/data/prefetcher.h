#pragma once
// Background loader threads for data.num_workers, as OLMo's DataLoader workers: worker w
// loads the batches of steps first+w, first+w+N, ... and holds up to two of them ready
// (PyTorch's default prefetch_factor), so reading tokens (and pinning them for a GPU)
// overlaps the steps before. Batches come out in step order and are exactly what `load`
// returns, so the data order, and exact resume, do not depend on num_workers. With 0
// workers next() loads on the calling thread. A worker's exception (a token file that
// shrank) is rethrown by the next() that asks for its batch.
#include <torch/torch.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace siamese::data {

class BatchPrefetcher {
 public:
  using Load = std::function<torch::Tensor(int64_t step)>;
  // Loads steps first_step, first_step+1, ... below end_step.
  BatchPrefetcher(Load load, int64_t first_step, int64_t end_step, int64_t num_workers);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  torch::Tensor next();

 private:
  struct Slot {
    std::mutex mutex;
    std::condition_variable changed;
    std::optional<torch::Tensor> batch;
    std::exception_ptr error;
  };
  void work(int64_t worker);
  void stop_workers();

  Load load_;
  int64_t first_, end_, next_;
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::thread> workers_;
};

}  // namespace siamese::data
