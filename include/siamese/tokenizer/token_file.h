#pragma once
// Token files as OLMo reads them (memmap convention): a headerless little-endian array of
// token ids, uint16 when every id fits (max id < 65536), else uint32. Despite the usual
// ".npy" name there is no NPY header; data.memmap_dtype must name the dtype.
//
// Next to TOKENS sits the sidecar TOKENS + ".json" (e.g. train.npy.json; sidecar_path()), one
// JSON object:
//   "format"            "siamese-tokens-v1"
//   "dtype"             "uint16" | "uint32"
//   "tokens"            number of ids in the file (file size / dtype width)
//   "documents"         documents written, each followed by "eos_id" (see tokenize_corpus.h)
//   "skipped_documents" malformed documents left out (--on-error skip)
//   "eos_id"            id appended after each document
//   "tokenizer"         tokenizer name (file name without .json)
//   "tokenizer_sha256"  sha256 of the tokenizer.json bytes
//   "vocab_size"        HF get_vocab_size(with_added_tokens=true)
//   "input_bytes"       UTF-8 bytes of text tokenized
//   "sources"           input paths, in order
// Both files are written under temporary names and renamed only on commit(), so a failed
// run leaves neither a partial token file nor a stale sidecar paired with new tokens.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "siamese/common/durable_file.h"

namespace siamese::tokenizer {

struct TokenFileInfo {
  std::string dtype;
  int64_t tokens = 0;
  int64_t documents = 0;
  int64_t skipped_documents = 0;
  int32_t eos_id = -1;
  std::string tokenizer;
  std::string tokenizer_sha256;
  int64_t vocab_size = 0;
  int64_t input_bytes = 0;
  std::vector<std::string> sources;
};

std::string sidecar_path(const std::string& token_path);
// "uint16" when ids up to `max_id` fit in 16 bits, else "uint32".
std::string dtype_for(int32_t max_id);

class TokenFileWriter {
 public:
  TokenFileWriter(std::string path, std::string dtype);
  ~TokenFileWriter();  // without commit(), the file at `path` (if any) is untouched
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  void append(const int32_t* ids, size_t n);
  int64_t tokens() const { return tokens_; }
  // Flushes, writes the sidecar (with info.tokens and info.dtype filled in) and renames both
  // into place.
  void commit(TokenFileInfo info);

 private:
  std::string path_, dtype_;
  std::unique_ptr<AtomicFile> file_;
  int64_t tokens_ = 0;
  std::vector<unsigned char> buffer_;
};

TokenFileInfo read_sidecar(const std::string& token_path);
// Ids [offset, offset + count) of a raw token file of `dtype` (count < 0: to the end), for
// files with or without a sidecar.
std::vector<int32_t> read_raw_tokens(const std::string& token_path, const std::string& dtype,
                                     int64_t offset = 0, int64_t count = -1);
// All ids of a token file, dtype from its sidecar. Throws siamese::Error if the file size
// disagrees with the sidecar's token count.
std::vector<int32_t> read_token_file(const std::string& token_path, TokenFileInfo* info = nullptr);

}  // namespace siamese::tokenizer
