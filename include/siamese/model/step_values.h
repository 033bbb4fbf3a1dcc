#pragma once
// A step's values by name, each with how it combines over micro-batches, blocks and ranks
// (OLMo-core's compute_metrics shape: name -> (value, reduce op)). The step adds its loss
// terms; a block adds what it measured (MoE's routing) without the step knowing the names.
// The values stay on the device: one collective per op reduces them over ranks, the blocks'
// finishers then derive what needs the global values (an expert's share of every rank's
// tokens), and the reporter reads the whole record in one copy.
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace siamese::model {

enum class Reduce {
  Sum,   // summed over micro-batches, blocks and ranks (a loss term's shares, token counts)
  None,  // already global: a finisher's result, not reduced again
};

class StepValues {
 public:
  struct Entry {
    std::string name;
    torch::Tensor value;  // float64, any shape
    Reduce reduce;
  };
  // Computes values from the reduced ones, in place (adds, replaces or removes entries).
  using Finisher = std::function<void(StepValues&)>;

  // Adds `value` (detached, as float64) into `name`; a new name goes last. Adding to an
  // existing name with another op or shape is a programming error.
  void add(const std::string& name, const torch::Tensor& value, Reduce reduce = Reduce::Sum);
  // Registers `finish` under `key`, once: every block of a kind adds the same one.
  void on_reduced(const std::string& key, Finisher finish);
  // Adds every entry and finisher of `other`.
  void merge(const StepValues& other);
  // Sums the Sum entries over ranks with `sum_over_ranks` (one call, on one flat tensor),
  // then runs the finishers in the order they were registered.
  void reduce(const std::function<void(torch::Tensor&)>& sum_over_ranks);
  void remove(const std::string& name);
  // A copy whose values own their storage (a CUDA graph's outputs are rewritten by its next
  // replay), with the same finishers.
  StepValues cloned() const;

  // Whether every value is finite, a bool scalar on the device.
  torch::Tensor all_finite() const;
  // Every value flattened, in order: [sum of numels] float64 (empty: an undefined tensor).
  torch::Tensor flat() const;
  // The value `name`; undefined when the step had none.
  torch::Tensor operator[](const std::string& name) const;

  const std::vector<Entry>& entries() const { return entries_; }
  int64_t numel() const;  // flat()'s length
  size_t size() const { return entries_.size(); }

 private:
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string, Finisher>> finishers_;
};

// A value as the host reads it: its shape and its numbers in row-major order.
struct HostValue {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<double> values;
  bool scalar() const { return shape.empty(); }
};
using HostValues = std::vector<HostValue>;

// `flat` (StepValues::flat's layout, on the host) cut back into `values`' entries.
HostValues host_values(const StepValues& values, const double* flat);

}  // namespace siamese::model
