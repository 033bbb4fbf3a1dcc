#include "siamese/common/npy.h"

#include <cstring>
#include <fstream>
#include <regex>

#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"

namespace siamese {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

struct Descr {
  const char* code;
  torch::ScalarType type;
};
constexpr Descr kDescrs[] = {
    {"<f4", torch::kFloat}, {"<f8", torch::kDouble}, {"<i4", torch::kInt}, {"<i8", torch::kLong}};

std::string header_value(const std::string& header, const std::string& key, const std::string& pattern,
                         const std::string& path) {
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'" + key + "'\\s*:\\s*" + pattern)))
    throw Error("NPY header has no readable '" + key + "': " + header, path,
                "write the file with numpy.save");
  return m[1];
}

}  // namespace

torch::Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open file", path, "check the path");
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 6) != 0)
    throw Error("not an NPY file (bad magic)", path, "write the file with numpy.save");
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  unsigned char len_bytes[4] = {0, 0, 0, 0};
  if (!in.read(reinterpret_cast<char*>(len_bytes), major == 1 ? 2 : 4))
    throw Error("NPY header is truncated", path, "re-create the file");
  header_len = len_bytes[0] | (len_bytes[1] << 8) | (len_bytes[2] << 16) | (uint32_t(len_bytes[3]) << 24);
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) throw Error("NPY header is truncated", path, "re-create the file");

  const std::string descr = header_value(header, "descr", "'([^']*)'", path);
  const Descr* found = nullptr;
  for (const auto& d : kDescrs)
    if (descr == d.code) found = &d;
  if (!found) {
    // Floats stay floats, everything else becomes int64; big-endian becomes little-endian.
    const bool floating = descr.size() > 1 && (descr[1] == 'f' || descr[1] == 'c');
    const std::string target =
        floating ? (descr.size() > 2 && descr.substr(2) == "8" ? "<f8" : "<f4") : "<i8";
    throw Error("unsupported NPY dtype '" + descr + "' (need <f4, <f8, <i4 or <i8)", path,
                "convert it in place with numpy: python3 -c \"import numpy as np; np.save('" + path +
                    "', np.load('" + path + "').astype('" + target + "'))\"");
  }
  if (header_value(header, "fortran_order", "(True|False)", path) == "True")
    throw Error("NPY array is in Fortran order", path, "save it with numpy.ascontiguousarray");
  std::vector<int64_t> shape;
  const std::string dims = header_value(header, "shape", "\\(([^)]*)\\)", path);
  static const std::regex number("\\d+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), number); it != std::sregex_iterator(); ++it)
    shape.push_back(std::stoll(it->str()));

  auto t = torch::empty(shape, torch::dtype(found->type));
  const auto bytes = static_cast<std::streamsize>(t.numel() * t.element_size());
  if (!in.read(static_cast<char*>(t.data_ptr()), bytes))
    throw Error("NPY data is shorter than its shape " + dims + " needs", path, "re-create the file");
  return t;
}

void write_npy(const std::string& path, const torch::Tensor& t) {
  const Descr* found = nullptr;
  for (const auto& d : kDescrs)
    if (t.scalar_type() == d.type) found = &d;
  if (!found)
    throw Error(std::string("cannot write dtype ") + c10::toString(t.scalar_type()) + " to NPY", path,
                "convert to float32, float64, int32 or int64 first");
  auto c = t.detach().to(torch::kCPU).contiguous();
  std::string shape;
  for (int64_t i = 0; i < c.dim(); ++i) shape += std::to_string(c.size(i)) + (i + 1 < c.dim() ? ", " : "");
  if (c.dim() == 1) shape += ",";
  std::string header =
      std::string("{'descr': '") + found->code + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  // Pad with spaces so the data starts on a 64-byte boundary, newline-terminated.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char preamble[4] = {1, 0, static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  AtomicFile out(path);
  out.write(kMagic, 6);
  out.write(preamble, 4);
  out.write(header);
  out.write(c.data_ptr(), static_cast<size_t>(c.numel() * c.element_size()));
  out.commit();
}

}  // namespace siamese
