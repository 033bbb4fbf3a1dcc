#pragma once
// The `device` setting (and the --device flags of the subcommands): auto, cpu, cuda (the
// rank's local GPU) or cuda:N. Parsed once, when it is set, so that one rule reads the text.
#include <optional>
#include <ostream>
#include <string>

namespace siamese::config {

class DeviceSetting {
 public:
  enum class Kind { Auto, Cpu, Cuda };

  // Implicit, so that a device is set as the text a config or a flag holds. Throws
  // siamese::Error naming `device` and the accepted forms on anything else.
  DeviceSetting(const std::string& text);  // NOLINT(google-explicit-constructor)
  DeviceSetting(const char* text)
      : DeviceSetting(std::string(text)) {}  // NOLINT(google-explicit-constructor)

  Kind kind() const { return kind_; }
  std::optional<int> index() const { return index_; }  // cuda:N
  const std::string& text() const { return text_; }
  bool operator==(const DeviceSetting& other) const { return kind_ == other.kind_ && index_ == other.index_; }
  bool operator!=(const DeviceSetting& other) const { return !(*this == other); }

 private:
  Kind kind_ = Kind::Auto;
  std::optional<int> index_;
  std::string text_;
};

inline std::ostream& operator<<(std::ostream& out, const DeviceSetting& d) { return out << d.text(); }

}  // namespace siamese::config
