#pragma once
// Errors at the project's boundaries (config files, data files, command line). Each one
// says what went wrong, where (file, key, line) and how to fix it, so a user never has to
// read a stack trace to repair their input.
#include <stdexcept>
#include <string>

namespace siamese {

class Error : public std::runtime_error {
 public:
  // `where` is e.g. "configs/tiny/pre.yaml:12 (model.d_model)"; `fix` is a suggestion.
  Error(std::string what, std::string where = {}, std::string fix = {})
      : std::runtime_error(compose(what, where, fix)),
        what_(std::move(what)),
        where_(std::move(where)),
        fix_(std::move(fix)) {}

  const std::string& problem() const { return what_; }
  const std::string& where() const { return where_; }
  const std::string& fix() const { return fix_; }

 private:
  static std::string compose(const std::string& what, const std::string& where, const std::string& fix) {
    std::string s = where.empty() ? what : where + ": " + what;
    if (!fix.empty()) s += "\n  fix: " + fix;
    return s;
  }
  std::string what_, where_, fix_;
};

}  // namespace siamese
