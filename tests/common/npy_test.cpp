// The .npy reader and writer (common/npy.h): what numpy writes and reads, and what it refuses.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "siamese/common/error.h"
#include "siamese/common/npy.h"

namespace fs = std::filesystem;
using namespace siamese;

TEST(Npy, RoundTripsAndRejectsWhatItCannotRead) {
  const auto dir = fs::temp_directory_path() / "siamese_npy_test";
  fs::create_directories(dir);
  for (auto t : {torch::randn({2, 3, 4}), torch::randn({5}, torch::kDouble),
                 torch::randint(1000, {3, 2}, torch::kLong), torch::randn({})}) {
    const auto path = (dir / "t.npy").string();
    write_npy(path, t);
    auto back = read_npy(path);
    EXPECT_EQ(back.scalar_type(), t.scalar_type());
    EXPECT_TRUE(back.equal(t));
  }
  EXPECT_THROW(write_npy((dir / "h.npy").string(), torch::ones({2}, torch::kHalf)), Error);
  {
    std::ofstream f(dir / "bad.npy", std::ios::binary);
    const std::string header = "{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }";
    f << "\x93NUMPY" << '\x01' << '\x00' << char(header.size()) << '\x00' << header << "abcd";
  }
  try {
    read_npy((dir / "bad.npy").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("<i2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_npy((dir / "missing.npy").string()), Error);
  fs::remove_all(dir);
}
