#pragma once
// Reading text inputs: plain or gzip-compressed files (recognised by their magic bytes, so
// the name does not matter), whole or line by line, and JSON Lines. Shared by the tokenize
// command, the eval tasks (JSONL) and the metrics reader.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace siamese {

// Reads a file line by line; lines are returned without their '\n' (a '\r' before it is
// kept). Throws siamese::Error naming the file when it cannot be opened or decompressed.
class LineReader {
 public:
  explicit LineReader(const std::string& path);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  bool next(std::string& line);
  int64_t line_number() const { return line_number_; }  // 1-based number of the last line
  int64_t file_offset() const;  // bytes of the file itself read so far (compressed for .gz)
  const std::string& path() const { return path_; }
  // The last line returned ended the file without a '\n' (a writer may have been cut off).
  bool unterminated() const { return unterminated_; }

 private:
  bool fill();
  std::string path_;
  void* gz_ = nullptr;  // gzFile
  std::string buffer_;
  size_t pos_ = 0;
  bool eof_ = false;
  bool unterminated_ = false;
  int64_t line_number_ = 0;
};

// The whole (decompressed) content of a file.
std::string read_text_file(const std::string& path);

// Calls `fn(line_number, object)` for every non-blank line of a JSONL file. A line that is
// not valid JSON or not an object throws siamese::Error "path:line: ...", except, with
// `skip_cut_last_line`, a last line without its '\n' that a killed writer left half-written
// (skipped with a warning: logs appended to while running).
void for_each_jsonl(const std::string& path, const std::function<void(int64_t, const nlohmann::json&)>& fn,
                    bool skip_cut_last_line = false);

}  // namespace siamese
