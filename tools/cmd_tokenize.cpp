// `siamese tokenize`: text / JSONL (optionally .gz) to OLMo-style token files, or, with
// --encode-jsonl, one {"ids": [...]} line per input line for checks against other tokenizers.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>

#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "progress_bar.h"
#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "siamese/tokenizer/tokenize_corpus.h"

namespace siamese::cli {

namespace {

struct TokenizeArgs {
  std::string tokenizer;
  std::vector<std::string> inputs;
  std::string output;
  std::string encode_jsonl;
  std::string format = "auto";
  std::string on_error = "stop";
  std::string text_field = "text";
  bool doc_per_line = false;
  int32_t eos_id = -1;
  int threads = 2;
  bool force = false;
};

// The folder -o names is created, as every other output's is (write_output).
void create_output_folder(const std::string& output) {
  const auto folder = std::filesystem::path(output).parent_path();
  std::error_code ec;
  if (!folder.empty() && !std::filesystem::create_directories(folder, ec) && ec)
    throw write_error(folder, ec.value(), "pass -o in a folder that can be created and written");
}

int run_tokenize(const TokenizeArgs& a) {
  using namespace siamese::tokenizer;
  const Tokenizer tok = Tokenizer::from_file(a.tokenizer);
  if (!a.output.empty()) create_output_folder(a.output);
  if (!a.encode_jsonl.empty()) {
    if (a.output.empty()) {
      encode_jsonl(tok, a.encode_jsonl, std::cout, a.text_field);
      return 0;
    }
    check_output_path(a.output, {a.encode_jsonl}, {}, a.force);
    AtomicOstream out(a.output);
    encode_jsonl(tok, a.encode_jsonl, out, a.text_field);
    out.commit();
    return 0;
  }
  if (a.inputs.empty())
    throw Error("no inputs", "siamese tokenize", "name input files, or use --encode-jsonl");
  if (a.output.empty()) throw Error("no output", "siamese tokenize", "pass -o OUT.npy");
  TokenizeOptions o;
  o.inputs = a.inputs;
  o.output = a.output;
  o.format = a.format == "text"    ? InputFormat::Text
             : a.format == "jsonl" ? InputFormat::Jsonl
                                   : InputFormat::Auto;
  o.doc_per_line = a.doc_per_line;
  o.text_field = a.text_field;
  if (a.eos_id >= 0) o.eos_id = a.eos_id;
  o.on_error = a.on_error == "skip" ? OnError::Skip : OnError::Stop;
  o.threads = a.threads;
  o.force = a.force;
  std::optional<ProgressBar> bar;  // the total is known once the inputs are opened
  const auto started = std::chrono::steady_clock::now();
  o.progress = [&](int64_t done, int64_t total, int64_t tokens) {
    if (total <= 0) return;  // inputs without a size (a pipe): no bar
    if (!bar) bar.emplace("tokenize", total, "MB", 1e6, started);
    bar->update(done, fmt::format(", {} tokens", tokens));
  };
  const TokenizeReport r = tokenize_corpus(tok, o);
  const auto& i = r.info;
  std::cout << "wrote " << a.output << " (" << i.dtype << ") and " << sidecar_path(a.output) << "\n"
            << "tokenizer: " << i.tokenizer << " sha256 " << i.tokenizer_sha256.substr(0, 12) << " eos_id "
            << i.eos_id << "\n"
            << "documents: " << i.documents << ", skipped: " << i.skipped_documents
            << ", tokens: " << i.tokens << "\n";
  std::printf(
      "throughput: %.2f MB in %.2f s = %.2f MB/s (%d threads, %.0f tokens/s); "
      "%.2f CPU s = %.2f MB per CPU second\n",
      i.input_bytes / 1e6, r.seconds, r.megabytes_per_second(), a.threads,
      r.seconds > 0 ? i.tokens / r.seconds : 0.0, r.cpu_seconds, r.megabytes_per_cpu_second());
  return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, Handler& run) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd =
      app.add_subcommand("tokenize",
                         "Tokenize text/JSONL (.gz ok) into an OLMo token file (raw uint16/uint32) plus an "
                         "OUT.npy.json sidecar; EOS after each document");
  cmd->add_option("--tokenizer", args->tokenizer, "HuggingFace tokenizer.json")->required();
  cmd->add_option("inputs", args->inputs,
                  "input files: plain text (one document per file, or per line with "
                  "--doc-per-line) or JSONL (.jsonl/.json/.ndjson, optionally .gz)");
  cmd->add_option("-o,--output", args->output, "token file to write (e.g. data/train.npy)");
  cmd->add_option("--encode-jsonl", args->encode_jsonl,
                  "check mode: write {\"ids\": [...]} per {\"text\": ...} line (stdout or -o)");
  cmd->add_option("--text-field", args->text_field, "JSONL field holding the text")->capture_default_str();
  cmd->add_flag("--doc-per-line", args->doc_per_line,
                "plain text: each non-blank line is a document (default: each file is one)");
  cmd->add_option("--format", args->format, "input format")
      ->check(CLI::IsMember({"auto", "text", "jsonl"}))
      ->capture_default_str();
  cmd->add_option("--eos-id", args->eos_id,
                  "id appended after each document (default: 50279 for OLMo's NeoX file, "
                  "else the id of <|endoftext|>)");
  cmd->add_option("--on-error", args->on_error, "malformed documents: stop, or skip and count")
      ->check(CLI::IsMember({"stop", "skip"}))
      ->capture_default_str();
  cmd->add_flag("--force", args->force, "replace an existing output file");
  cmd->add_option("--threads", args->threads, "encoding threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->callback([&run, args] { run = [args] { return run_tokenize(*args); }; });
}

}  // namespace siamese::cli
