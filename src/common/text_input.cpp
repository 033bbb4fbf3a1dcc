#include "siamese/common/text_input.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "siamese/common/error.h"

namespace siamese {

namespace {
constexpr unsigned kChunk = 1 << 20;

// At the end of input zlib reports Z_BUF_ERROR when the file stopped inside a gzip stream:
// a cut download or copy, whose documents past the cut would otherwise vanish silently.
void check_complete(void* gz, const std::string& path) {
  int code = Z_OK;
  gzerror(static_cast<gzFile>(gz), &code);
  if (code == Z_BUF_ERROR)
    throw Error("gzip file is truncated (it ends inside its compressed stream)", path,
                "download or copy the file again (gzip -t checks it)");
}
// gzopen opens a folder and fails only at the first read ("Is a directory"), whose message
// would blame the gzip file: a folder or a missing file is named as such.
gzFile open_input(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error("input is a folder, not a file", path, "name the files in it one by one");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw Error(std::string("cannot open input: ") + std::strerror(errno), path, "check the path");
  return f;
}

}  // namespace

LineReader::LineReader(const std::string& path) : path_(path) {
  // gzopen reads uncompressed files transparently.
  gzFile f = open_input(path);
  gzbuffer(f, kChunk);
  gz_ = f;
}

LineReader::~LineReader() {
  if (gz_) gzclose(static_cast<gzFile>(gz_));
}

int64_t LineReader::file_offset() const { return gz_ ? gzoffset(static_cast<gzFile>(gz_)) : 0; }

bool LineReader::fill() {
  if (eof_) return false;
  if (pos_ > 0) {
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
  const size_t old = buffer_.size();
  buffer_.resize(old + kChunk);
  const int n = gzread(static_cast<gzFile>(gz_), buffer_.data() + old, kChunk);
  if (n < 0) {
    int code = 0;
    const char* msg = gzerror(static_cast<gzFile>(gz_), &code);
    throw Error(std::string("read failed: ") + msg, path_, "check that the gzip file is complete");
  }
  buffer_.resize(old + static_cast<size_t>(n));
  if (n == 0) {
    check_complete(gz_, path_);
    eof_ = true;
  }
  return n > 0;
}

bool LineReader::next(std::string& line) {
  for (;;) {
    const size_t nl = buffer_.find('\n', pos_);
    if (nl != std::string::npos) {
      line.assign(buffer_, pos_, nl - pos_);
      pos_ = nl + 1;
      ++line_number_;
      return true;
    }
    if (!fill()) {
      if (pos_ >= buffer_.size()) return false;
      line.assign(buffer_, pos_, std::string::npos);
      pos_ = buffer_.size();
      ++line_number_;
      unterminated_ = true;
      return true;
    }
  }
}

std::string read_text_file(const std::string& path) {
  gzFile f = open_input(path);
  gzbuffer(f, kChunk);
  std::string out;
  for (;;) {
    const size_t old = out.size();
    out.resize(old + kChunk);
    const int n = gzread(f, out.data() + old, kChunk);
    if (n < 0) {
      int code = 0;
      const std::string msg = gzerror(f, &code);
      gzclose(f);
      throw Error("read failed: " + msg, path, "check that the gzip file is complete");
    }
    out.resize(old + static_cast<size_t>(n));
    if (n == 0) {
      try {
        check_complete(f, path);
      } catch (...) {
        gzclose(f);
        throw;
      }
      break;
    }
  }
  gzclose(f);
  return out;
}

void for_each_jsonl(const std::string& path, const std::function<void(int64_t, const nlohmann::json&)>& fn,
                    bool skip_cut_last_line) {
  LineReader reader(path);
  std::string line;
  while (reader.next(line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      if (skip_cut_last_line && reader.unterminated()) {
        spdlog::warn("{}:{}: skipped the last line, cut short (by a kill?)", path, reader.line_number());
        return;
      }
      throw Error(std::string("not valid JSON: ") + e.what(),
                  path + ":" + std::to_string(reader.line_number()), "each line must be one JSON object");
    }
    if (!j.is_object()) {
      throw Error("JSON line is not an object", path + ":" + std::to_string(reader.line_number()),
                  "each line must be one JSON object");
    }
    fn(reader.line_number(), j);
  }
}

}  // namespace siamese
