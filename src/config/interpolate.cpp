#include "siamese/config/interpolate.h"

#include <glob.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "siamese/common/error.h"

namespace siamese::config {
namespace {

using Lookup = std::function<std::string(const std::string&)>;

bool starts_with(const std::string& s, size_t at, const char* prefix) {
  return s.compare(at, std::char_traits<char>::length(prefix), prefix) == 0;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  std::string t = s.substr(b, e - b + 1);
  if (t.size() >= 2 && (t.front() == '\'' || t.front() == '"') && t.back() == t.front())
    t = t.substr(1, t.size() - 2);
  return t;
}

// Index of the "}" closing the "${" at `open`, honouring nesting; npos when unterminated.
size_t closing_brace(const std::string& s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (starts_with(s, i, "\\${")) {
      i += 2;
    } else if (starts_with(s, i, "${")) {
      ++depth;
      ++i;
    } else if (s[i] == '}' && --depth == 0) {
      return i;
    }
  }
  return std::string::npos;
}

// Splits resolver arguments at commas that are not inside a nested ${...}.
std::vector<std::string> split_args(const std::string& s) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < s.size(); ++i) {
    if (starts_with(s, i, "${")) {
      const size_t end = closing_brace(s, i);
      if (end == std::string::npos) break;
      args.back() += s.substr(i, end - i + 1);
      i = end;
    } else if (s[i] == ',') {
      args.emplace_back();
    } else {
      args.back() += s[i];
    }
  }
  return args;
}

// "oc.env" in "oc.env:HOME"; empty for a key reference ("model.d_model").
std::string resolver_name(const std::string& expr) {
  const auto colon = expr.find(':');
  if (colon == std::string::npos || colon == 0) return "";
  for (size_t i = 0; i < colon; ++i) {
    const char c = expr[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return "";
  }
  return expr.substr(0, colon);
}

std::string resolve(const std::string& expr, const Lookup& lookup) {
  const std::string name = resolver_name(expr);
  if (name.empty()) return lookup(trim(interpolate(expr, lookup)));

  std::vector<std::string> args;
  for (const auto& a : split_args(expr.substr(name.size() + 1))) args.push_back(trim(interpolate(a, lookup)));
  if (name == "oc.env") {
    if (args.size() > 2 || args[0].empty())
      throw Error("malformed ${" + expr + "}", "", "write ${oc.env:VAR} or ${oc.env:VAR,default}");
    const char* value = std::getenv(args[0].c_str());
    // Set but empty: OmegaConf substitutes the empty text, not the default, which turns
    // `${oc.env:SIAMESE_RUNS,runs}/${run_name}` into a folder at the filesystem root. Neither
    // reading is safe to guess, so a default given means the empty value is refused.
    if (value && !*value && args.size() == 2 && !args[1].empty())
      throw Error("environment variable " + args[0] + " is set but empty (${" + expr + "})", "",
                  "unset " + args[0] + " to use the default \"" + args[1] + "\" (`unset " + args[0] +
                      "` or `env -u " + args[0] + " siamese ...`), or set it to a value");
    if (value) return value;
    if (args.size() == 2) return args[1];
    throw Error("environment variable " + args[0] + " is not set (${" + expr + "})", "",
                "export " + args[0] + "=... or give a default: ${oc.env:" + args[0] + ",default}");
  }
  if (name == "path.choose") {
    for (const auto& p : args)
      if (std::filesystem::exists(p)) return p;
    return args.back();
  }
  if (name == "path.glob")
    throw Error(
        "${" + expr + "} gives a list of files, and this value is one text", "",
        "use ${path.glob:...} as the whole value of a list key, e.g. data.paths: ${path.glob:dir/*.npy}");
  throw Error("unknown interpolation resolver '" + name + "' in ${" + expr + "}", "",
              "supported: ${key}, ${oc.env:VAR,default}, ${path.choose:a,b}, ${path.glob:pattern,...}");
}

// The sorted matches of each pattern in turn, as OLMo's path.glob resolver gives them.
std::vector<std::string> glob_matches(const std::vector<std::string>& patterns) {
  std::vector<std::string> out;
  for (const auto& pattern : patterns) {
    glob_t found{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &found);
    std::vector<std::string> matches(found.gl_pathv, found.gl_pathv + found.gl_pathc);
    ::globfree(&found);
    if (rc == GLOB_NOMATCH || matches.empty())
      throw Error("${path.glob:" + pattern +
                      "} matches no file (relative patterns are read from the current "
                      "folder)",
                  "", "check the pattern, or run from the folder it is relative to");
    if (rc != 0)
      throw Error("${path.glob:" + pattern + "} could not be read", "", "check the pattern's folders");
    std::sort(matches.begin(), matches.end());
    out.insert(out.end(), matches.begin(), matches.end());
  }
  return out;
}

}  // namespace

std::optional<std::vector<std::string>> expand_glob(const std::string& text, const Lookup& lookup) {
  const std::string t = trim(text);
  if (!starts_with(t, 0, "${path.glob:") || closing_brace(t, 0) != t.size() - 1) return std::nullopt;
  std::vector<std::string> patterns;
  for (const auto& a : split_args(t.substr(12, t.size() - 13)))
    patterns.push_back(trim(interpolate(a, lookup)));
  return glob_matches(patterns);
}

std::string interpolate(const std::string& text, const Lookup& lookup) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (starts_with(text, i, "\\${")) {
      out += "${";
      i += 3;
    } else if (starts_with(text, i, "${")) {
      const size_t end = closing_brace(text, i);
      if (end == std::string::npos)
        throw Error("unterminated ${ in \"" + text + "\"", "", "close the interpolation with }");
      out += resolve(text.substr(i + 2, end - i - 2), lookup);
      i = end + 1;
    } else {
      out += text[i++];
    }
  }
  return out;
}

std::string escape_interpolation(const std::string& literal) {
  std::string out;
  for (size_t i = 0; i < literal.size(); ++i) {
    if (starts_with(literal, i, "${")) out += '\\';
    out += literal[i];
  }
  return out;
}

}  // namespace siamese::config
