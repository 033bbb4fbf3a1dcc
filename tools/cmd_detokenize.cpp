// `siamese detokenize`: prints the text of a token file, for inspecting tokenized data.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "siamese/common/error.h"
#include "siamese/tokenizer/token_file.h"
#include "siamese/tokenizer/tokenizer.h"

namespace siamese::cli {

namespace {

struct DetokenizeArgs {
  std::string tokenizer;
  std::string tokens;
  std::string dtype;
  bool show_special = false;
  bool split_documents = false;
  int64_t offset = 0;
  int64_t limit = -1;
};

bool file_exists(const std::string& path) { return static_cast<bool>(std::ifstream(path)); }

int run_detokenize(const DetokenizeArgs& a) {
  using namespace siamese::tokenizer;
  const Tokenizer tok = Tokenizer::from_file(a.tokenizer);
  std::string dtype = a.dtype;
  int32_t eos = tok.default_eos_id().value_or(-1);
  if (file_exists(sidecar_path(a.tokens))) {
    const TokenFileInfo info = read_sidecar(a.tokens);
    if (!dtype.empty() && dtype != info.dtype) {
      throw Error("--dtype " + dtype + " disagrees with the sidecar's " + info.dtype, a.tokens);
    }
    dtype = info.dtype;
    eos = info.eos_id;
    if (!info.tokenizer_sha256.empty() && info.tokenizer_sha256 != tok.sha256()) {
      std::cerr << "warning: " << a.tokens << " was made with tokenizer " << info.tokenizer << " (sha256 "
                << info.tokenizer_sha256.substr(0, 12) << "), not " << tok.name() << "\n";
    }
  } else if (dtype.empty()) {
    throw Error("no sidecar " + sidecar_path(a.tokens) + " to give the dtype", a.tokens,
                "pass --dtype uint16 or --dtype uint32");
  }
  const std::vector<int32_t> ids = read_raw_tokens(a.tokens, dtype, a.offset, a.limit);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= tok.vocab_size())
      throw Error(fmt::format("token {} (at position {}) is not in the tokenizer's vocabulary of {}", ids[i],
                              a.offset + int64_t(i), tok.vocab_size()),
                  a.tokens, "detokenize with the tokenizer the file was made with (its sidecar names it)");
  if (!a.split_documents) {
    std::cout << tok.decode(ids, !a.show_special);
    if (!a.show_special) std::cout << "\n";
    return 0;
  }
  std::vector<int32_t> doc;
  int64_t n = 0;
  const auto print = [&](bool ended) {
    std::cout << "=== document " << n++ << (ended ? "" : " (continues)") << " ===\n"
              << tok.decode(doc, !a.show_special) << "\n";
    doc.clear();
  };
  for (int32_t id : ids) {
    if (id == eos)
      print(true);
    else
      doc.push_back(id);
  }
  if (!doc.empty()) print(false);
  return 0;
}

}  // namespace

void add_detokenize_command(CLI::App& app, Handler& run) {
  auto args = std::make_shared<DetokenizeArgs>();
  auto* cmd = app.add_subcommand("detokenize", "Print the text of a token file");
  cmd->add_option("--tokenizer", args->tokenizer, "HuggingFace tokenizer.json")->required();
  cmd->add_option("tokens", args->tokens,
                  "token file (its sidecar TOKENS.json, e.g. train.npy.json, gives the dtype)")
      ->required();
  cmd->add_option("--dtype", args->dtype, "uint16 or uint32, for files without a sidecar")
      ->check(CLI::IsMember({"uint16", "uint32"}));
  cmd->add_flag("--show-special", args->show_special,
                "keep special tokens (skipped by default, as OLMo decodes)");
  cmd->add_flag("--documents", args->split_documents, "cut at the EOS id and print a header per document");
  cmd->add_option("--offset", args->offset, "first token to print")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--limit", args->limit, "number of tokens to print (default: all)")
      ->check(CLI::PositiveNumber);
  cmd->callback([&run, args] { run = [args] { return run_detokenize(*args); }; });
}

}  // namespace siamese::cli
