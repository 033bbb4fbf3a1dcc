#pragma once
// Text corpora to token files (the `siamese tokenize` command), as OLMo/Dolma data is made:
// each document is encoded without special tokens and followed by the EOS id, unless its last
// id already is the EOS id (OLMo's Tokenizer.encode rule; with OLMo-1B's EOS 50279 that is a
// document ending in the literal "|||IP_ADDRESS|||").
//
// Documents: a plain text file is one document (or one per non-blank line with
// doc_per_line, the line without its '\n'); a JSONL file gives one document per non-blank
// line from the string field `text_field`. Inputs may be gzip-compressed. Malformed input
// (invalid UTF-8, a JSONL line that is not a JSON object, a missing or non-string text
// field) is reported as "file:line: problem" and, by policy, either skipped and counted or
// fatal; on a fatal error no output file is left behind.
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "siamese/tokenizer/token_file.h"
#include "siamese/tokenizer/tokenizer.h"

namespace siamese::tokenizer {

enum class InputFormat { Auto, Text, Jsonl };  // Auto: ".jsonl"/".json"(+".gz") is JSONL
enum class OnError { Stop, Skip };

struct TokenizeOptions {
  std::vector<std::string> inputs;
  std::string output;
  InputFormat format = InputFormat::Auto;
  bool doc_per_line = false;
  std::string text_field = "text";
  std::optional<int32_t> eos_id;  // unset: Tokenizer::default_eos_id()
  OnError on_error = OnError::Stop;
  int threads = 2;
  bool force = false;  // replace an existing output
  // Hears (input bytes read, input bytes in all, tokens written) after each batch of
  // documents; bytes are the files' sizes on disk (compressed for .gz).
  std::function<void(int64_t, int64_t, int64_t)> progress;
};

struct InputProblem {
  std::string where;  // "file:line"
  std::string what;
};

struct TokenizeReport {
  TokenFileInfo info;                  // what the sidecar says
  std::vector<InputProblem> problems;  // the first 100 skipped documents
  double seconds = 0;                  // wall time, reading to rename
  double cpu_seconds = 0;              // CPU time of all threads over the same span
  double megabytes_per_second() const { return seconds > 0 ? info.input_bytes / 1e6 / seconds : 0; }
  // Throughput per busy core: on a shared machine, wall time measures the other tenants.
  double megabytes_per_cpu_second() const {
    return cpu_seconds > 0 ? info.input_bytes / 1e6 / cpu_seconds : 0;
  }
};

// Refuses (siamese::Error) an output, or one of the files written beside it, that is one of
// the inputs, or that exists already unless `force`.
void check_output_path(const std::string& output, const std::vector<std::string>& inputs,
                       const std::vector<std::string>& also_written, bool force);

// Throws siamese::Error ("file:line: ..." for input problems under OnError::Stop). The output
// is written to a temporary file and renamed into place only when complete.
TokenizeReport tokenize_corpus(const Tokenizer& tokenizer, const TokenizeOptions& options);

// The check mode: one line {"ids": [...]} per non-blank input line {"<text_field>": ...}, in
// order, no special tokens added. Malformed lines throw siamese::Error naming file and line.
// Returns the number of lines written.
int64_t encode_jsonl(const Tokenizer& tokenizer, const std::string& input, std::ostream& out,
                     const std::string& text_field = "text");

}  // namespace siamese::tokenizer
