#pragma once
#include <string>

namespace siamese {

// Console logging for one process of a (possibly distributed) run: rank 0 logs at `level`,
// other ranks only warnings and errors, so torchrun output stays readable.
void init_logging(int rank, const std::string& level = "info");

}  // namespace siamese
