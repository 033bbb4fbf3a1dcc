#include "siamese/eval/run_tokenizer.h"

#include <fmt/format.h>

#include <fstream>
#include <iterator>

#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"

namespace siamese::eval {

namespace fs = std::filesystem;

namespace {

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

bool uses_tokenizer(const config::DataConfig& data) {
  return !data.paths.empty() || data.synthetic == config::SyntheticCorpus::None;
}

void keep_run_tokenizer(const fs::path& save_folder, const config::DataConfig& data,
                        const config::TokenizerConfig& tokenizer) {
  const std::string& source = tokenizer.identifier;
  if (!uses_tokenizer(data) || source.empty() || !fs::is_regular_file(source)) return;
  const fs::path copy = save_folder / kRunTokenizerFile;
  const std::string bytes = read_bytes(source);
  if (fs::exists(copy) && read_bytes(copy) == bytes) return;
  write_file_atomically(copy, bytes);
}

std::string run_tokenizer_path(const config::DataConfig& data, const config::TokenizerConfig& tokenizer,
                               const std::string& config_file, const std::string& override_path) {
  if (!override_path.empty()) {
    if (!fs::is_regular_file(override_path))
      throw Error(fmt::format("tokenizer file \"{}\" not found", override_path), "--tokenizer",
                  "pass --tokenizer PATH/tokenizer.json");
    return override_path;
  }
  if (!uses_tokenizer(data)) return "";
  const std::string& named = tokenizer.identifier;
  if (!named.empty() && fs::is_regular_file(named)) return named;
  // config_file is <run>/step<N>/config.yaml; the copy sits in <run>.
  const fs::path step_dir = fs::path(config_file).parent_path();
  for (const fs::path& folder : {step_dir.parent_path(), step_dir}) {
    const fs::path copy = folder / kRunTokenizerFile;
    if (fs::is_regular_file(copy)) return copy.string();
  }
  throw Error(
      fmt::format("tokenizer file \"{}\" not found (relative paths are read from the current folder), "
                  "and the run folder holds no {}",
                  named, kRunTokenizerFile),
      config_file + " (tokenizer.identifier)",
      "pass --tokenizer PATH/tokenizer.json, or run from the folder training started in");
}

}  // namespace siamese::eval
