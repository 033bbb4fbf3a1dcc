#include "siamese/data/mapped_tokens.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "siamese/common/error.h"

namespace siamese::data {

int dtype_width(const std::string& dtype) {
  if (dtype == "uint8") return 1;
  if (dtype == "uint16") return 2;
  if (dtype == "uint32") return 4;
  if (dtype == "uint64") return 8;
  throw Error("unknown memmap_dtype '" + dtype + "'", "data.memmap_dtype",
              "use uint8, uint16, uint32 or uint64");
}

namespace {

constexpr std::string_view kNpyMagic = "\x93NUMPY";

// Returns the byte offset of the array data in an NPY file and checks its dtype.
size_t npy_data_offset(const unsigned char* bytes, size_t n, const std::string& path,
                       const std::string& dtype) {
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
  const std::string descr = "<u" + std::to_string(dtype_width(dtype));
  const std::string descr1 = "|u1";
  const bool ok = header.find("'" + descr + "'") != std::string::npos ||
                  (dtype == "uint8" && header.find("'" + descr1 + "'") != std::string::npos);
  if (!ok)
    throw Error("NPY dtype does not match data.memmap_dtype=" + dtype + " (header: " + header + ")",
                path, "set data.memmap_dtype to the file's dtype");
  if (header.find("'fortran_order': True") != std::string::npos)
    throw Error("NPY file is in Fortran order", path, "save a 1-D C-order array");
  return prefix + header_len;
}

}  // namespace

MappedTokens::MappedTokens(std::string path, const std::string& dtype)
    : path_(std::move(path)), width_(dtype_width(dtype)) {
  const int fd = ::open(path_.c_str(), O_RDONLY);
  if (fd < 0)
    throw Error(std::string("cannot open token file: ") + std::strerror(errno), path_,
                "check data.paths (tokenize text with `siamese tokenize`)");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size == 0) {
    ::close(fd);
    throw Error("token file is empty", path_, "re-tokenize the corpus or drop it from data.paths");
  }
  map_bytes_ = static_cast<size_t>(st.st_size);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error(std::string("mmap failed: ") + std::strerror(errno), path_);
  }
  const auto* bytes = static_cast<const unsigned char*>(map_);
  size_t offset = 0;
  if (map_bytes_ >= kNpyMagic.size() &&
      std::memcmp(bytes, kNpyMagic.data(), kNpyMagic.size()) == 0)
    offset = npy_data_offset(bytes, map_bytes_, path_, dtype);
  const size_t data_bytes = map_bytes_ - offset;
  if (data_bytes % width_ != 0)
    throw Error("token file is truncated: " + std::to_string(data_bytes) +
                    " bytes is not a multiple of " + std::to_string(width_) + " (" + dtype + ")",
                path_, "check data.memmap_dtype or re-tokenize (the file was cut mid-token)");
  if (data_bytes == 0) throw Error("token file has no tokens", path_, "re-tokenize the corpus");
  tokens_ = bytes + offset;
  num_tokens_ = static_cast<int64_t>(data_bytes / width_);
  // Instances are read in shuffled order; tell the kernel not to read ahead.
  ::madvise(map_, map_bytes_, MADV_RANDOM);
}

MappedTokens::~MappedTokens() {
  if (map_) ::munmap(map_, map_bytes_);
}

MappedTokens::MappedTokens(MappedTokens&& other) noexcept
    : path_(std::move(other.path_)),
      map_(other.map_),
      map_bytes_(other.map_bytes_),
      tokens_(other.tokens_),
      width_(other.width_),
      num_tokens_(other.num_tokens_) {
  other.map_ = nullptr;
}

void MappedTokens::copy_to(int64_t* dst, int64_t start, int64_t n) const {
  // Token files are little-endian, as is every platform this builds on.
  const unsigned char* p = tokens_ + start * width_;
  switch (width_) {
    case 1:
      for (int64_t i = 0; i < n; ++i) dst[i] = p[i];
      break;
    case 2:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        dst[i] = v;
      }
      break;
    case 4:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        dst[i] = v;
      }
      break;
    default:
      for (int64_t i = 0; i < n; ++i) {
        uint64_t v;
        std::memcpy(&v, p + 8 * i, 8);
        dst[i] = static_cast<int64_t>(v);
      }
  }
}

}  // namespace siamese::data
