#include "siamese/common/shared_dir.h"

#include <cstdlib>

namespace siamese {

std::string shared_dir() {
  const char* env = std::getenv("SIAMESE_SHARED_DIR");
  return env && *env ? env : "../shared";
}

}  // namespace siamese
