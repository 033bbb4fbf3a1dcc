#pragma once
// Paths the user gives (configs, save folders, outputs, run folders). std::filesystem's own
// errors ("filesystem error: cannot create directories: Not a directory [runs/x]") name no
// setting and no fix; these functions and `path_error` turn them into siamese::Error that
// names the path, what is wrong with it and what to do.
#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

#include "siamese/common/error.h"

namespace siamese {

// What to do about the system error `code` met on a path.
inline std::string path_fix(const std::error_code& code) {
  switch (code.value()) {
    case ENOTDIR:
      return "a part of the path is a file where a folder must be: move or rename that file, or "
             "choose another path";
    case ELOOP:
      return "the path goes through a loop of symbolic links: point the link at a real file or "
             "folder (`ls -l` shows where each link points)";
    case EACCES:
    case EPERM:
      return "check the permissions of the path and of its folders (`ls -ld`), or choose a path "
             "you may use";
    case ENOENT:
      return "check the path";
    case ENOSPC:
    case EDQUOT:
      return "free disk space, or choose a path on a disk with room";
    case EROFS:
      return "the disk is mounted read-only: choose a path on a writable disk";
    case ENAMETOOLONG:
      return "shorten the path";
    case EISDIR:
      return "the path is a folder where a file must be: name a file";
    case EEXIST:
      return "move the existing entry away or choose another path";
    default:
      return "check the path and its folders";
  }
}

// A std::filesystem error as the project's Error: "PATH: cannot create directories: Not a
// directory", the fix for its cause, and no "filesystem error" preamble.
inline Error path_error(const std::filesystem::filesystem_error& e) {
  std::string what = e.what();
  const std::string preamble = "filesystem error: ";
  if (what.rfind(preamble, 0) == 0) what = what.substr(preamble.size());
  // libstdc++ appends " [path1] [path2]": the paths are named separately.
  if (const auto bracket = what.find(" ["); bracket != std::string::npos) what.resize(bracket);
  std::string where = e.path1().string();
  if (!e.path2().empty()) where += " -> " + e.path2().string();
  return Error(what, where, path_fix(e.code()));
}

// Creates `folder` and its parents, or throws an Error naming `role` (e.g. "save_folder")
// and the part of the path that is in the way: a file where a folder must be, a symbolic
// link loop, a folder without permission. Nothing is created when a part is in the way.
inline void create_folder(const std::filesystem::path& folder, const std::string& role) {
  namespace fs = std::filesystem;
  fs::path prefix;
  for (const auto& part : folder) {
    prefix /= part;
    std::error_code ec;
    const auto status = fs::status(prefix, ec);
    if (ec && ec.value() != ENOENT && ec.value() != ENOTDIR)
      throw Error(role + " cannot be used: " + prefix.string() + ": " + ec.message(), folder.string(),
                  path_fix(ec));
    if (status.type() == fs::file_type::not_found) break;
    if (status.type() != fs::file_type::directory) {
      const bool itself = prefix == folder || prefix / "" == folder;
      throw Error(
          itself ? role + " is a file, not a folder"
                 : role + " cannot be created: " + prefix.string() + " is a file, not a folder",
          folder.string(),
          itself ? "point " + role + " at a folder (a new or an existing one), or move the file away"
                 : "move or rename the file " + prefix.string() + ", or point " + role + " at another path");
    }
  }
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw Error(role + " cannot be created: " + ec.message(), folder.string(), path_fix(ec));
}

}  // namespace siamese
