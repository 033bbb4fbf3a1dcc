#pragma once
// What code outside the step needs of the ranks: who this rank is, sums over ranks and a
// barrier. Evaluators, the stop policy, the rank agreement and the loss terms take this.
#include <torch/torch.h>

namespace siamese::dist {

class Communicator;

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Index of this rank on its node: its CUDA device.
  virtual int local_rank() const = 0;
  // Ranks on this node (0: the launcher did not say): on the CPU they share its memory.
  virtual int local_world_size() const = 0;
  // Sums of per-rank scalars (loss, token counts, eval sums).
  virtual double sum(double value) = 0;
  // The largest of per-rank scalars (how many micro-batches the longest share needs).
  virtual double max(double value) = 0;
  // In-place sum of a tensor on the training device over ranks (no host sync on CUDA).
  virtual void sum_(torch::Tensor& tensor) = 0;
  // Every rank waits here until all arrive (e.g. while rank 0 writes a checkpoint).
  virtual void barrier() = 0;
};

// The world of one: a sum over ranks is the value itself.
class OneProcess : public Collectives {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world_size() const override { return 1; }
  double sum(double value) override { return value; }
  double max(double value) override { return value; }
  void sum_(torch::Tensor&) override {}
  void barrier() override {}
};

// The ranks of a process group (dist/communicator.h), which must outlive it.
class GroupCollectives : public Collectives {
 public:
  explicit GroupCollectives(Communicator& comm) : comm_(comm) {}
  int rank() const override;
  int world_size() const override;
  int local_rank() const override;
  int local_world_size() const override;
  double sum(double value) override;
  double max(double value) override;
  void sum_(torch::Tensor& tensor) override;
  void barrier() override;

 private:
  Communicator& comm_;
};

}  // namespace siamese::dist
