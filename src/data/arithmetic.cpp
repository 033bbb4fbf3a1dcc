#include "siamese/data/arithmetic.h"

#include <random>
#include <set>

namespace siamese::data {

namespace {

constexpr uint64_t kOperandRange = 1000;  // operands 0..999

bool is_held_out(uint64_t a, uint64_t b) {
  // A fixed mixing hash (splitmix64 finaliser) so the split does not depend on the seed.
  uint64_t z = a * kOperandRange + b + 0x9e3779b97f4a7c15ULL;
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
void draw(uint64_t seed, bool held_out, Want want) {
  std::mt19937_64 rng(seed);
  for (;;) {
    const uint64_t a = rng() % kOperandRange, b = rng() % kOperandRange;
    if (is_held_out(a, b) != held_out) continue;
    if (!want(make(a, b))) return;
  }
}

std::vector<int64_t> stream(uint64_t seed, bool held_out, int64_t num_tokens) {
  std::vector<int64_t> out;
  out.reserve(num_tokens + 16);
  draw(seed, held_out, [&](const ArithmeticProblem& p) {
    for (char c : p.prompt + p.answer + "\n") out.push_back(static_cast<unsigned char>(c));
    return static_cast<int64_t>(out.size()) < num_tokens;
  });
  out.resize(num_tokens);
  return out;
}

}  // namespace

std::vector<int64_t> arithmetic_train_tokens(uint64_t seed, int64_t num_tokens) {
  return stream(seed, false, num_tokens);
}

std::vector<int64_t> arithmetic_held_out_tokens(uint64_t seed, int64_t num_tokens) {
  return stream(seed + 1, true, num_tokens);
}

std::vector<ArithmeticProblem> arithmetic_held_out(uint64_t seed, int64_t count) {
  std::vector<ArithmeticProblem> out;
  std::set<std::string> seen;
  draw(seed + 2, true, [&](const ArithmeticProblem& p) {
    if (seen.insert(p.prompt).second) out.push_back(p);
    return static_cast<int64_t>(out.size()) < count;
  });
  return out;
}

}  // namespace siamese::data
