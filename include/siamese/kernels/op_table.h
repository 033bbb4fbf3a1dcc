#pragma once
// The kernels' ops as one table, a row per op x dtype x backend, generated from the families'
// declarations (families.h: a dtype a family has code for is a row), and the check of a row
// against a composite of ATen ops in float64 on the CPU: values and, where the op has a
// backward kernel, gradients, each within a tolerance derived from the arithmetic. The test
// suite KernelOps and `siamese kernels --check` run it (llama.cpp's test-backend-ops).
#include <torch/torch.h>

#include <string>
#include <vector>

#include "siamese/kernels/families.h"

namespace siamese::kernels {

enum class Op {
  RmsNorm,
  LayerNorm,
  LayerNormFloatOut,  // a half input's LayerNorm under autocast: float32 output
  StreamUpdate,
  StreamUpdateLayerNorm,
  ResidualUpdate,  // the stream update of one stream: a residual add and the next norm
  ResidualUpdateLayerNorm,
  CrossEntropy,
  Swiglu,
  Rope,
  QkvHeadsRms,
  QkvHeadsLayerNorm,
  QkvHeadsRopeOnly
};

struct OpRow {
  Op op;
  torch::ScalarType dtype;
  torch::DeviceType backend;
};

const char* op_name(Op op);
const char* dtype_name(torch::ScalarType t);
Family family_of(Op op);

// Every row on `backend`: each op in each dtype its family has code for there.
std::vector<OpRow> op_table(torch::DeviceType backend);

// One output of a row: the largest error relative to the reference's largest magnitude, and
// the tolerance (4 eps_out + (n + 8) eps_acc for the longest sum n behind one element).
struct OutputCheck {
  std::string name;
  double error = 0, tolerance = 0;
  bool dtype_ok = true, shape_ok = true;
  bool pass() const { return dtype_ok && shape_ok && error <= tolerance; }
};

struct RowCheck {
  OpRow row;
  std::vector<OutputCheck> outputs;
  // The forward's time against the same op composed of ATen ops in the row's dtype on its
  // device (> 1: the kernel is faster); 0 when not timed.
  double speedup = 0;
  // What the row threw (a CUDA launch or memory error), empty when it ran: such a row fails,
  // and the table goes on to the next one.
  std::string raised;
  bool pass() const;
  // The output furthest past (or closest to) its tolerance; one named "-" when none ran.
  const OutputCheck& worst() const;
};

// Checks `row` on its device (which must exist) with the family switched on for the call;
// `timed` also measures the speedup. Seeds torch's generator. Never throws for the row's own
// failure: that is RowCheck::raised.
RowCheck check_row(const OpRow& row, bool timed = false);

}  // namespace siamese::kernels
