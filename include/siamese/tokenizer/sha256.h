#pragma once
// SHA-256 (FIPS 180-4), used to identify tokenizer files in token-file sidecars.
#include <string>
#include <string_view>

namespace siamese::tokenizer {

// Lower-case hex digest of `data`.
std::string sha256_hex(std::string_view data);

}  // namespace siamese::tokenizer
