#include "siamese/data/source_mixture.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "siamese/common/error.h"

namespace siamese::data {

namespace {

// Python's int() of a float: towards zero.
int64_t trunc_int(double x) { return static_cast<int64_t>(std::trunc(x)); }

std::string where(const config::MixtureSourceConfig& s, size_t i) {
  return fmt::format("data.source_mixture[{}] ({})", i, s.source_name);
}

}  // namespace

int64_t MixturePlan::instances_of(int source) const {
  int64_t n = 0;
  for (const auto& p : pieces)
    if (p.source == source) n += p.instances;
  return n;
}

nlohmann::ordered_json MixturePlan::to_json() const {
  int64_t total = 0;
  for (const auto& p : pieces) total += p.instances;
  auto out = nlohmann::ordered_json::array();
  for (size_t s = 0; s < sources.size(); ++s) {
    const int64_t n = instances_of(int(s));
    out.push_back({{"source_name", sources[s].source_name},
                   {"target_ratio", sources[s].target_ratio},
                   {"population_tokens", population[s]},
                   {"instances", n},
                   {"tokens", n * sequence_length},
                   {"share", total ? double(n) / double(total) : 0.0},
                   {"paths", sources[s].paths}});
  }
  return out;
}

MixturePlan plan_mixture(const std::vector<config::MixtureSourceConfig>& sources,
                         const std::vector<std::vector<int64_t>>& file_tokens, int64_t requested_tokens,
                         int64_t global_batch_tokens, int64_t sequence_length) {
  MixturePlan plan{sources, {}, {}, requested_tokens, sequence_length};
  for (size_t s = 0; s < sources.size(); ++s) {
    const auto& src = sources[s];
    const int64_t population = std::accumulate(file_tokens[s].begin(), file_tokens[s].end(), int64_t{0});
    plan.population.push_back(population);
    const int64_t needed = trunc_int(double(requested_tokens) * src.target_ratio);
    const int64_t most = trunc_int(double(population) * src.max_source_fraction * src.max_repetition_ratio);
    if (population == 0 || most < needed)
      throw Error(fmt::format("source {} must give {} tokens (target_ratio {} of the run's {}) but can give "
                              "{}: it holds {} tokens, x max_source_fraction {} x max_repetition_ratio {}",
                              src.source_name, needed, src.target_ratio, requested_tokens, most, population,
                              src.max_source_fraction, src.max_repetition_ratio),
                  where(src, s),
                  population == 0
                      ? std::string("give it token files that hold tokens")
                      : fmt::format("raise its max_repetition_ratio to at least {:.2f}, add files to it, "
                                    "lower its target_ratio or train fewer tokens",
                                    std::ceil(100.0 * double(needed) /
                                              (double(population) * src.max_source_fraction)) /
                                        100.0));
    // One pass over the files per whole repetition, then one for the rest.
    std::vector<double> takes;
    const double take = double(needed) / double(population);
    if (take > 1)
      for (double left = take; left > 0; left -= std::min(1.0, left)) takes.push_back(std::min(1.0, left));
    else
      takes.push_back(take);
    for (const double t : takes)
      for (size_t p = 0; p < file_tokens[s].size(); ++p)
        plan.pieces.push_back(
            {int(s), int(p), file_tokens[s][p], int64_t(std::ceil(double(file_tokens[s][p]) * t))});
  }

  // `instances` holds each piece's token count until here; now whole instances, topped up.
  const int64_t T = sequence_length;
  const auto steps = int64_t(std::ceil(double(requested_tokens) / double(global_batch_tokens)));
  const int64_t requested_instances = steps * (global_batch_tokens / T);
  std::vector<double> remainders;
  int64_t total = 0;
  for (auto& piece : plan.pieces) {
    const int64_t cap = piece.file_tokens / T, tokens = piece.instances;
    piece.instances = std::min(tokens / T, cap);
    remainders.push_back(piece.instances < cap ? double(tokens % T) / double(T) : 0.0);
    total += piece.instances;
  }
  const auto room = [&](size_t i) { return plan.pieces[i].instances < plan.pieces[i].file_tokens / T; };
  std::vector<size_t> eligible;
  for (size_t i = 0; i < plan.pieces.size(); ++i)
    if (room(i)) eligible.push_back(i);
  if (requested_instances > total && !eligible.empty()) {
    const int64_t base = (requested_instances - total) / int64_t(eligible.size());
    for (const size_t i : eligible) {
      const int64_t add = std::min(base, plan.pieces[i].file_tokens / T - plan.pieces[i].instances);
      plan.pieces[i].instances += add;
      total += add;
    }
    // Largest remainders first; equal ones, the later piece first (Python's reverse sort of
    // (remainder, index) pairs).
    std::vector<std::pair<double, size_t>> candidates;
    for (const size_t i : eligible)
      if (room(i)) candidates.push_back({remainders[i], i});
    std::sort(candidates.rbegin(), candidates.rend());
    for (size_t k = 0; k < candidates.size() && total < requested_instances; ++k, ++total)
      ++plan.pieces[candidates[k].second].instances;
  }
  return plan;
}

}  // namespace siamese::data
