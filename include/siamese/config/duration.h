#pragma once
// OLMo's max_duration syntax: steps "1000" / "739_328" / "1e4", tokens "2e9T", epochs "1ep".
// Parsed once, when the value is set (the config loader, an override, code), and kept with its
// spelling, which the saved config writes back.
#include <cstdint>
#include <ostream>
#include <string>

namespace siamese::config {

class Duration {
 public:
  enum Unit { Steps, Tokens, Epochs };

  // Implicit, so that a duration is set as the text a config would hold: cfg.max_duration =
  // "2e9T". Throws siamese::Error (naming max_duration and the accepted forms) on anything else.
  Duration(const std::string& text);                           // NOLINT(google-explicit-constructor)
  Duration(const char* text) : Duration(std::string(text)) {}  // NOLINT(google-explicit-constructor)

  Unit unit() const { return unit_; }
  int64_t value() const { return value_; }  // > 0
  const std::string& text() const { return text_; }
  // The same length: "1e4" is "10000".
  bool operator==(const Duration& other) const { return unit_ == other.unit_ && value_ == other.value_; }
  bool operator!=(const Duration& other) const { return !(*this == other); }

 private:
  Unit unit_ = Steps;
  int64_t value_ = 0;
  std::string text_;
};

inline std::ostream& operator<<(std::ostream& out, const Duration& d) { return out << d.text(); }

}  // namespace siamese::config
