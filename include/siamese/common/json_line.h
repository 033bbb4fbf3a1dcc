#pragma once
// One line of a JSON Lines log (metrics.jsonl), written by nlohmann-json and spaced as
// {"step": 12, "loss": 3.25, "norms": [1.5, null]}: keys and strings escaped by the
// library, floats in the shortest text that reads back to the same bits, NaN and inf as
// null (JSON has no literal for them).
#include <string>

#include <nlohmann/json.hpp>

namespace siamese {

std::string json_line(const nlohmann::ordered_json& value);

}  // namespace siamese
