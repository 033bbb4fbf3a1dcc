#pragma once
// A model variant as one word: TOPOLOGY[:dotted.key=value...], e.g. "pre",
// "pre:model.layer_norm_type=dyt" or "hybrid_pre:optimizer.name=muon". `siamese bench
// --compare` and sweep files' `topologies` lists take these, so a norm type or an optimizer
// is compared and swept exactly like a topology.
#include <string>
#include <vector>

namespace siamese::config {

struct Variant {
  std::string topology;
  std::vector<std::string> overrides;  // "--dotted.key=value", in the order written
  std::string name;                    // for folders and labels: "pre+dyt", "hybrid_pre+muon"
};

// `where` names the option or file line in the error for a malformed entry.
Variant parse_variant(const std::string& entry, const std::string& where);

}  // namespace siamese::config
