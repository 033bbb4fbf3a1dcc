#include "siamese/tokenizer/token_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"

namespace siamese::tokenizer {

namespace {

int width_of(const std::string& dtype) {
  if (dtype == "uint16") return 2;
  if (dtype == "uint32") return 4;
  throw Error("unsupported token dtype '" + dtype + "'", "", "use uint16 or uint32");
}

}  // namespace

std::string sidecar_path(const std::string& token_path) { return token_path + ".json"; }

std::string dtype_for(int32_t max_id) { return max_id < 65536 ? "uint16" : "uint32"; }

TokenFileWriter::TokenFileWriter(std::string path, std::string dtype)
    : path_(std::move(path)), dtype_(std::move(dtype)) {
  width_of(dtype_);
  file_ = std::make_unique<AtomicFile>(path_, "free disk space or write the token file to a disk with room");
  file_->check();
}

TokenFileWriter::~TokenFileWriter() = default;

void TokenFileWriter::append(const int32_t* ids, size_t n) {
  const int width = width_of(dtype_);
  const uint32_t limit = width == 2 ? 0xFFFFu : 0xFFFFFFFFu;
  buffer_.resize(n * width);
  for (size_t i = 0; i < n; ++i) {
    const auto v = static_cast<uint32_t>(ids[i]);
    if (ids[i] < 0 || v > limit) {
      throw Error("token id " + std::to_string(ids[i]) + " does not fit " + dtype_, path_);
    }
    for (int b = 0; b < width; ++b) buffer_[i * width + b] = static_cast<unsigned char>(v >> (8 * b));
  }
  file_->write(buffer_.data(), buffer_.size());
  file_->check();
  tokens_ += static_cast<int64_t>(n);
}

void TokenFileWriter::commit(TokenFileInfo info) {
  info.dtype = dtype_;
  info.tokens = tokens_;
  const nlohmann::json j = {{"format", "siamese-tokens-v1"},
                            {"dtype", info.dtype},
                            {"tokens", info.tokens},
                            {"documents", info.documents},
                            {"skipped_documents", info.skipped_documents},
                            {"eos_id", info.eos_id},
                            {"tokenizer", info.tokenizer},
                            {"tokenizer_sha256", info.tokenizer_sha256},
                            {"vocab_size", info.vocab_size},
                            {"input_bytes", info.input_bytes},
                            {"sources", info.sources}};
  // The sidecar's temporary copy is complete before the tokens move into place, so the two
  // renames are the only window in which they can disagree.
  AtomicFile sidecar(sidecar_path(path_));
  sidecar.write(j.dump(2) + "\n");
  file_->commit();
  sidecar.commit();
}

TokenFileInfo read_sidecar(const std::string& token_path) {
  const std::string path = sidecar_path(token_path);
  std::ifstream in(path);
  if (!in) {
    throw Error("missing sidecar", path,
                "token files written by `siamese tokenize` have one; pass --dtype otherwise");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  TokenFileInfo info;
  try {
    const auto j = nlohmann::json::parse(ss.str());
    info.dtype = j.at("dtype").get<std::string>();
    info.tokens = j.at("tokens").get<int64_t>();
    info.documents = j.at("documents").get<int64_t>();
    info.skipped_documents = j.value("skipped_documents", int64_t{0});
    info.eos_id = j.value("eos_id", -1);
    info.tokenizer = j.value("tokenizer", "");
    info.tokenizer_sha256 = j.value("tokenizer_sha256", "");
    info.vocab_size = j.value("vocab_size", int64_t{0});
    info.input_bytes = j.value("input_bytes", int64_t{0});
    info.sources = j.value("sources", std::vector<std::string>{});
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("malformed sidecar: ") + e.what(), path);
  }
  return info;
}

std::vector<int32_t> read_raw_tokens(const std::string& token_path, const std::string& dtype, int64_t offset,
                                     int64_t count) {
  const int width = width_of(dtype);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(token_path, ec) && std::filesystem::exists(token_path, ec))
    throw Error("token file is not a regular file (a folder or a device)", token_path,
                "name a token file written by `siamese tokenize`");
  std::ifstream in(token_path, std::ios::binary | std::ios::ate);
  if (!in)
    throw Error(std::string("cannot open token file: ") + std::strerror(errno), token_path, "check the path");
  const auto size = static_cast<int64_t>(in.tellg());
  if (size % width != 0) {
    throw Error("file size " + std::to_string(size) + " is not a multiple of " + dtype + "'s " +
                    std::to_string(width) + " bytes",
                token_path, "check the dtype (--dtype) or re-run `siamese tokenize`");
  }
  const int64_t total = size / width;
  offset = std::min(std::max<int64_t>(offset, 0), total);
  const int64_t n = count < 0 ? total - offset : std::min(count, total - offset);
  std::vector<unsigned char> bytes(static_cast<size_t>(n * width));
  in.seekg(offset * width);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw Error("read failed", token_path);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (size_t i = 0; i < ids.size(); ++i) {
    uint32_t v = 0;
    for (int b = 0; b < width; ++b) v |= static_cast<uint32_t>(bytes[i * width + b]) << (8 * b);
    ids[i] = static_cast<int32_t>(v);
  }
  return ids;
}

std::vector<int32_t> read_token_file(const std::string& token_path, TokenFileInfo* info) {
  const TokenFileInfo meta = read_sidecar(token_path);
  std::vector<int32_t> ids = read_raw_tokens(token_path, meta.dtype);
  if (static_cast<int64_t>(ids.size()) != meta.tokens) {
    throw Error("file has " + std::to_string(ids.size()) + " tokens but the sidecar says " +
                    std::to_string(meta.tokens),
                token_path, "re-run `siamese tokenize`; the file is incomplete or was modified");
  }
  if (info) *info = meta;
  return ids;
}

}  // namespace siamese::tokenizer
