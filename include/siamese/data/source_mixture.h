#pragma once
// A weighted mixture of token sources (data.source_mixture): how many instances of each file
// the run trains on, computed as OLMo-core's SourceMixtureDatasetConfig.build (3.0.0,
// olmo_core/data/source_mixture.py), so that the same files and ratios give the same counts:
//   - a source of P tokens needs int(requested * target_ratio) of them, and may give at most
//     int(P * max_source_fraction * max_repetition_ratio), else the run is refused;
//   - each of its files gives ceil(tokens * take) with take = needed / P; a take above 1 lists
//     the files again, once per whole repetition and once for the rest;
//   - the counts are cut to instances of max_sequence_length, then topped up to whole global
//     batches of the run (ceil(requested / batch tokens) of them), evenly over the files with
//     room left, the last ones by largest remainder (Hamilton's method).
// Which instances of a file are taken is ours (OLMo-core segments documents): a seeded sample
// of its fixed-length chunks, all of them when the count is the file's.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "siamese/config/config.h"

namespace siamese::data {

// One occurrence of a file in the mixture (a repeated source lists its files again).
struct MixturePiece {
  int source = 0;  // index into MixturePlan::sources
  int path = 0;    // index into that source's paths
  int64_t file_tokens = 0;
  int64_t instances = 0;
};

struct MixturePlan {
  std::vector<config::MixtureSourceConfig> sources;
  std::vector<int64_t> population;  // tokens each source holds
  std::vector<MixturePiece> pieces;
  int64_t requested_tokens = 0;
  int64_t sequence_length = 0;

  int64_t instances_of(int source) const;
  // For run.json and the log: per source its ratio, population, instances and share.
  nlohmann::ordered_json to_json() const;
};

// `file_tokens[s][p]`: the tokens of sources[s].paths[p]. `requested_tokens`: the run's
// (max_duration in tokens, or steps times a global batch's tokens). Throws siamese::Error
// naming the source and the numbers when one cannot give its share.
MixturePlan plan_mixture(const std::vector<config::MixtureSourceConfig>& sources,
                         const std::vector<std::vector<int64_t>>& file_tokens, int64_t requested_tokens,
                         int64_t global_batch_tokens, int64_t sequence_length);

}  // namespace siamese::data
