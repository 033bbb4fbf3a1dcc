#include <nlohmann/json.hpp>

#include "siamese/config/schema.h"

namespace siamese::config::schema {

std::map<std::string, std::string> training_settings(const TrainConfig& c) {
  std::map<std::string, std::string> out;
  for (const auto& f : train_fields())
    // Where the run lives is not a training setting.
    if (f.key != "save_folder" && f.key != "load_path") out[f.key] = value_text(f, c);
  return out;
}

std::vector<SettingChange> changed_settings(const std::map<std::string, std::string>& was,
                                            const TrainConfig& now) {
  std::vector<SettingChange> out;
  for (const auto& [key, is] : training_settings(now)) {
    const auto before = was.find(key);
    if (before != was.end() && before->second != is) out.push_back({key, before->second, is});
  }
  return out;
}

namespace {

template <class Root>
nlohmann::ordered_json json_of(const Field<Root>& f, const Root& c);

// A list-of-maps key: one object per entry, dotted keys nested.
template <class Entry>
nlohmann::ordered_json entries_json(const std::vector<Entry>& list, const std::vector<Field<Entry>>& fields) {
  auto entries = nlohmann::ordered_json::array();
  for (const auto& entry : list) {
    auto one = nlohmann::ordered_json::object();
    for (const auto& g : fields) {
      auto* at = &one;
      for (size_t start = 0, dot; (dot = g.key.find('.', start)) != std::string::npos; start = dot + 1)
        at = &(*at)[g.key.substr(start, dot - start)];
      (*at)[g.key.substr(g.key.rfind('.') + 1)] = json_of(g, entry);
    }
    entries.push_back(std::move(one));
  }
  return entries;
}

template <class Root>
nlohmann::ordered_json json_of(const Field<Root>& f, const Root& c) {
  using json = nlohmann::ordered_json;
  const auto optional = [](const auto& value) { return value ? json(*value) : json(nullptr); };
  switch (f.kind) {
    case Kind::Int:
      return f.template ref<int64_t>(c);
    case Kind::Double:
      return f.template ref<double>(c);
    case Kind::Bool:
      return f.template ref<bool>(c);
    case Kind::String:
      return f.template ref<std::string>(c);
    case Kind::Parsed:
      return f.text(c);
    case Kind::Enum:
      return value_text(f, c);
    case Kind::OptInt:
      return optional(f.template ref<std::optional<int64_t>>(c));
    case Kind::OptDouble:
      return optional(f.template ref<std::optional<double>>(c));
    case Kind::OptBool:
      return optional(f.template ref<std::optional<bool>>(c));
    case Kind::StringList:
      return f.template ref<std::vector<std::string>>(c);
    case Kind::IntList:
      return f.template ref<std::vector<int64_t>>(c);
    case Kind::DoubleList:
      return f.template ref<std::vector<double>>(c);
    case Kind::Evaluators:
      break;
    case Kind::GroupOverrides:
      return entries_json(f.template ref<std::vector<GroupOverrideConfig>>(c), group_override_fields());
    case Kind::Sources:
      return entries_json(f.template ref<std::vector<MixtureSourceConfig>>(c), mixture_source_fields());
  }
  return nullptr;
}

}  // namespace

nlohmann::ordered_json value_json(const Field<TrainConfig>& f, const TrainConfig& c) { return json_of(f, c); }

nlohmann::ordered_json nested_json(const TrainConfig& c, const std::string& prefix) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& f : train_fields()) {
    if (f.key.rfind(prefix, 0) != 0) continue;
    nlohmann::ordered_json* at = &out;
    const std::string key = f.key.substr(prefix.size());
    size_t start = 0;
    for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1)
      at = &(*at)[key.substr(start, dot - start)];
    (*at)[key.substr(start)] = value_json(f, c);
  }
  return out;
}

}  // namespace siamese::config::schema
