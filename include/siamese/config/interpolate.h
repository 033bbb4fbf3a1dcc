#pragma once
// OmegaConf-style interpolation as OLMo configs use it:
//   ${run_name}, ${model.d_model}       the value of another key (resolved the same way)
//   ${oc.env:VAR} ${oc.env:VAR,default} an environment variable, with optional default
//   ${path.choose:a,b,...}              the first path that exists (else the last one)
//   ${path.glob:pattern,...}            the sorted files each pattern matches, in turn: a
//                                       list, so only as the whole value of a list key
//   \${                                 a literal "${"
// References may nest: ${oc.env:SLURM_JOB_ID,${run_name}}.
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace siamese::config {

// `lookup(key)` returns the resolved text of another key or throws siamese::Error.
// Throws siamese::Error (problem + fix, no location) on malformed text or a missing
// environment variable without default.
std::string interpolate(const std::string& text,
                        const std::function<std::string(const std::string& key)>& lookup);

// The files of `text` when it is exactly one ${path.glob:...} (a list key's whole value or
// item), else nullopt. Throws siamese::Error for a pattern that matches nothing.
std::optional<std::vector<std::string>> expand_glob(
    const std::string& text, const std::function<std::string(const std::string& key)>& lookup);

// Inverse of the escape: text that interpolates to exactly `literal`.
std::string escape_interpolation(const std::string& literal);

}  // namespace siamese::config
