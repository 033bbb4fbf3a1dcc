#pragma once
// Where the shared corpora, golden tensors, tokenizers and evaluation tasks live: the folder
// `shared` next to the checkout. $SIAMESE_SHARED_DIR when set, else ../shared from the
// working directory. Every lookup goes through here; the tests get the folder CMake found
// through the same variable (tests/CMakeLists.txt).
#include <string>

namespace siamese {

std::string shared_dir();

}  // namespace siamese
