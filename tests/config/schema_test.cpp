#include "siamese/config/schema.h"

#include <gtest/gtest.h>

#include <set>

namespace siamese {
namespace {

std::string section_of(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

// to_yaml opens each section once, so a section's keys must be adjacent in the table.
template <class Root>
void expect_unique_keys_and_contiguous_sections(const std::vector<config::schema::Field<Root>>& fields) {
  std::set<std::string> keys, closed;
  std::string current;
  for (const auto& f : fields) {
    EXPECT_TRUE(keys.insert(f.key).second) << "duplicate schema key " << f.key;
    EXPECT_FALSE(f.doc.empty()) << f.key;
    const std::string section = section_of(f.key);
    for (std::string s = current; !s.empty() && section.rfind(s, 0) != 0; s = section_of(s)) closed.insert(s);
    EXPECT_EQ(closed.count(section), 0u) << f.key << " reopens section " << section;
    current = section;
  }
}

TEST(Schema, KeysAreUniqueDocumentedAndGroupedBySection) {
  expect_unique_keys_and_contiguous_sections(config::schema::train_fields());
  expect_unique_keys_and_contiguous_sections(config::schema::evaluator_fields());
}

TEST(Schema, IgnoredKeysAreNotAlsoValidKeys) {
  for (const auto& k : config::schema::ignored_train_keys())
    for (const auto& f : config::schema::train_fields())
      EXPECT_TRUE(f.key != k.key && f.key.rfind(k.key + ".", 0) != 0) << k.key;
}

}  // namespace
}  // namespace siamese
