// The main of every test executable: GoogleTest's, except that a run in which every test
// skipped (a missing package, no CUDA device) exits 77, which ctest reports as skipped
// (tests/gtest_suites.cmake), rather than passing a suite that checked nothing.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  const auto& unit = *::testing::UnitTest::GetInstance();
  if (failed == 0 && unit.successful_test_count() == 0 && unit.skipped_test_count() > 0) return 77;
  return failed;
}
