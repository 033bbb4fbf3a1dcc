#include "siamese/data/arithmetic.h"

#include <algorithm>
#include <random>
#include <set>

namespace siamese::data {

namespace {

uint64_t operand_range(int digits) {
  uint64_t range = 1;
  for (int i = 0; i < digits; ++i) range *= 10;
  return range;
}

bool is_held_out(uint64_t a, uint64_t b, uint64_t range) {
  // A fixed mixing hash (splitmix64 finaliser) so the split does not depend on the seed.
  uint64_t z = a * range + b + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return (z ^ (z >> 31)) % 10 == 0;
}

ArithmeticProblem make(uint64_t a, uint64_t b) {
  return {std::to_string(a) + "+" + std::to_string(b) + "=", std::to_string(a + b)};
}

// Problems from `seed` whose held-out flag equals `held_out`, in draw order, until
// `want(problem)` returns false.
template <class Want>
void draw(uint64_t seed, int digits, bool held_out, Want want) {
  const uint64_t range = operand_range(digits);
  std::mt19937_64 rng(seed);
  for (;;) {
    const uint64_t a = rng() % range, b = rng() % range;
    if (is_held_out(a, b, range) != held_out) continue;
    if (!want(make(a, b))) return;
  }
}

std::vector<int64_t> stream(uint64_t seed, int digits, bool held_out, int64_t num_tokens) {
  std::vector<int64_t> out;
  out.reserve(num_tokens + 32);
  draw(seed, digits, held_out, [&](const ArithmeticProblem& p) {
    for (char c : p.prompt + p.answer + "\n") out.push_back(static_cast<unsigned char>(c));
    return static_cast<int64_t>(out.size()) < num_tokens;
  });
  out.resize(num_tokens);
  return out;
}

}  // namespace

std::vector<int64_t> arithmetic_train_tokens(uint64_t seed, int digits, int64_t num_tokens) {
  return stream(seed, digits, false, num_tokens);
}

std::vector<int64_t> arithmetic_held_out_tokens(uint64_t seed, int digits, int64_t num_tokens) {
  return stream(seed + 1, digits, true, num_tokens);
}

std::vector<ArithmeticProblem> arithmetic_held_out(uint64_t seed, int digits, int64_t count) {
  // Two-digit operands have only ~1000 held-out pairs: drawing more distinct ones than exist
  // would never end.
  const uint64_t range = operand_range(digits);
  if (range <= 1000) {
    int64_t available = 0;
    for (uint64_t a = 0; a < range; ++a)
      for (uint64_t b = 0; b < range; ++b) available += is_held_out(a, b, range);
    count = std::min(count, available);
  }
  std::vector<ArithmeticProblem> out;
  std::set<std::string> seen;
  draw(seed + 2, digits, true, [&](const ArithmeticProblem& p) {
    if (seen.insert(p.prompt).second) out.push_back(p);
    return static_cast<int64_t>(out.size()) < count;
  });
  return out;
}

}  // namespace siamese::data
