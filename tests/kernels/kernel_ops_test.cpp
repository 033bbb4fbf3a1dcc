// The kernels' op table (kernels/op_table.h): every op x dtype x backend row that the
// families declare (families.h), checked against a float64 composite of ATen ops. CUDA rows
// are the suite Gpu/KernelOps (ctest label gpu) and skip without a device.
#include "siamese/kernels/op_table.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "siamese/kernels/families.h"
#include "siamese/kernels/fused_norm.h"

namespace siamese::kernels {

// How gtest, and so a ctest name, shows a row.
void PrintTo(const OpRow& row, std::ostream* os) {
  *os << op_name(row.op) << " " << dtype_name(row.dtype) << " on " << row.backend;
}

namespace {

std::string row_name(const testing::TestParamInfo<OpRow>& info) {
  return std::string(op_name(info.param.op)) + "_" + dtype_name(info.param.dtype);
}

class KernelOps : public testing::TestWithParam<OpRow> {};

TEST_P(KernelOps, MatchTheAtenComposite) {
  const OpRow& row = GetParam();
  if (row.backend == torch::kCUDA && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const RowCheck check = check_row(row);
  ASSERT_FALSE(check.outputs.empty());
  for (const auto& o : check.outputs) {
    SCOPED_TRACE(o.name);
    EXPECT_TRUE(o.dtype_ok) << "stored in the wrong dtype";
    EXPECT_TRUE(o.shape_ok);
    EXPECT_LE(o.error, o.tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, KernelOps, testing::ValuesIn(op_table(torch::kCPU)), row_name);
INSTANTIATE_TEST_SUITE_P(Gpu, KernelOps, testing::ValuesIn(op_table(torch::kCUDA)), row_name);

// The table is what the families declare: each dtype a kernel takes is a row, float16 on CUDA
// for every family included, and nothing a family lacks.
TEST(KernelTable, HoldsEveryDtypeAFamilyDeclaresAndNoOther) {
  for (const auto backend : {torch::kCPU, torch::kCUDA})
    for (Family f : kFamilies)
      for (const auto t : {torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kDouble}) {
        bool listed = false;
        for (const OpRow& row : op_table(backend))
          listed = listed || (family_of(row.op) == f && row.dtype == t);
        EXPECT_EQ(listed, has_kernel(f, t, backend))
            << family_name(f) << " " << dtype_name(t) << " on " << backend;
      }
  for (Family f : kFamilies) EXPECT_TRUE(has_kernel(f, torch::kHalf, torch::kCUDA)) << family_name(f);
}

// A family switched off is never taken: the model's callers see no kernel for any dtype, and
// the switch comes back at the end of the scope.
TEST(KernelTable, ASwitchedOffFamilyIsNotTaken) {
  const auto x = torch::randn({4, 8});
  ASSERT_TRUE(norm_supports(x));
  {
    const KernelSwitches scope;
    set_enabled(Family::Norm, false);
    EXPECT_FALSE(norm_supports(x));
    EXPECT_FALSE(takes(Family::Norm, x));
    EXPECT_TRUE(takes(Family::Swiglu, x));
  }
  EXPECT_TRUE(norm_supports(x));
}

// A row that throws (here: CUDA rows where no CUDA device is visible, as a kernel launch
// failure would on a GPU) fails with its message, and the next row still runs.
TEST(KernelTable, ARowThatThrowsFailsAndTheTableGoesOn) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible: its rows run";
  const auto cuda = op_table(torch::kCUDA);
  ASSERT_FALSE(cuda.empty());
  const RowCheck failed = check_row(cuda.front());
  EXPECT_FALSE(failed.pass());
  EXPECT_FALSE(failed.raised.empty());
  EXPECT_EQ(failed.raised.find('\n'), std::string::npos) << "one line: " << failed.raised;
  EXPECT_EQ(failed.worst().name, "-");
  const RowCheck next = check_row(op_table(torch::kCPU).front());
  EXPECT_TRUE(next.pass()) << next.worst().name << " " << next.worst().error;
  EXPECT_TRUE(next.raised.empty());
}

}  // namespace
}  // namespace siamese::kernels
