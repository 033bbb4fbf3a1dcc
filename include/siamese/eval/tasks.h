#pragma once
// OLMo's zero-shot multiple-choice tasks (olmo/eval/downstream.py), read from the JSONL files
// in ../shared/evals (see its README for the provenance and the per-task formatting rules
// implemented in src/eval/tasks.cpp). A document becomes one (context, continuation) pair
// per answer option; WinoGrande has two contexts and one shared continuation.
#include <cstdint>
#include <string>
#include <vector>

namespace siamese::eval {

// How an option's log-likelihood becomes its score (README "shared mechanics"):
//   Acc      the summed log-likelihood of the continuation tokens;
//   LenNorm  that sum divided by the continuation's length in Unicode code points, not
//            counting its leading space;
//   PmiDc    that sum divided (OLMo divides, it does not subtract) by the sum given the
//            task's short domain-conditional context instead.
enum class Metric { Acc, LenNorm, PmiDc };
const char* metric_name(Metric m);  // "acc", "len_norm", "pmi_dc" as in OLMo's metric keys
Metric parse_metric(const std::string& name);

struct Option {
  std::string context;
  std::string continuation;
  std::string dc_context;  // the domain-conditional context, for PmiDc
};

struct Document {
  std::vector<Option> options;
  int64_t gold = 0;  // index into options
};

struct Task {
  std::string name;             // our name = the JSONL file stem, e.g. "openbookqa"
  std::string label;            // OLMo's label, e.g. "openbook_qa" (metric keys use it)
  Metric metric = Metric::Acc;  // OLMo's default metric for the task
  std::vector<Document> docs;
};

// The task names this module knows, in OLMo's order.
const std::vector<std::string>& task_names();

// Reads data_dir/<name>.jsonl (`name` may also be OLMo's label, e.g. openbook_qa); the first `limit`
// documents when limit >= 0. A malformed line (invalid JSON, a missing or ill-typed field, a gold key outside
// the options) throws siamese::Error naming "file:line".
Task load_task(const std::string& name, const std::string& data_dir, int64_t limit = -1);

// Number of Unicode code points in UTF-8 text (Python's len of the decoded string).
int64_t utf8_length(const std::string& text);

}  // namespace siamese::eval
