#include <yaml-cpp/yaml.h>

#include <vector>

#include "siamese/config/interpolate.h"
#include "siamese/config/load.h"
#include "siamese/config/schema.h"

namespace siamese::config {
namespace {

using schema::Field;
using schema::Kind;

std::vector<std::string> split(const std::string& key) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1)
    parts.push_back(key.substr(start, dot - start));
  parts.push_back(key.substr(start));
  return parts;
}

// Strings are always double-quoted so that "null", "1000" or "true" read back as strings,
// and "${" is escaped so that a resolved value is not interpolated a second time.
void emit_string(YAML::Emitter& out, const std::string& s) {
  out << YAML::DoubleQuoted << escape_interpolation(s);
}

template <class Root>
void emit_fields(YAML::Emitter& out, const std::vector<Field<Root>>& fields, const Root& root);

// A list-of-maps key (evaluators, optimizer.group_overrides): one map of `fields` per entry.
template <class Entry>
void emit_entries(YAML::Emitter& out, const std::vector<Entry>& entries,
                  const std::vector<Field<Entry>>& fields) {
  if (entries.empty()) {
    out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
    return;
  }
  out << YAML::BeginSeq;
  for (const auto& e : entries) emit_fields(out, fields, e);
  out << YAML::EndSeq;
}

template <class Root>
void emit_value(YAML::Emitter& out, const Field<Root>& f, const Root& root) {
  switch (f.kind) {
    case Kind::String:
      emit_string(out, f.template ref<std::string>(root));
      return;
    case Kind::Parsed:
      emit_string(out, f.text(root));
      return;
    case Kind::Enum:
      emit_string(out, schema::value_text(f, root));
      return;
    case Kind::StringList: {
      const auto& items = f.template ref<std::vector<std::string>>(root);
      if (items.empty()) out << YAML::Flow;
      out << YAML::BeginSeq;
      for (const auto& s : items) emit_string(out, s);
      out << YAML::EndSeq;
      return;
    }
    case Kind::Evaluators:
      if constexpr (std::is_same_v<Root, TrainConfig>)
        emit_entries(out, f.template ref<std::vector<EvaluatorConfig>>(root), schema::evaluator_fields());
      return;
    case Kind::GroupOverrides:
      if constexpr (std::is_same_v<Root, TrainConfig>)
        emit_entries(out, f.template ref<std::vector<GroupOverrideConfig>>(root),
                     schema::group_override_fields());
      return;
    case Kind::Sources:
      if constexpr (std::is_same_v<Root, TrainConfig>)
        emit_entries(out, f.template ref<std::vector<MixtureSourceConfig>>(root),
                     schema::mixture_source_fields());
      return;
    default:
      // Numbers, booleans, null and number lists: their YAML text, flow style.
      out << YAML::Load(schema::value_text(f, root));
  }
}

// Sections (model:, model.siamese:, data: inside an evaluator) open and close as the
// table's dotted keys enter and leave them; the table keeps each section contiguous.
template <class Root>
void emit_fields(YAML::Emitter& out, const std::vector<Field<Root>>& fields, const Root& root) {
  std::vector<std::string> open;
  out << YAML::BeginMap;
  for (const auto& f : fields) {
    const auto parts = split(f.key);
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) ++common;
    for (; open.size() > common; open.pop_back()) out << YAML::EndMap;
    for (; open.size() + 1 < parts.size(); open.push_back(parts[open.size()]))
      out << YAML::Key << parts[open.size()] << YAML::Value << YAML::BeginMap;
    out << YAML::Key << parts.back() << YAML::Value;
    emit_value(out, f, root);
  }
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;
}

}  // namespace

std::string to_yaml(const TrainConfig& config) {
  YAML::Emitter out;
  out.SetNullFormat(YAML::LowerNull);
  emit_fields(out, schema::train_fields(), config);
  return std::string(out.c_str()) + "\n";
}

}  // namespace siamese::config
