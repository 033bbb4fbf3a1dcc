#pragma once
// What `siamese report` and the plots read from a run's metrics.jsonl (written by the
// trainer and by `siamese eval`); nothing here re-derives a number the trainer logged.
//
// Stability markers (docs/analysis.md):
//   diverged  a step logged a non-finite loss or gradient ("event": "nonfinite", or a null
//             loss), or the final training loss is above the run's initial loss (its first
//             logged training step: a run that blew up and stayed up ends worse than the
//             untrained model it started from, whatever the vocabulary), or above
//             `diverge_loss` when one is given;
//   spikes    steps the trainer flagged with "loss_spike": true (loss above
//             loss_spike_factor x the running median of the previous losses).
// States (state_text): never started (no training step logged), finished (the last logged
// step is the planned length from run.json, or config.yaml's max_duration in steps),
// stopped at N of M, diverged at step N (non-finite) / diverged (final loss X > threshold), or "N steps"
// when the planned length is unknown.
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "siamese/config/schema.h"

namespace siamese::runs {

struct RunSummary {
  std::string run;  // folder
  std::string topology;
  // What the tables call the run's model: the topology, then " key=value" for each setting
  // that tells runs of one topology apart in the same report (name_models), e.g.
  // "pre layer_norm_type=dyt".
  std::string model;
  std::map<std::string, std::string> settings;  // every schema key of the config read below
  std::optional<double> learning_rate;
  std::optional<int64_t> seed;
  int64_t steps = 0;               // last logged training step
  int64_t tokens = 0;              // tokens at that step
  double initial_loss = NAN;       // loss of the first logged training step
  double final_loss = NAN;         // mean training loss of the last `final_window` logged steps
  double diverge_threshold = NAN;  // the final loss above which this run counts as diverged
  bool nonfinite = false;
  std::optional<int64_t> nonfinite_step;  // the first non-finite step
  std::optional<int64_t> max_steps;       // the planned length (run.json)
  int64_t spikes = 0;
  bool diverged = false;
  std::map<std::string, double> eval_perplexity;   // lm evaluator label -> last perplexity
  std::map<std::string, double> eval_exact_match;  // arithmetic evaluator label -> last exact match
  double train_seconds = 0;                        // sum of the logged steps' step_seconds
  int64_t timed_steps = 0;                         // logged steps with a step time
  std::map<std::string, double> downstream;        // "eval/downstream/<label>_<metric>" -> last
  // Downstream metrics whose last value came from `siamese eval --limit N`: key -> N.
  std::map<std::string, int64_t> downstream_limit;
  // Runs trained at once while this one trained, when a sweep trained it (sweep.h,
  // SweepRecord): above 1, its steps/s measured a share of the cores.
  std::optional<int> concurrent_runs;
  // Training FLOPs per token of the run's shape (model::flops_per_token), from its config.
  double flops_per_token = NAN;
  // Where the step times were measured (run.json): tokens/s compare only on one host with
  // one thread count.
  std::string host;
  std::optional<int64_t> intra_op_threads;
  // The CPU's name (run.json): a run's digits hold on that kind of CPU and thread count.
  std::string cpu;
  // Resumes that changed settings, in order: the values each segment of the run trained
  // with (the config read above holds only the last segment's).
  using SettingChange = config::schema::SettingChange;
  struct Resume {
    int64_t step;
    std::vector<SettingChange> changed;
  };
  std::vector<Resume> resumes;
  // Rows of metrics.jsonl skipped because a value has a type no writer gives it (a loss that is
  // a string): the count, and the first few named by line, key and value.
  struct DamagedRow {
    int64_t line;
    std::string key, value;
  };
  int64_t damaged_rows = 0;
  std::vector<DamagedRow> damaged;
  std::string metrics_path;  // for naming those rows
};

struct SummaryOptions {
  std::optional<double> diverge_loss;  // unset: the run's initial loss is the threshold
  int64_t final_window = 20;
};

// Reads run_dir/metrics.jsonl, run.json and, for topology / learning rate / seed, the
// config.yaml of the newest step<N> checkpoint; the learning rate is the first segment's when
// a resume changed it (the resumes list the rest). A folder without metrics is a run that never
// started; a missing folder or a line that is not JSON throws siamese::Error "file:line". A row
// whose values have the wrong types is skipped, counted and named (with a warning), so the
// state and losses are those of the good rows.
RunSummary summarize_run(const std::string& run_dir, const SummaryOptions& options = {});

std::string state_text(const RunSummary& run);

// Training tokens per second over the logged step times (NaN without them).
double tokens_per_second(const RunSummary& run);

// Names each run's model among `runs`: a setting that differs between two runs of the same
// topology (other than seed, learning rate, run name and folder) is part of the model, so
// pre and pre with DyT norms, or AdamW and Muon, get rows and seed groups of their own. A
// run's key=value of such a setting is appended unless the value is the one most of `runs`
// share.
void name_models(std::vector<RunSummary>& runs);

// Table 1 of the paper as markdown: one row per run, columns for final training loss /
// perplexity, each lm evaluator's perplexity (and exact match where one was logged), each
// downstream metric and their average, training steps per second (training time only,
// evaluation and checkpoints excluded; left out for runs that shared the cores with other
// runs) and the stability marker; notes below say what is marked.
std::string markdown_table(const std::vector<RunSummary>& runs);

// Runs of the same model and learning rate (different seeds) as one row each, in the order
// of `runs`: mean, standard deviation (n - 1) and n of the final training loss, of every lm
// evaluator's perplexity and exact match; diverged runs are counted, not averaged.
std::string markdown_seed_table(const std::vector<RunSummary>& runs);
// The same groups as CSV: mean, sd and n columns per metric.
std::string seed_csv(const std::vector<RunSummary>& runs);
// Every other model against `baseline` at the same learning rate and tokens, paired over the
// seeds both ran without diverging: the mean difference of their final training losses with its 95%
// t-interval (n - 1 degrees of freedom over the pairs), and the seeds. Empty when no run pairs.
std::string markdown_paired_table(const std::vector<RunSummary>& runs, const std::string& baseline);

// Every run's fields as a JSON array (for plots) and as CSV (one row per run).
std::string runs_json(const std::vector<RunSummary>& runs);
std::string runs_csv(const std::vector<RunSummary>& runs);

}  // namespace siamese::runs
