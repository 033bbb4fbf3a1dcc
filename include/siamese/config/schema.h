#pragma once
// The YAML schema in one table: dotted key -> struct member, value kind, one-line meaning.
// Parsing, dumping (to_yaml), unknown-key suggestions, and docs/configuration.md
// (`siamese config --schema`) all read this table, so they cannot drift apart.
#include <functional>
#include <string>
#include <vector>

#include "siamese/config/config.h"

namespace siamese::schema {

enum class Kind { Int, Double, Bool, String, OptInt, OptDouble, OptBool, StringList, DoubleList, Evaluators };

// A key of `Root` (TrainConfig, or one entry of `evaluators`).
template <class Root>
struct Field {
  std::string key;  // dotted, relative to Root: "model.d_model", "data.paths"
  Kind kind;
  std::function<void*(Root&)> member;
  std::string doc;
  bool ours;  // a key this project adds to OLMo's schema

  template <class T>
  T& ref(Root& root) const { return *static_cast<T*>(member(root)); }
  template <class T>
  const T& ref(const Root& root) const { return *static_cast<const T*>(member(const_cast<Root&>(root))); }
};

// An OLMo key this project reads without using (logged "ignored"); a whole subtree when it
// names a section.
struct IgnoredKey {
  std::string key;
  std::string why;
};

const std::vector<Field<TrainConfig>>& train_fields();
const std::vector<Field<EvaluatorConfig>>& evaluator_fields();
const std::vector<IgnoredKey>& ignored_train_keys();
const std::vector<IgnoredKey>& ignored_evaluator_keys();

// The field of `key`; the key must exist (a programming error otherwise).
const Field<TrainConfig>& train_field(const std::string& key);

// "an integer", "a list of strings", ... for error messages and docs.
std::string kind_name(Kind kind);

// A scalar or list member as YAML text: 256, 0.0004, true, null, the bare string, [0.9, 0.95].
// Doubles print in the shortest form that reads back to the same value.
std::string value_text(const Field<TrainConfig>& field, const TrainConfig& root);
std::string value_text(const Field<EvaluatorConfig>& field, const EvaluatorConfig& root);

// The tables as Markdown (key, type, default, meaning), the body of docs/configuration.md's
// reference section.
std::string markdown();

}  // namespace siamese::schema
