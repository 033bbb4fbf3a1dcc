#pragma once
// Effective speedup (`siamese report --baseline MODEL`): a run's loss gain over the baseline
// converted to the compute the baseline would need for that loss, times the run's measured
// throughput relative to the baseline's. It reads as "the baseline would need this many times
// the wall-clock time to reach this loss", so a method that learns more per token but runs
// slower per token is charged for both. docs/analysis.md, "Effective speedup", states the
// method and its limits.
//
// Compute axis: C = tokens x flops_per_token of the run's shape (PaLM's count, model/accounting.h).
// That count depends on the shape only, not on the residual topology, so for any run it is what
// the baseline spends on the same tokens at the same size; a topology's extra work shows in its
// tokens/s, not in C.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "siamese/runs/run_summary.h"

namespace siamese::runs {

// L(C) = e + a * (C / c0)^-alpha, least squares on the loss. e = 0 is the pure power law.
// c0 is the baseline's own compute, so a is its reducible loss and the numbers stay O(1).
struct PowerLaw {
  double e = 0, a = 0, alpha = 0, c0 = 1;
  bool saturating = false;      // e was fitted (else fixed at 0)
  double c_min = 0, c_max = 0;  // compute range of the points fitted
  int points = 0;
  double rms = 0;  // root mean square residual of the loss at the points

  double loss_at(double compute) const;
  // The compute at which the curve reaches `loss`; none at or below the asymptote e.
  std::optional<double> compute_for(double loss) const;
};

// Fits (compute, loss) points, one per compute budget. With 4 or more budgets the saturating
// form (3 parameters, 1+ degrees of freedom left); with 2 or 3 the pure power law, since three
// points fix three parameters exactly and leave nothing to tell a fit from noise. Throws
// siamese::Error (naming `where`) for fewer than 2 budgets or a loss that does not fall with
// compute.
PowerLaw fit_power_law(const std::vector<double>& compute, const std::vector<double>& loss,
                       const std::string& where);

struct SpeedupOptions {
  std::string baseline;        // a model as the report names it ("pre")
  std::string loss = "train";  // "train" or an lm evaluator's label (its last perplexity, as a loss)
};

struct LadderPoint {
  double compute = 0, loss = 0;  // loss: the mean over its seeds
  int runs = 0;
  std::string model;  // as the report names it ("pre+250")
};

// Where a row's compute-equivalent lies against the fit.
enum class FitRange { Inside, Above, Below, BelowAsymptote };

struct SpeedupRow {
  std::string model;
  std::optional<double> learning_rate;
  int runs = 0, diverged = 0;
  int unfinished = 0;                        // runs short of their planned length, left out
  double loss = NAN;                         // mean over the seeds that did not diverge
  double compute = NAN;                      // mean C of those seeds
  std::optional<double> compute_equivalent;  // the baseline's C at that loss (none below e)
  FitRange range = FitRange::Inside;
  std::optional<double> multiplier;        // compute_equivalent / compute
  std::optional<double> throughput_ratio;  // mean tokens/s over the baseline's
  std::optional<double> speedup;           // multiplier x throughput_ratio
  // The per-seed speedups' lowest and highest, over seeds with both numbers (each seed's loss
  // and tokens/s against the baseline's mean tokens/s).
  std::optional<double> seed_low, seed_high;
  int seeds_below_asymptote = 0;
  std::string throughput_note;  // why throughput_ratio is missing, when it is
};

struct SpeedupTable {
  std::string baseline, loss;
  std::optional<double> learning_rate;
  PowerLaw fit;
  std::vector<LadderPoint> ladder;  // ascending compute
  double baseline_tokens_per_second = NAN;
  std::vector<SpeedupRow> rows;  // the baseline first, then the other models in report order
};

// The distinct compute budgets (FLOPs per token x tokens) that runs of `baseline`'s topology
// and learning rate trained at (its ladder's rungs are models of their own, pre+250): an
// effective speedup needs two or more.
size_t baseline_budgets(const std::vector<RunSummary>& runs, const std::string& baseline);

// The ladder is every run of the baseline's topology and learning rate whose settings equal
// the baseline's apart from the seed, its name and folder, and the settings that set compute
// (max_duration and the model's width, depth, heads and MLP size); each budget's seed-mean loss
// is one point. Runs named by name_models. Throws siamese::Error naming --baseline or
// --speedup-loss when the baseline is not among `runs`, ran at several learning rates, or
// lacks the loss asked for.
SpeedupTable effective_speedup(const std::vector<RunSummary>& runs, const SpeedupOptions& options);

std::string markdown_speedup(const SpeedupTable& table);
std::string speedup_json(const SpeedupTable& table);

}  // namespace siamese::runs
