#pragma once
// The name of a checkpoint folder, step<N>: one rule for the trainer, which writes and
// lists them, and for the readers of a run folder (report), which must not depend on it.
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace siamese {

inline std::string step_folder_name(int64_t step) { return "step" + std::to_string(step); }

// "step123" -> 123. Any other name, or a step number too large for int64 (a stray
// "step99999999999999999999"), -> nullopt; `too_large` says which, for a warning.
inline std::optional<int64_t> step_of_folder(std::string_view name, bool* too_large = nullptr) {
  if (too_large) *too_large = false;
  if (name.size() <= 4 || name.substr(0, 4) != "step") return std::nullopt;
  const char* first = name.data() + 4;
  const char* last = name.data() + name.size();
  if (*first < '0' || *first > '9') return std::nullopt;
  int64_t step = 0;
  const auto [end, ec] = std::from_chars(first, last, step);
  if (end != last) return std::nullopt;
  if (ec == std::errc::result_out_of_range) {
    if (too_large) *too_large = true;
    return std::nullopt;
  }
  return step;
}

}  // namespace siamese
