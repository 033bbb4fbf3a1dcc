#pragma once
// Where a run's tokenizer is. A config names it by a path that is often relative to the folder
// training started in (../shared/tokenizers/...), so the trainer keeps a copy in the run
// folder, and commands that read a run (eval, generate, export) fall back to that copy: a run
// folder works from any folder and on another machine.
#include <filesystem>
#include <string>

#include "siamese/config/config.h"

namespace siamese::eval {

// The copy's name in a save folder (not tokenizer.json: a user's own file of that name in
// `save_folder: ./` stays untouched).
inline constexpr const char* kRunTokenizerFile = "siamese_tokenizer.json";

// Whether the run's text goes through a tokenizer: it trains on token files (data.paths), or
// names no built-in byte-level corpus (data.synthetic, used only when data.paths is empty).
bool uses_tokenizer(const config::DataConfig& data);

// Writes the copy when the run uses a tokenizer and
// tokenizer.identifier names a file; a copy with the same bytes is left alone.
void keep_run_tokenizer(const std::filesystem::path& save_folder, const config::DataConfig& data,
                        const config::TokenizerConfig& tokenizer);

// The tokenizer file of a checkpoint whose config is `config_file` (<run>/step<N>/config.yaml):
// `override_path` (--tokenizer) if given, else tokenizer.identifier where it exists, else the
// run folder's copy. "" for byte-level runs (!uses_tokenizer) without an override. A missing
// file is an Error naming where its path came from.
std::string run_tokenizer_path(const config::DataConfig& data, const config::TokenizerConfig& tokenizer,
                               const std::string& config_file, const std::string& override_path);

}  // namespace siamese::eval
