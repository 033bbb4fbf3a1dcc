#include "siamese/config/duration.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "siamese/common/error.h"

namespace siamese::config {
namespace {

// A positive whole number written as OLMo accepts it: 1000, 739_328, 1e4, 2.5e9.
bool parse_count(std::string s, int64_t& out) {
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      digits += s[i];
    } else if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
               !std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      return false;  // underscores only between digits
    }
  }
  if (digits.empty() || digits.find_first_not_of("0123456789.eE+") != std::string::npos) return false;
  char* end = nullptr;
  const double v = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size() || !std::isfinite(v) || v < 1 || v > 9.2e18 || v != std::floor(v))
    return false;
  out = static_cast<int64_t>(v);
  return true;
}

}  // namespace

Duration::Duration(const std::string& text) : text_(text) {
  std::string number = text;
  if (text.size() > 1 && text.back() == 'T') {
    unit_ = Tokens;
    number.pop_back();
  } else if (text.size() > 2 && text.compare(text.size() - 2, 2, "ep") == 0) {
    unit_ = Epochs;
    number.resize(number.size() - 2);
  }
  if (!parse_count(number, value_))
    throw Error("max_duration \"" + text + "\" is not a duration", "max_duration",
                "write a positive whole number of steps (1000, 739_328, 1e4), tokens (2e9T) or "
                "epochs (1ep)");
}

}  // namespace siamese::config
