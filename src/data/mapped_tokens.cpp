#include "siamese/data/mapped_tokens.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string_view>
#include <vector>

#include "siamese/common/error.h"
#include "siamese/tokenizer/token_file.h"

namespace siamese::data {

namespace {

constexpr std::string_view kNpyMagic = "\x93NUMPY";

// numpy's name of an NPY descr: "<f4" float32, ">u2" uint16 (big-endian), "<i8" int64.
std::string numpy_name(const std::string& descr) {
  if (descr.size() < 3) return "'" + descr + "'";
  static const std::map<char, std::string> kinds = {
      {'u', "uint"}, {'i', "int"}, {'f', "float"}, {'b', "bool"}, {'c', "complex"}};
  const auto kind = kinds.find(descr[1]);
  const int bits = std::atoi(descr.c_str() + 2) * 8;
  if (kind == kinds.end() || bits == 0) return "'" + descr + "'";
  return kind->second + (kind->second == "bool" ? "" : std::to_string(bits)) +
         (descr[0] == '>' ? " big-endian" : "");
}

// Token ids are little-endian unsigned integers of data.memmap_dtype's width. Another
// unsigned width is a setting to change; anything else (float32, int64, big-endian) needs
// the file converted, which the fix spells out as a command that works.
void check_npy_dtype(const std::string& header, const std::string& path, config::TokenDtype token_dtype) {
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr'\\s*:\\s*'([^']*)'")))
    throw Error("NPY header has no dtype (header: " + header + ")", path,
                "re-create the file with numpy.save");
  const std::string descr = m[1];
  const std::string dtype = name_of(token_dtype);
  const int width = int(config::token_bytes(token_dtype));
  const bool little_unsigned = descr.size() == 3 && descr[1] == 'u' && (descr[0] == '<' || descr[0] == '|') &&
                               (descr[2] == '1' || descr[2] == '2' || descr[2] == '4' || descr[2] == '8');
  if (little_unsigned && descr[2] - '0' == width) return;
  if (little_unsigned) {
    const std::string held = "uint" + std::to_string((descr[2] - '0') * 8);
    throw Error("the file holds " + held + " tokens ('" + descr + "'), data.memmap_dtype is " + dtype, path,
                "set data.memmap_dtype: " + held);
  }
  const std::string target = "<u" + std::to_string(width);
  const std::string out = (std::filesystem::path(path).parent_path() /
                           (std::filesystem::path(path).stem().string() + "." + dtype + ".npy"))
                              .string();
  const bool fractional = descr.size() > 1 && (descr[1] == 'f' || descr[1] == 'c');
  throw Error(
      "token ids must be little-endian unsigned integers (data.memmap_dtype " + dtype + ", '" + target +
          "'), the file holds " + numpy_name(descr) + " ('" + descr + "')",
      path,
      fmt::format(
          "convert it with numpy, then use {} in data.paths: python3 -c \"import numpy as np; "
          "a = np.load('{}'); assert a.min() >= 0 and a.max() < 2**{}{}; np.save('{}', a.astype('{}'))\" "
          "(or re-run `siamese tokenize` on the text; a tokenizer with 65536 ids or more needs "
          "data.memmap_dtype: uint32)",
          out, path, width * 8, fractional ? " and (a == a.round()).all()" : "", out, target));
}

// Returns the byte offset of the array data in an NPY file and checks its dtype.
size_t npy_data_offset(const unsigned char* bytes, size_t n, size_t n_file, const std::string& path,
                       config::TokenDtype token_dtype) {
  if (n < 10) throw Error("NPY header is truncated", path, "re-create the file");
  const int major = bytes[6];
  size_t header_len = 0, prefix = 0;
  if (major == 1) {
    header_len = bytes[8] | (bytes[9] << 8);
    prefix = 10;
  } else {
    if (n < 12) throw Error("NPY header is truncated", path, "re-create the file");
    header_len = bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (size_t(bytes[11]) << 24);
    prefix = 12;
  }
  if (prefix + header_len > n) throw Error("NPY header is truncated", path, "re-create the file");
  const std::string header(reinterpret_cast<const char*>(bytes + prefix), header_len);
  check_npy_dtype(header, path, token_dtype);
  if (header.find("'fortran_order': True") != std::string::npos)
    throw Error("NPY file is in Fortran order", path, "save a 1-D C-order array");
  // The element count the header promises must be what the file holds: a header that
  // promises more would otherwise be trained on as if the rest were there.
  const size_t shape_at = header.find("'shape':");
  const size_t open = header.find('(', shape_at), close = header.find(')', open);
  if (shape_at == std::string::npos || open == std::string::npos || close == std::string::npos)
    throw Error("NPY header has no shape (header: " + header + ")", path,
                "re-create the file with numpy.save");
  uint64_t elements = 1;
  std::stringstream dims(header.substr(open + 1, close - open - 1));
  for (std::string dim; std::getline(dims, dim, ',');) {
    if (dim.find_first_not_of(' ') == std::string::npos) continue;
    try {
      elements *= std::stoull(dim);
    } catch (const std::exception&) {
      throw Error("NPY header has a shape that is not a list of sizes (header: " + header + ")", path,
                  "re-create the file with numpy.save");
    }
  }
  const uint64_t held = (n_file - prefix - header_len) / config::token_bytes(token_dtype);
  if (elements != held)
    throw Error(
        "NPY header promises " + std::to_string(elements) + " tokens, the file holds " + std::to_string(held),
        path, "re-create the file (it was cut short or its header was changed)");
  return prefix + header_len;
}

}  // namespace

MappedTokens::MappedTokens(std::string path, config::TokenDtype token_dtype)
    : path_(std::move(path)), width_(int(config::token_bytes(token_dtype))) {
  const std::string dtype = name_of(token_dtype);
  // stat before open: opening a FIFO for reading would block until a writer appears.
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0)
    throw Error(std::string("cannot open token file: ") + std::strerror(errno), path_,
                "check data.paths (tokenize text with `siamese tokenize`)");
  if (!S_ISREG(st.st_mode))
    throw Error(S_ISDIR(st.st_mode) ? "token file is a directory"
                                    : "token file is not a regular file "
                                      "(a FIFO, socket or device)",
                path_, "list token files in data.paths (tokenize text with `siamese tokenize`)");
  fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0 || ::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    throw Error(std::string("cannot open token file: ") + std::strerror(err), path_,
                "check data.paths (tokenize text with `siamese tokenize`)");
  }
  file_bytes_ = static_cast<size_t>(st.st_size);
  if (file_bytes_ == 0)
    throw Error("token file is empty", path_, "re-tokenize the corpus or drop it from data.paths");
  unsigned char head[4096];
  const ssize_t head_bytes = ::pread(fd_, head, sizeof head, 0);
  if (head_bytes < 0) throw Error(std::string("cannot read token file: ") + std::strerror(errno), path_);
  size_t offset = 0;
  if (size_t(head_bytes) >= kNpyMagic.size() && std::memcmp(head, kNpyMagic.data(), kNpyMagic.size()) == 0) {
    std::vector<unsigned char> header(head, head + head_bytes);
    if (head_bytes == sizeof head) {  // a v2 header may be longer than one page
      header.resize(std::min<size_t>(file_bytes_, 1 << 20));
      if (::pread(fd_, header.data(), header.size(), 0) != ssize_t(header.size()))
        throw Error("cannot read the NPY header", path_, "re-create the file");
    }
    offset = npy_data_offset(header.data(), header.size(), file_bytes_, path_, token_dtype);
  }
  const size_t data_bytes = file_bytes_ - offset;
  if (data_bytes % width_ != 0)
    throw Error("token file is truncated: " + std::to_string(data_bytes) + " bytes is not a multiple of " +
                    std::to_string(width_) + " (" + dtype + ")",
                path_, "check data.memmap_dtype or re-tokenize (the file was cut mid-token)");
  if (data_bytes == 0) throw Error("token file has no tokens", path_, "re-tokenize the corpus");
  data_offset_ = offset;
  num_tokens_ = static_cast<int64_t>(data_bytes / width_);
  // A file `siamese tokenize` wrote says in its sidecar what it holds.
  const std::string sidecar = tokenizer::sidecar_path(path_);
  if (std::filesystem::exists(sidecar)) {
    const auto info = tokenizer::read_sidecar(path_);
    if (info.dtype != dtype)
      throw Error("the sidecar says the tokens are " + info.dtype + ", but data.memmap_dtype is " + dtype,
                  sidecar, "set data.memmap_dtype: " + info.dtype);
    if (info.tokens != num_tokens_)
      throw Error("the sidecar says " + std::to_string(info.tokens) + " tokens, the file holds " +
                      std::to_string(num_tokens_),
                  path_, "re-tokenize: the file changed after `siamese tokenize` wrote it");
  }
  // Instances are read in shuffled order; tell the kernel not to read ahead.
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
}

MappedTokens::~MappedTokens() {
  if (fd_ >= 0) ::close(fd_);
}

MappedTokens::MappedTokens(MappedTokens&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(other.fd_),
      file_bytes_(other.file_bytes_),
      data_offset_(other.data_offset_),
      width_(other.width_),
      num_tokens_(other.num_tokens_) {
  other.fd_ = -1;
}

void MappedTokens::copy_to(int64_t* dst, int64_t start, int64_t n) const {
  // The raw tokens are read into the front of dst, then widened in place from the back:
  // element i's 8 bytes only cover raw bytes of elements already widened.
  auto* raw = reinterpret_cast<unsigned char*>(dst);
  const size_t want = static_cast<size_t>(n) * width_;
  size_t got = 0;
  while (got < want) {
    const ssize_t r =
        ::pread(fd_, raw + got, want - got, static_cast<off_t>(data_offset_ + start * width_ + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      struct stat st {};
      const bool shrank = ::fstat(fd_, &st) == 0 && size_t(st.st_size) < file_bytes_;
      throw Error(
          shrank ? fmt::format("token file shrank from {} to {} bytes while in use", file_bytes_, st.st_size)
                 : fmt::format("cannot read tokens {}..{}: {}", start, start + n,
                               r < 0 ? std::strerror(errno) : "unexpected end of file"),
          path_, "do not modify token files while a run reads them; restore the file and resume");
    }
    got += static_cast<size_t>(r);
  }
  // Token files are little-endian, as is every platform this builds on.
  auto widen = [&](auto type_tag) {
    using U = decltype(type_tag);
    for (int64_t i = n - 1; i >= 0; --i) {
      U v;
      std::memcpy(&v, raw + sizeof(U) * i, sizeof(U));
      dst[i] = static_cast<int64_t>(v);
    }
  };
  switch (width_) {
    case 1:
      return widen(uint8_t{});
    case 2:
      return widen(uint16_t{});
    case 4:
      return widen(uint32_t{});
    default:
      return widen(uint64_t{});
  }
}

}  // namespace siamese::data
