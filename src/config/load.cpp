#include "siamese/config/load.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

#include "siamese/common/error.h"
#include "siamese/common/user_path.h"
#include "siamese/config/interpolate.h"
#include "siamese/config/schema.h"

namespace siamese::config {
namespace {

using schema::Field;
using schema::IgnoredKey;
using schema::Kind;

const char* kSchemaHint = "run `siamese config --schema` or see docs/configuration.md for the valid keys";

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string leaf(const std::string& key) { return key.substr(key.rfind('.') + 1); }

// The valid key or section a mistyped `key` most likely meant: the same leaf name in
// another section (d_model -> model.d_model), else the closest by edit distance if it is
// close at all.
template <class Root>
std::string suggestion(const std::string& key, const std::vector<Field<Root>>& fields,
                       const std::string& shown_prefix) {
  std::vector<std::string> candidates;
  for (const auto& f : fields) {
    candidates.push_back(f.key);
    for (size_t dot = f.key.find('.'); dot != std::string::npos; dot = f.key.find('.', dot + 1))
      candidates.push_back(f.key.substr(0, dot));
  }
  for (const auto& c : candidates)
    if (leaf(c) == leaf(key)) return "did you mean " + shown_prefix + c + "?";
  const std::string* best = nullptr;
  size_t best_distance = 0;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(key, c);
    if (!best || d < best_distance) best = &c, best_distance = d;
  }
  if (best && best_distance <= std::max<size_t>(3, key.size() / 3))
    return "did you mean " + shown_prefix + *best + "?";
  return kSchemaHint;
}

const IgnoredKey* ignored(const std::string& key, const std::vector<IgnoredKey>& keys) {
  for (const auto& k : keys)
    if (key == k.key || key.rfind(k.key + ".", 0) == 0) return &k;
  return nullptr;
}

// An ignored key's value as IgnoredKey::only spells the values it accepts.
std::string ignored_value_text(const YAML::Node& value) {
  if (!value || value.IsNull()) return "null";
  if (value.IsScalar()) return value.Scalar() == "~" ? "null" : value.Scalar();
  if (value.size() == 0) return value.IsSequence() ? "[]" : "{}";
  return value.IsSequence() ? "a list" : "a mapping";
}

// Warns that `key` is ignored, or refuses a value with which OLMo would train something else.
void warn_ignored(const std::string& where, const std::string& key, const IgnoredKey& k,
                  const YAML::Node& value) {
  const std::string text = ignored_value_text(value);
  if (k.key == key && !k.only.empty() && std::find(k.only.begin(), k.only.end(), text) == k.only.end())
    throw Error(
        fmt::format("OLMo key {} is {}: that changes what OLMo trains, and this trainer does not ({})", key,
                    text, k.why),
        where, fmt::format("remove the key or set it to {}", fmt::join(k.only, " or ")));
  spdlog::warn("{}: OLMo key {} ignored ({})", where, key, k.why);
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "\"" + node.Scalar() + "\"";
  }
}

bool parse_int(const std::string& text, int64_t& out) {
  std::string digits;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool between_digits = i > 0 && i + 1 < text.size() &&
                                std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                                std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (text[i] == '_' && between_digits) continue;
    digits += text[i];
  }
  if (digits.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtoll(digits.c_str(), &end, 10);
  return errno == 0 && end == digits.c_str() + digits.size();
}

bool parse_double(const std::string& text, double& out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

// inf, nan and numbers beyond a double's range (1e400 reads as inf) parse, but no setting
// means them: a learning rate of inf trains nothing and fails only steps later.
Error not_finite(const std::string& text, const std::string& where, const std::string& example) {
  return Error("expected a finite number, got \"" + text + "\"", where,
               "write a number within +-1.8e308, e.g. " + example);
}

bool parse_bool(const std::string& text, bool& out) {
  static const std::map<std::string, bool> words = {
      {"true", true},   {"True", true},   {"TRUE", true},   {"yes", true}, {"on", true},
      {"false", false}, {"False", false}, {"FALSE", false}, {"no", false}, {"off", false}};
  const auto it = words.find(text);
  if (it == words.end()) return false;
  out = it->second;
  return true;
}

// A key's raw value before parsing: the YAML node and where the user wrote it.
struct Raw {
  YAML::Node node;
  std::string where;  // "configs/x.yaml:12", "command line (--k=v)", "MODEL_TYPE"
};

// yaml-cpp quotes the offending character of a binary file raw; a NUL would end the
// message before its fix.
std::string printable(const std::string& text) {
  std::string out;
  for (const unsigned char c : text)
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += char(c);
  return out;
}

std::string file_line(const std::string& path, const YAML::Mark& mark) {
  return mark.line >= 0 ? path + ":" + std::to_string(mark.line + 1) : path;
}

// A plain (unquoted) `<<` key: YAML's merge key, which OmegaConf (PyYAML) applies and
// yaml-cpp leaves as an ordinary key.
bool is_merge_key(const YAML::Node& key) {
  return key.IsScalar() && key.Scalar() == "<<" && key.Tag() == "?";
}

// Applies YAML merge keys in place, as PyYAML does: `<<: *base` (or `<<: [*a, *b]`) adds
// each key of the merged mappings that the mapping does not set itself; earlier mappings in
// the list win over later ones. Merged keys keep the position where they are written (the
// anchor), so messages about them point there.
//
// Every alias of a node is that node, so each node is visited once (`done`): an alias bomb
// (each level aliasing the one below nine times) costs what its text does, not nine to the
// power of its depth.
void apply_merges(YAML::Node node, const std::string& path, std::vector<YAML::Node>& done, int depth = 0) {
  if (depth > 256)
    throw Error("YAML nested deeper than 256 levels (or an alias that contains itself)",
                file_line(path, node.Mark()), "flatten the config");
  if (!node.IsSequence() && !node.IsMap()) return;
  for (const auto& d : done)
    if (d.is(node)) return;
  done.push_back(node);
  if (node.IsSequence()) {
    for (auto child : node) apply_merges(child, path, done, depth + 1);
    return;
  }
  std::vector<YAML::Node> merge_keys, sources;
  for (auto item : node) {
    if (!is_merge_key(item.first)) {
      apply_merges(item.second, path, done, depth + 1);
      continue;
    }
    merge_keys.push_back(item.first);
    const YAML::Node& value = item.second;
    const bool list = value.IsSequence();
    for (size_t i = 0; i < (list ? value.size() : 1); ++i) {
      const YAML::Node source = list ? value[i] : value;
      if (!source.IsMap())
        throw Error("a merge key `<<` takes a mapping or a list of mappings, got " + describe(source),
                    file_line(path, item.first.Mark()),
                    "write `<<: *name` where `&name` marks a mapping (or `<<: [*a, *b]`), or quote the key "
                    "(\"<<\") if it is not a merge");
      apply_merges(source, path, done, depth + 1);
      sources.push_back(source);
    }
  }
  if (merge_keys.empty()) return;
  for (const auto& key : merge_keys) node.remove(key);
  for (const auto& source : sources)
    for (const auto& item : source) {
      bool set = false;
      for (const auto& own : node) set = set || own.first.Scalar() == item.first.Scalar();
      if (!set) node.force_insert(item.first, item.second);
    }
}

// The value at dotted `key` ("model.d_model") under `root` and the position of its key, or
// nullopt when a part is missing or a parent is not a mapping. Keys are matched by their
// text, so a duplicate or merge key never stands in for another.
std::optional<std::pair<YAML::Node, YAML::Mark>> find_dotted(const YAML::Node& root, const std::string& key) {
  YAML::Node node = root;
  YAML::Mark mark = root.Mark();
  for (size_t start = 0;;) {
    const size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node.IsMap()) return std::nullopt;
    bool found = false;
    YAML::Node next;
    for (const auto& item : node)
      if (item.first.Scalar() == part) next.reset(item.second), mark = item.first.Mark(), found = true;
    if (!found) return std::nullopt;
    node.reset(next);
    if (dot == std::string::npos) return std::make_pair(node, mark);
    start = dot + 1;
  }
}

class Loader {
 public:
  // `text` is the config itself, `path` then only names it in messages.
  Loader(std::string path, const std::vector<std::string>& overrides, const std::string& model_type,
         const std::string* text = nullptr)
      : path_(std::move(path)) {
    if (text)
      parse_text(*text);
    else
      read_file();
    check_keys(root_, "", "", schema::train_fields(), schema::ignored_train_keys());
    read_overrides(overrides);
    if (!model_type.empty()) model_type_ = Raw{YAML::Node(model_type), "MODEL_TYPE"};
  }

  // An OLMo model section given as a node (a checkpoint's config.json), read as the model
  // section of a file at `where`.
  Loader(const YAML::Node& model, std::string where) : path_(std::move(where)) {
    root_ = YAML::Node(YAML::NodeType::Map);
    root_["model"] = model;
  }

  // The OLMo keys of the model section (the schema's model.* keys not marked ours). OLMo
  // writes None for "its default" on keys that are not optional here; those keep ours.
  ModelConfig load_olmo_model() {
    TrainConfig config;
    for (const auto& f : schema::train_fields()) {
      if (f.ours || f.key.rfind("model.", 0) != 0) continue;
      const auto raw = from_file(f.key);
      const bool optional = f.kind == Kind::OptInt || f.kind == Kind::OptDouble || f.kind == Kind::OptBool;
      if (raw && (optional || !raw->node.IsNull())) parse(f, config, *raw, f.key);
    }
    return config.model;
  }

  TrainConfig load(ConfigOrigin* origin) {
    TrainConfig config;
    for (const auto& f : schema::train_fields()) {
      if (const auto raw = value_of(f.key)) {
        located_[f.key] = raw->where;
        if (f.kind == Kind::Evaluators)
          read_entries(*raw, f.key, f.ref<std::vector<EvaluatorConfig>>(config), schema::evaluator_fields(),
                       schema::ignored_evaluator_keys(), "`- label: piqa` then `  type: downstream`");
        else if (f.kind == Kind::GroupOverrides)
          read_entries(*raw, f.key, f.ref<std::vector<GroupOverrideConfig>>(config),
                       schema::group_override_fields(), {},
                       "`- params: [wte.weight]` then `  opts: {lr: 1e-3}`");
        else if (f.kind == Kind::Sources)
          read_entries(*raw, f.key, f.ref<std::vector<MixtureSourceConfig>>(config),
                       schema::mixture_source_fields(), {},
                       "`- source_name: web` then `  target_ratio: 0.7` and `  paths: [web.npy]`");
        else
          parse(f, config, *raw, f.key);
      }
    }
    // OLMo's own default is fsdp, so an OLMo file may set fsdp.* and leave the strategy out
    // (a saved run config names both, and says nothing new).
    if (!located_.count("distributed_strategy"))
      for (const auto& [key, where] : located_)
        if (key.rfind("fsdp.", 0) == 0)
          spdlog::warn(
              "{}: {} has no effect: distributed_strategy is ddp (full replicas); set "
              "distributed_strategy: fsdp for the sharding it describes",
              where, key);
    if (origin) {
      const auto raw = value_of("model.residual");
      const bool from_command_line = raw && raw->where.rfind("command line", 0) == 0;
      origin->topology = !raw ? "default" : from_command_line ? "--model.residual" : raw->where;
      origin->explicit_keys = located_;
    }
    return config;
  }

  // "configs/x.yaml:12 (model.n_heads)"; keys left at their default point at the file.
  std::string locate(const std::string& key) const {
    const auto it = located_.find(key);
    return (it == located_.end() ? path_ : it->second) + " (" + key + ")";
  }

 private:
  // Reads the file whole (pipes such as /dev/stdin included), then parses it.
  void read_file() {
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto status = fs::status(path_, ec);
    if (ec && ec.value() != ENOENT)  // a symbolic link loop, a file where a folder must be, ...
      throw Error("cannot open the config file: " + ec.message(), path_, path_fix(ec));
    if (status.type() == fs::file_type::not_found) {
      std::error_code link_ec;
      const bool dangling = fs::is_symlink(fs::symlink_status(path_, link_ec));
      throw Error(dangling ? "config file not found (a symbolic link to " +
                                 fs::read_symlink(path_, link_ec).string() + ", which does not exist)"
                           : "config file not found",
                  path_, "check the path (configs/ holds the shipped configs)");
    }
    if (status.type() == fs::file_type::directory)
      throw Error("config file not found: this is a folder", path_,
                  "name a YAML file in it (configs/ holds the shipped configs)");
    errno = 0;
    std::ifstream in(path_, std::ios::binary);
    if (!in)
      throw Error(std::string("cannot read the config file: ") + std::strerror(errno), path_,
                  "check the file's permissions");
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    if (in.bad())
      throw Error(std::string("cannot read the config file: ") + std::strerror(errno), path_,
                  "check the file and the disk it is on");
    parse_text(text);
  }

  void parse_text(const std::string& text) {
    try {
      root_ = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      throw Error("invalid YAML: " + printable(e.msg), file_line(path_, e.mark),
                  "fix the YAML syntax (indentation, a missing ':' or an unclosed quote or bracket)");
    }
    // A file of nothing but blanks and comments is a mistake (a truncated copy, the wrong
    // file), not a request for every default.
    if (root_.IsNull())
      throw Error("the config file is empty: it sets no keys", path_,
                  "start from a shipped config (configs/tiny/base.yaml) or name another file");
    std::vector<YAML::Node> done;
    apply_merges(root_, path_, done);
    if (!root_.IsMap())
      throw Error("a config must be a mapping of keys, got " + describe(root_), path_,
                  "start the file with top-level keys such as run_name: and model:");
  }

  // Rejects unknown and duplicate keys (with the closest valid key) and warns about OLMo
  // keys we accept without using. Value types are checked when the value is parsed.
  template <class Root>
  void check_keys(const YAML::Node& map, const std::string& prefix, const std::string& shown_prefix,
                  const std::vector<Field<Root>>& fields, const std::vector<IgnoredKey>& ignored_keys) {
    std::set<std::string> seen;
    for (const auto& item : map) {
      const std::string key = prefix + item.first.Scalar();
      const std::string shown = shown_prefix + key;
      const std::string where = file_line(path_, item.first.Mark()) + " (" + shown + ")";
      if (!seen.insert(key).second)
        throw Error("duplicate key " + shown, where, "keep one of the two entries");
      const bool is_field =
          std::any_of(fields.begin(), fields.end(), [&](const auto& f) { return f.key == key; });
      if (is_field) continue;
      if (const auto* k = ignored(key, ignored_keys)) {
        warn_ignored(file_line(path_, item.first.Mark()), shown, *k, item.second);
        continue;
      }
      const bool is_section = std::any_of(fields.begin(), fields.end(),
                                          [&](const auto& f) { return f.key.rfind(key + ".", 0) == 0; });
      if (is_section && item.second.IsMap()) {
        check_keys(item.second, key + ".", shown_prefix, fields, ignored_keys);
      } else if (is_section && !item.second.IsNull()) {
        throw Error("expected a mapping of " + shown + ".* keys, got " + describe(item.second), where,
                    "indent the " + shown + " keys under `" + leaf(key) + ":`");
      } else if (!is_section) {
        throw Error("unknown key " + shown, where, suggestion(key, fields, shown_prefix));
      }
    }
  }

  void read_overrides(const std::vector<std::string>& args) {
    for (size_t i = 0; i < args.size(); ++i) {
      std::string arg = args[i];
      const std::string shown = arg;
      if (arg.rfind("--", 0) == 0) arg = arg.substr(2);
      std::string key = arg, text;
      if (const auto eq = arg.find('='); eq != std::string::npos) {
        key = arg.substr(0, eq);
        text = arg.substr(eq + 1);
      } else if (shown.rfind("--", 0) == 0 && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
        text = args[++i];
      } else {
        throw Error("override \"" + shown + "\" has no value", "command line",
                    "write overrides as --dotted.key=value, e.g. --model.d_model=256");
      }
      const std::string where = "command line (--" + key + "=" + text + ")";
      const auto& fields = schema::train_fields();
      const auto f = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.key == key; });
      if (f == fields.end()) {
        if (const auto* k = ignored(key, schema::ignored_train_keys())) {
          warn_ignored(where, key, *k, text.empty() ? YAML::Node() : YAML::Node(text));
          continue;
        }
        throw Error("unknown key " + key, where, suggestion(key, fields, ""));
      }
      overrides_[key] = Raw{value_node(f->kind, text, where), where};
    }
  }

  // Scalars keep their text as written (so "--run_name=a: b" stays a string); lists and
  // evaluators are YAML ("[0.9, 0.99]").
  static YAML::Node value_node(Kind kind, const std::string& text, const std::string& where) {
    if (text.empty() || text == "null" || text == "~") return YAML::Node(YAML::NodeType::Null);
    if (kind != Kind::StringList && kind != Kind::IntList && kind != Kind::DoubleList &&
        kind != Kind::Evaluators && kind != Kind::GroupOverrides && kind != Kind::Sources)
      return YAML::Node(text);
    try {
      return YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      throw Error("invalid YAML value: " + e.msg, where, "write lists as [a, b]");
    }
  }

  std::optional<Raw> from_file(const std::string& key) const {
    const auto found = find_dotted(root_, key);
    if (!found) return std::nullopt;
    // A null value has no position of its own; point at its key.
    return Raw{found->first, file_line(path_, found->first.IsNull() ? found->second : found->first.Mark())};
  }

  std::optional<Raw> value_of(const std::string& key) const {
    if (const auto it = overrides_.find(key); it != overrides_.end()) return it->second;
    if (key == "model.residual" && model_type_) return model_type_;
    return from_file(key);
  }

  // The resolved text `${key}` stands for.
  std::string lookup(const std::string& key) {
    const auto& fields = schema::train_fields();
    const auto f = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.key == key; });
    const auto raw = value_of(key);
    if (f == fields.end() && !raw)
      throw Error("${" + key + "} refers to no key", "", suggestion(key, fields, ""));
    if (!raw) return schema::value_text(*f, TrainConfig{});
    if (!raw->node.IsScalar())
      throw Error("${" + key + "} refers to " + describe(raw->node) + ", not a single value", "",
                  "interpolate scalar keys only");
    if (!resolving_.insert(key).second)
      throw Error("${" + key + "} refers to itself through a cycle of interpolations", "",
                  "break the cycle by giving one of the keys a literal value");
    const std::string text = resolved(raw->node.Scalar(), raw->where, key);
    resolving_.erase(key);
    return text;
  }

  std::string resolved(const std::string& text, const std::string& where, const std::string& key) {
    try {
      return interpolate(text, [this](const std::string& k) { return lookup(k); });
    } catch (const Error& e) {
      if (!e.where().empty()) throw;
      throw Error(e.problem(), where + " (" + key + ")", e.fix());
    }
  }

  // A list key written as ${path.glob:...}, or with such items: the files they match, in
  // place. nullopt when no glob is there.
  std::optional<std::vector<std::string>> globbed(const YAML::Node& node, const Raw& raw,
                                                  const std::string& shown) {
    auto expand = [&](const YAML::Node& item) -> std::optional<std::vector<std::string>> {
      if (!item.IsScalar()) return std::nullopt;
      try {
        return expand_glob(item.Scalar(), [this](const std::string& k) { return lookup(k); });
      } catch (const Error& e) {
        if (!e.where().empty()) throw;
        throw Error(e.problem(), raw.where + " (" + shown + ")", e.fix());
      }
    };
    if (node.IsScalar()) return expand(node);
    if (!node.IsSequence()) return std::nullopt;
    std::vector<std::string> out;
    bool any = false;
    for (size_t i = 0; i < node.size(); ++i) {
      if (auto files = expand(node[i])) {
        out.insert(out.end(), files->begin(), files->end());
        any = true;
      } else {
        out.push_back(scalar(node[i], Raw{node[i], raw.where}, shown + "[" + std::to_string(i) + "]",
                             Kind::String, "[a, b]"));
      }
    }
    if (!any) return std::nullopt;
    return out;
  }

  std::string scalar(const YAML::Node& node, const Raw& raw, const std::string& shown, Kind kind,
                     const std::string& example) {
    if (!node.IsScalar())
      throw Error("expected " + schema::kind_name(kind) + ", got " + describe(node),
                  raw.where + " (" + shown + ")", "write e.g. " + shown + ": " + example);
    return resolved(node.Scalar(), raw.where, shown);
  }

  template <class Root>
  void parse(const Field<Root>& f, Root& root, const Raw& raw, const std::string& shown) {
    const YAML::Node& node = raw.node;
    const std::string example = schema::value_text(f, Root{});
    auto type_error = [&](const std::string& given) {
      return Error("expected " + schema::kind_name(f.kind) + ", got " + given, raw.where + " (" + shown + ")",
                   "write e.g. " + shown + ": " + (example.empty() ? "\"text\"" : example));
    };
    const bool null = node.IsNull();
    // Numbers and booleans; null only where the member is optional.
    auto read = [&](auto parse_text, auto type_tag) {
      using T = decltype(type_tag);
      const bool optional = f.kind == Kind::OptInt || f.kind == Kind::OptDouble || f.kind == Kind::OptBool;
      if (null && optional) return f.template ref<std::optional<T>>(root).reset();
      if (null) throw type_error("null");
      const std::string text = scalar(node, raw, shown, f.kind, example);
      T v;
      if (!parse_text(text, v)) throw type_error("\"" + text + "\"");
      if constexpr (std::is_same_v<T, double>)
        if (!std::isfinite(v)) throw not_finite(text, raw.where + " (" + shown + ")", shown + ": " + example);
      if (optional)
        f.template ref<std::optional<T>>(root) = v;
      else
        f.template ref<T>(root) = v;
    };
    switch (f.kind) {
      case Kind::Int:
      case Kind::OptInt:
        return read(parse_int, int64_t{});
      case Kind::Double:
      case Kind::OptDouble:
        return read(parse_double, double{});
      case Kind::Bool:
      case Kind::OptBool:
        return read(parse_bool, bool{});
      case Kind::String:
        // OLMo writes `load_path: null` for "none"; the struct says that with "".
        f.template ref<std::string>(root) = null ? "" : scalar(node, raw, shown, f.kind, example);
        return;
      case Kind::Parsed: {
        if (null) throw type_error("null");
        const std::string text = scalar(node, raw, shown, f.kind, example);
        try {
          f.parse(root, text);
        } catch (const Error& e) {
          throw Error(e.problem(), raw.where + " (" + shown + ")", e.fix());
        }
        return;
      }
      case Kind::Enum: {
        // null is the enum's "" (none, or unset for an optional one).
        const std::string text = null ? "" : scalar(node, raw, shown, f.kind, example);
        const auto at = std::find(f.choices.begin(), f.choices.end(), text);
        if (at == f.choices.end()) {
          const std::string accepted = schema::accepted_text(f.bounds, f.choices);
          throw Error(fmt::format("{} \"{}\" is not one of: {}", shown, text, accepted),
                      raw.where + " (" + shown + ")",
                      f.fix.empty() ? fmt::format("set {} to one of: {}", shown, accepted) : f.fix);
        }
        f.choose(root, static_cast<size_t>(at - f.choices.begin()));
        return;
      }
      case Kind::StringList:
      case Kind::IntList:
      case Kind::DoubleList: {
        if (f.kind == Kind::StringList && !null) {
          if (auto files = globbed(node, raw, shown)) {
            f.template ref<std::vector<std::string>>(root) = *files;
            return;
          }
        }
        if (!null && !node.IsSequence()) throw type_error(describe(node));
        // An item must be a scalar of the list's element kind; a nested list or mapping is
        // named as such, with the whole flat list as the example.
        const Kind item_kind = f.kind == Kind::IntList      ? Kind::Int
                               : f.kind == Kind::DoubleList ? Kind::Double
                                                            : Kind::String;
        const std::string flat_example = example != "[]"             ? example
                                         : item_kind == Kind::Int    ? "[4, -1]"
                                         : item_kind == Kind::Double ? "[0.5, 1.0]"
                                                                     : "[a, b]";
        std::vector<std::string> texts;
        for (size_t i = 0; !null && i < node.size(); ++i) {
          const std::string item = shown + "[" + std::to_string(i) + "]";
          if (!node[i].IsScalar())
            throw Error(fmt::format("expected {} (the items of {}), got {}", schema::kind_name(item_kind),
                                    schema::kind_name(f.kind), describe(node[i])),
                        raw.where + " (" + item + ")",
                        "write " + shown + " as one flat list, e.g. " + shown + ": " + flat_example);
          texts.push_back(scalar(node[i], Raw{node[i], raw.where}, item, item_kind, example));
        }
        if (f.kind == Kind::StringList) {
          f.template ref<std::vector<std::string>>(root) = texts;
          return;
        }
        if (f.kind == Kind::IntList) {
          std::vector<int64_t> ints(texts.size());
          for (size_t i = 0; i < texts.size(); ++i)
            if (!parse_int(texts[i], ints[i]))
              throw Error("expected an integer, got \"" + texts[i] + "\"",
                          raw.where + " (" + shown + "[" + std::to_string(i) + "])",
                          "write e.g. " + shown + ": [4096, 4096, 4096, -1]");
          f.template ref<std::vector<int64_t>>(root) = ints;
          return;
        }
        std::vector<double> numbers(texts.size());
        for (size_t i = 0; i < texts.size(); ++i)
          if (!parse_double(texts[i], numbers[i]))
            throw Error("expected a number, got \"" + texts[i] + "\"",
                        raw.where + " (" + shown + "[" + std::to_string(i) + "])",
                        "write e.g. " + shown + ": " + example);
          else if (!std::isfinite(numbers[i]))
            throw not_finite(texts[i], raw.where + " (" + shown + "[" + std::to_string(i) + "])",
                             shown + ": " + example);
        f.template ref<std::vector<double>>(root) = numbers;
        return;
      }
      case Kind::Evaluators:
      case Kind::GroupOverrides:
      case Kind::Sources:
        return;
    }
  }

  // A list-of-maps key (`key`: evaluators, optimizer.group_overrides): each entry a map of
  // `fields`, located by its own file line.
  template <class Entry>
  void read_entries(const Raw& raw, const std::string& key, std::vector<Entry>& out,
                    const std::vector<Field<Entry>>& fields, const std::vector<IgnoredKey>& ignored_keys,
                    const std::string& example) {
    out.clear();
    if (raw.node.IsNull()) return;
    const std::string kind = schema::kind_name(schema::train_field(key).kind);
    if (!raw.node.IsSequence())
      throw Error("expected " + kind + ", got " + describe(raw.node), raw.where + " (" + key + ")",
                  "write " + key + " as a list: " + example);
    for (size_t i = 0; i < raw.node.size(); ++i) {
      const YAML::Node entry = raw.node[i];
      const std::string shown = key + "[" + std::to_string(i) + "]";
      if (!entry.IsMap())
        throw Error("expected a mapping, got " + describe(entry),
                    file_line(path_, entry.Mark()) + " (" + shown + ")",
                    "write each entry of " + key + " as " + example);
      check_keys(entry, "", shown + ".", fields, ignored_keys);
      Entry e;
      for (const auto& f : fields) {
        const auto found = find_dotted(entry, f.key);
        if (!found) continue;
        const YAML::Node& node = found->first;
        const YAML::Mark& mark = found->second;
        const std::string dotted = shown + "." + f.key;
        const bool from_command_line = raw.where.rfind("command line", 0) == 0;
        const Raw value{node,
                        from_command_line ? raw.where : file_line(path_, node.IsNull() ? mark : node.Mark())};
        located_[dotted] = value.where;
        parse(f, e, value, dotted);
      }
      out.push_back(std::move(e));
    }
  }

  std::string path_;
  YAML::Node root_;
  std::map<std::string, Raw> overrides_;
  std::optional<Raw> model_type_;
  std::set<std::string> resolving_;
  std::map<std::string, std::string> located_;
};

}  // namespace

LaunchSettings launch_settings_from_env() {
  LaunchSettings launch;
  if (const char* model_type = std::getenv("MODEL_TYPE")) launch.model_type = model_type;
  const char* text = std::getenv("WORLD_SIZE");
  if (!text || !*text) return launch;
  int64_t n;
  if (!parse_int(text, n) || n < 1 || n > 1 << 20)
    throw Error(std::string("WORLD_SIZE=\"") + text + "\" is not a positive integer", "environment",
                "unset WORLD_SIZE or launch with torchrun, which sets it");
  launch.world_size = static_cast<int>(n);
  return launch;
}

ModelConfig read_olmo_model(const std::string& config_json) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(config_json);
  } catch (const YAML::Exception& e) {
    throw Error(std::string("cannot parse: ") + e.what(), config_json, "check the JSON");
  }
  const YAML::Node model = root["model_config_full"] ? root["model_config_full"] : root;
  ModelConfig c = Loader(model, config_json).load_olmo_model();
  // OLMo's embedding_size defaults to vocab_size.
  if (!model["embedding_size"] || model["embedding_size"].IsNull()) c.embedding_size = c.vocab_size;
  return c;
}

namespace {

TrainConfig load_validated(Loader& loader, const LaunchSettings& launch, ConfigOrigin* origin) {
  TrainConfig config = loader.load(origin);
  const KeyLocator where = [&loader](const std::string& key) { return loader.locate(key); };
  validate(config, where);
  validate_for_world_size(config, launch.world_size, where);
  return config;
}

}  // namespace

TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides,
                        const LaunchSettings& launch, ConfigOrigin* origin) {
  Loader loader(path, overrides, launch.model_type);
  return load_validated(loader, launch, origin);
}

TrainConfig load_config_text(const std::string& text, const std::string& where) {
  Loader loader(where, {}, "", &text);
  return load_validated(loader, {}, nullptr);
}

}  // namespace siamese::config
