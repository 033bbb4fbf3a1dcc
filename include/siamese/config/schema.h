#pragma once
// The YAML schema in one table: dotted key -> struct member, value kind, the values it
// accepts (a range or a list), one-line meaning. Parsing, value validation, dumping
// (to_yaml), unknown-key suggestions, and docs/configuration.md (`siamese config --schema`)
// all read this table, so they cannot drift apart. Rules between keys (d_model divisible
// by n_heads, ...) are in validate.cpp.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "siamese/config/config.h"

namespace siamese::config::schema {

// Enum: an enum class of enums.h, or an optional one (unset is the choice ""), held as the
// index of its spelling in `choices`.
enum class Kind {
  Int,
  Double,
  Bool,
  String,
  Parsed,  // a value read from its text and written back as it (duration.h, device.h)
  Enum,
  OptInt,
  OptDouble,
  OptBool,
  StringList,
  IntList,
  DoubleList,
  Evaluators,      // a list of EvaluatorConfig maps
  GroupOverrides,  // a list of GroupOverrideConfig maps
  Sources          // a list of MixtureSourceConfig maps
};

// The numbers a key accepts (each element, for a list); null passes.
struct Bounds {
  std::optional<double> min, max;
  bool min_open = false, max_open = false;  // (min, ...) rather than [min, ...
  bool any() const { return min || max; }
};

// A key of `Root` (TrainConfig, or one entry of `evaluators`).
template <class Root>
struct Field {
  std::string key;  // dotted, relative to Root: "model.d_model", "data.paths"
  Kind kind;
  std::function<void*(Root&)> member;
  std::string doc;
  bool ours;                              // a key this project adds to OLMo's schema
  std::vector<std::string> choices = {};  // strings: the accepted values (empty: any)
  Bounds bounds = {};
  std::string fix = {};  // the fix shown for a value outside them (empty: a generated one)
  // A model key that changes how the model is initialised, regularised or computed (memory,
  // kernels), not what its trained weights mean: a resumed run may set it differently.
  bool resume_may_change = false;
  // Enum keys: the member's index in `choices`, and setting it from one.
  std::function<size_t(const Root&)> choice = {};
  std::function<void(Root&, size_t)> choose = {};
  // Parsed keys: the member's text, and setting it from text (throws siamese::Error).
  std::function<std::string(const Root&)> text = {};
  std::function<void(Root&, const std::string&)> parse = {};

  Field positive() && { return std::move(*this).within(0, std::nullopt, true); }
  Field at_least(double min) && { return std::move(*this).within(min, std::nullopt); }
  Field within(std::optional<double> min, std::optional<double> max, bool min_open = false,
               bool max_open = false) && {
    bounds = {min, max, min_open, max_open};
    return std::move(*this);
  }
  Field one_of(std::vector<std::string> values) && {
    choices = std::move(values);
    return std::move(*this);
  }
  Field fixed_by(std::string text) && {
    fix = std::move(text);
    return std::move(*this);
  }
  Field changeable_on_resume() && {
    resume_may_change = true;
    return std::move(*this);
  }

  template <class T>
  T& ref(Root& root) const {
    return *static_cast<T*>(member(root));
  }
  template <class T>
  const T& ref(const Root& root) const {
    return *static_cast<const T*>(member(const_cast<Root&>(root)));
  }
};

// An OLMo key this project reads without using (logged "ignored"); a whole subtree when it
// names a section. `only`, when not empty, lists the values ("null", "false", "[]", "{}")
// with which OLMo trains what this trainer trains: any other value would change the training
// and is refused, naming the key.
struct IgnoredKey {
  std::string key;
  std::string why;
  std::vector<std::string> only = {};
};

const std::vector<Field<TrainConfig>>& train_fields();
const std::vector<Field<EvaluatorConfig>>& evaluator_fields();
const std::vector<Field<GroupOverrideConfig>>& group_override_fields();
const std::vector<Field<MixtureSourceConfig>>& mixture_source_fields();
const std::vector<IgnoredKey>& ignored_train_keys();
const std::vector<IgnoredKey>& ignored_evaluator_keys();

// The field of `key`; the key must exist (a programming error otherwise).
const Field<TrainConfig>& train_field(const std::string& key);

// "an integer", "a list of strings", ... for error messages and docs.
std::string kind_name(Kind kind);

// The accepted values as text: "> 0", "[0, 1)", ">= -1", "fp32, amp_bf16, amp_fp16"; empty
// when any value of the kind is.
std::string accepted_text(const Bounds& bounds, const std::vector<std::string>& choices);

// A scalar or list member as YAML text: 256, 0.0004, true, null, the bare string, [0.9, 0.95].
// Doubles print in the shortest form that reads back to the same value.
std::string value_text(const Field<TrainConfig>& field, const TrainConfig& root);
std::string value_text(const Field<EvaluatorConfig>& field, const EvaluatorConfig& root);
std::string value_text(const Field<GroupOverrideConfig>& field, const GroupOverrideConfig& root);
std::string value_text(const Field<MixtureSourceConfig>& field, const MixtureSourceConfig& root);
// The same as a JSON value (numbers, booleans, null, lists; enums as their text).
nlohmann::ordered_json value_json(const Field<TrainConfig>& field, const TrainConfig& root);
// Every key under `prefix` ("model.") with its value, nested as in the YAML.
nlohmann::ordered_json nested_json(const TrainConfig& root, const std::string& prefix);

// What a resumed run or a sweep says changed between two configs of one run.
struct SettingChange {
  std::string key, was, now;  // dotted key, values as YAML text
};
// Every key's value as YAML text, but where the run lives (save_folder, load_path).
std::map<std::string, std::string> training_settings(const TrainConfig& c);
// The settings of `now` that differ from `was` (training_settings of an earlier config); a key
// `was` lacks (a config of an older version) is left out.
std::vector<SettingChange> changed_settings(const std::map<std::string, std::string>& was,
                                            const TrainConfig& now);

// The tables as Markdown (key, type, default, meaning), the body of docs/configuration.md's
// reference section.
std::string markdown();

}  // namespace siamese::config::schema
