#pragma once
// The one way this project writes a file. Every write(2) is checked, the data is fsynced
// before the file counts, and a file that replaces another is written under a temporary
// name and renamed over it, so a full disk, a kill or a crash leaves either the old file
// whole or the new one whole, never a mix or a cut file. A failure is a siamese::Error that
// names the file, the system's reason and the free space on its disk.
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>

#include "siamese/common/error.h"
#include "siamese/common/sha256.h"

namespace siamese {

// The Error for a failed write of `file` (errno `err`), with the free space of its folder.
// `fix` says what the user should do; the default suits any file that replaces an old one.
Error write_error(const std::filesystem::path& file, int err, const std::string& fix = "");

// fsync of a file or a folder (a folder's fsync makes a rename in it durable).
void fsync_path(const std::filesystem::path& path);

// A file written through write(2), its size and sha256 counted on the way. write() reports
// success even after a failed write and close() raises the first error: LibTorch's archive
// writer must never see a short write, since it then aborts the process from a destructor
// instead of throwing. Writes `path` in place: use it inside a folder that is itself
// renamed into place (checkpoints), else use AtomicFile.
class FileSink {
 public:
  enum class Mode { Truncate, Append };
  // Errors name `shown` when given (the final name of a file written under a temporary one).
  explicit FileSink(std::filesystem::path path, std::string fix = "", Mode mode = Mode::Truncate,
                    std::filesystem::path shown = {});
  ~FileSink();
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  size_t write(const void* data, size_t n);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Throws the first write error so far (a log that must not drop lines checks each one).
  void check() const;
  // fsyncs and closes; throws the first write error.
  void close();
  uint64_t bytes() const { return bytes_; }
  // Hex sha256 of everything written; call once, after close().
  std::string sha256() { return sha_.hex(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_, shown_;
  std::string fix_;
  int fd_ = -1;
  int error_ = 0;
  uint64_t bytes_ = 0;
  Sha256 sha_;
};

// A file that appears at `path` whole or not at all: written to `.<name>.tmp-<pid>` beside
// it, then commit() fsyncs it, renames it over `path` and fsyncs the folder. Destroyed
// without commit() (an exception on the way), it removes the temporary file and leaves
// whatever was at `path` untouched.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path, std::string fix = "");
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  size_t write(const void* data, size_t n) { return sink_.write(data, n); }
  void write(std::string_view text) { sink_.write(text); }
  void check() const { sink_.check(); }
  void commit();

 private:
  std::filesystem::path path_;
  FileSink sink_;
  bool committed_ = false;
};

// An AtomicFile behind a std::ostream, for code that writes to streams; commit() as above.
class AtomicOstream : public std::ostream {
 public:
  explicit AtomicOstream(const std::filesystem::path& path, std::string fix = "");
  void commit();

 private:
  class Buffer : public std::streambuf {
   public:
    explicit Buffer(AtomicFile& file) : file_(file) {}

   protected:
    int_type overflow(int_type c) override;
    std::streamsize xsputn(const char* s, std::streamsize n) override;

   private:
    AtomicFile& file_;
  };
  AtomicFile file_;
  Buffer buffer_;
};

// AtomicFile in one call.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents,
                           const std::string& fix = "");

// The name of a scratch entry beside `path` for this process: `.<name>.<tag>-<pid>`.
std::filesystem::path scratch_path(const std::filesystem::path& path, const std::string& tag);

}  // namespace siamese
