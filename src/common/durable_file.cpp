#include "siamese/common/durable_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace siamese {

namespace fs = std::filesystem;

namespace {

std::string free_space(const fs::path& folder) {
  struct statvfs v {};
  if (::statvfs(folder.empty() ? "." : folder.c_str(), &v) != 0) return "free space unknown";
  return fmt::format("{:.1f} MiB free", double(v.f_bavail) * double(v.f_frsize) / (1 << 20));
}

}  // namespace

Error write_error(const fs::path& file, int err, const std::string& fix) {
  return Error(fmt::format("cannot write: {} ({})", std::strerror(err), free_space(file.parent_path())),
               file.string(),
               fix.empty() ? "free disk space or write to a disk with room; a file this one was to replace "
                             "is untouched"
                           : fix);
}

void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw write_error(path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw write_error(path, err);
}

FileSink::FileSink(fs::path path, std::string fix, Mode mode, fs::path shown)
    : path_(std::move(path)), shown_(shown.empty() ? path_ : std::move(shown)), fix_(std::move(fix)) {
  const int how = mode == Mode::Append ? O_APPEND : O_TRUNC;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | how | O_CLOEXEC, 0644);
  if (fd_ < 0) error_ = errno;
}

void FileSink::check() const {
  if (error_ != 0) throw write_error(shown_, error_, fix_);
}

FileSink::~FileSink() {
  if (fd_ >= 0) ::close(fd_);
}

size_t FileSink::write(const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  for (size_t done = 0; error_ == 0 && done < n;) {
    const ssize_t w = ::write(fd_, p + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      error_ = w < 0 ? errno : ENOSPC;
    else
      done += static_cast<size_t>(w);
  }
  sha_.update(data, n);
  bytes_ += n;
  return n;
}

void FileSink::close() {
  if (error_ == 0 && ::fsync(fd_) != 0) error_ = errno;
  if (fd_ >= 0 && ::close(fd_) != 0 && error_ == 0) error_ = errno;
  fd_ = -1;
  check();
}

fs::path scratch_path(const fs::path& path, const std::string& tag) {
  return path.parent_path() / fmt::format(".{}.{}-{}", path.filename().string(), tag, ::getpid());
}

AtomicFile::AtomicFile(fs::path path, std::string fix)
    : path_(std::move(path)),
      sink_(scratch_path(path_, "tmp"), std::move(fix), FileSink::Mode::Truncate, path_) {}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  std::error_code ignored;
  fs::remove(sink_.path(), ignored);
}

void AtomicFile::commit() {
  sink_.close();
  if (::rename(sink_.path().c_str(), path_.c_str()) != 0) throw write_error(path_, errno);
  committed_ = true;
  fsync_path(path_.parent_path().empty() ? fs::path(".") : path_.parent_path());
}

AtomicOstream::AtomicOstream(const fs::path& path, std::string fix)
    : std::ostream(nullptr), file_(path, std::move(fix)), buffer_(file_) {
  rdbuf(&buffer_);
}

void AtomicOstream::commit() {
  flush();
  file_.commit();
}

AtomicOstream::Buffer::int_type AtomicOstream::Buffer::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  const char ch = traits_type::to_char_type(c);
  file_.write(&ch, 1);
  return c;
}

std::streamsize AtomicOstream::Buffer::xsputn(const char* s, std::streamsize n) {
  file_.write(s, static_cast<size_t>(n));
  return n;
}

void write_file_atomically(const fs::path& path, std::string_view contents, const std::string& fix) {
  AtomicFile file(path, fix);
  file.write(contents);
  file.commit();
}

}  // namespace siamese
