#include "siamese/runs/effective_speedup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "siamese/common/error.h"

namespace siamese::runs {

namespace {

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? NAN : sum / double(v.size());
}

// Settings that may differ between the baseline and its ladder: per-run identity, what sets
// the compute of a run (its length and its shape), and where a decay branch of one stable
// WSD run starts and how long it decays (each branch is a budget: train/decay_branch.h).
const std::set<std::string> kLadderFree = {
    "seed",          "data.seed",     "run_name",         "save_folder",     "max_duration",
    "model.d_model", "model.n_heads", "model.n_layers",   "model.mlp_ratio", "model.mlp_hidden_size",
    "load_path",     "decay_from",    "scheduler.t_decay"};

// Least squares of L = e + a z over the points for fixed z, e >= 0; the squared error, or
// infinity when the best a is not positive (a loss that does not fall with compute).
double fit_linear(const std::vector<double>& z, const std::vector<double>& loss, double& e, double& a) {
  const double zm = mean(z), lm = mean(loss);
  double szz = 0, szl = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    szz += (z[i] - zm) * (z[i] - zm);
    szl += (z[i] - zm) * (loss[i] - lm);
  }
  a = szz > 0 ? szl / szz : 0;
  e = lm - a * zm;
  if (e < 0) {  // a loss cannot fall below zero: pin the floor there
    double zz = 0, zl = 0;
    for (size_t i = 0; i < z.size(); ++i) {
      zz += z[i] * z[i];
      zl += z[i] * loss[i];
    }
    e = 0;
    a = zl / zz;
  }
  if (!(a > 0)) return std::numeric_limits<double>::infinity();
  double sse = 0;
  for (size_t i = 0; i < z.size(); ++i) sse += std::pow(loss[i] - e - a * z[i], 2);
  return sse;
}

}  // namespace

double PowerLaw::loss_at(double compute) const { return e + a * std::pow(compute / c0, -alpha); }

std::optional<double> PowerLaw::compute_for(double loss) const {
  if (!(loss > e)) return std::nullopt;
  return c0 * std::pow((loss - e) / a, -1.0 / alpha);
}

PowerLaw fit_power_law(const std::vector<double>& compute, const std::vector<double>& loss,
                       const std::string& where) {
  if (compute.size() != loss.size() || compute.size() < 2)
    throw Error(
        fmt::format("{} compute budget(s) of the baseline: a power law needs 2 or more", compute.size()),
        where,
        "train the baseline at more budgets, e.g. `siamese sweep --topologies "
        "pre:max_duration=250,pre:max_duration=500,pre ...` beside the full-length runs");
  PowerLaw f;
  f.points = int(compute.size());
  f.c_min = *std::min_element(compute.begin(), compute.end());
  f.c_max = *std::max_element(compute.begin(), compute.end());
  f.c0 = f.c_max;
  std::vector<double> x;  // log(C / c0) <= 0
  for (double c : compute) x.push_back(std::log(c / f.c0));
  if (f.points >= 4) {
    // Variable projection: for a fixed alpha the model is linear in (e, a), solved exactly, so
    // only alpha is searched: a log grid, then golden section around its best point.
    f.saturating = true;
    auto sse = [&](double alpha, double& e, double& a) {
      std::vector<double> z;
      for (double xi : x) z.push_back(std::exp(-alpha * xi));
      return fit_linear(z, loss, e, a);
    };
    const int grid = 400;
    const double lo = std::log(1e-3), hi = std::log(4.0);
    double best = std::numeric_limits<double>::infinity();
    int best_i = -1;
    for (int i = 0; i <= grid; ++i) {
      double e, a;
      const double s = sse(std::exp(lo + (hi - lo) * i / grid), e, a);
      if (s < best) {
        best = s;
        best_i = i;
      }
    }
    if (best_i < 0)
      throw Error("the baseline's loss does not fall with compute across its budgets", where,
                  "check the ladder's runs (a budget that did not train, or a wrong --baseline)");
    double l = lo + (hi - lo) * std::max(0, best_i - 1) / grid,
           r = lo + (hi - lo) * std::min(grid, best_i + 1) / grid;
    const double g = (std::sqrt(5.0) - 1) / 2;
    for (int it = 0; it < 100; ++it) {
      const double m1 = r - g * (r - l), m2 = l + g * (r - l);
      double e, a;
      if (sse(std::exp(m1), e, a) < sse(std::exp(m2), e, a))
        r = m2;
      else
        l = m1;
    }
    f.alpha = std::exp((l + r) / 2);
    sse(f.alpha, f.e, f.a);
  } else {
    // log L = log a - alpha x: ordinary least squares on the log loss.
    std::vector<double> y;
    for (double v : loss) y.push_back(std::log(v));
    const double xm = mean(x), ym = mean(y);
    double sxx = 0, sxy = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      sxx += (x[i] - xm) * (x[i] - xm);
      sxy += (x[i] - xm) * (y[i] - ym);
    }
    if (sxx <= 0)
      throw Error("the baseline's budgets all have the same compute", where, "vary max_duration or size");
    f.alpha = -sxy / sxx;
    f.a = std::exp(ym + f.alpha * xm);
    if (!(f.alpha > 0))
      throw Error("the baseline's loss does not fall with compute across its budgets", where,
                  "check the ladder's runs (a budget that did not train, or a wrong --baseline)");
  }
  double sq = 0;
  for (size_t i = 0; i < loss.size(); ++i) sq += std::pow(loss[i] - f.loss_at(compute[i]), 2);
  f.rms = std::sqrt(sq / double(loss.size()));
  return f;
}

namespace {

double run_loss(const RunSummary& r, const std::string& loss) {
  if (loss == "train") return r.final_loss;
  const auto it = r.eval_perplexity.find(loss);
  return it == r.eval_perplexity.end() ? NAN : std::log(it->second);
}

// Why a run's tokens/s does not compare with the baseline's; empty when it does.
std::string throughput_issue(const RunSummary& r, const RunSummary& base) {
  if (!std::isfinite(tokens_per_second(r))) return "no step times";
  if (r.concurrent_runs.value_or(1) > 1)
    return fmt::format("trained {} at once (`--jobs`): shared cores", *r.concurrent_runs);
  if (!r.host.empty() && !base.host.empty() && r.host != base.host)
    return fmt::format("host {}, the baseline's {}", r.host, base.host);
  if (r.intra_op_threads && base.intra_op_threads && *r.intra_op_threads != *base.intra_op_threads)
    return fmt::format("{} threads, the baseline's {}", *r.intra_op_threads, *base.intra_op_threads);
  return "";
}

bool same_settings(const RunSummary& a, const RunSummary& b) {
  if (a.settings.empty() || b.settings.empty()) return false;
  for (const auto& [key, value] : a.settings)
    if (!kLadderFree.count(key)) {
      const auto it = b.settings.find(key);
      if (it == b.settings.end() || it->second != value) return false;
    }
  return true;
}

std::string lr_text(const std::optional<double>& lr) { return lr ? fmt::format("{:g}", *lr) : "-"; }

// A run short of its planned length (stopped, still training) ended at another compute and
// before its schedule annealed: its loss compares with nothing in the table.
bool unfinished(const RunSummary& r) { return r.steps == 0 || (r.max_steps && r.steps < *r.max_steps); }

// Fewer than 2 budgets because the ladder's runs were left out: said with the reasons, since
// "0 compute budgets" beside a table of the baseline's runs reads as a bug.
void refuse_a_thin_ladder(const std::set<const RunSummary*>& ladder, size_t budgets,
                          const SpeedupOptions& options) {
  int diverged = 0, short_of_plan = 0, no_loss = 0;
  for (const auto* r : ladder) {
    if (r->diverged)
      ++diverged;
    else if (unfinished(*r))
      ++short_of_plan;
    else if (!std::isfinite(run_loss(*r, options.loss)))
      ++no_loss;
  }
  if (budgets >= 2 || diverged + short_of_plan + no_loss == 0) return;
  std::vector<std::string> why;
  if (diverged) why.push_back(fmt::format("{} diverged", diverged));
  if (short_of_plan) why.push_back(fmt::format("{} stopped short of their planned length", short_of_plan));
  if (no_loss) why.push_back(fmt::format("{} have no \"{}\" loss", no_loss, options.loss));
  throw Error(
      fmt::format("{} compute budget(s) of the baseline \"{}\" left to fit a power law to (it needs 2 or "
                  "more): of its {} run{}, {}, and those are left out",
                  budgets, options.baseline, ladder.size(), ladder.size() == 1 ? "" : "s",
                  fmt::join(why, ", ")),
      "--baseline " + options.baseline,
      "the fit takes the baseline's finished runs that did not diverge: pick a baseline that trained "
      "stably (the state column names the diverged runs), train it at a lower learning rate, or let its "
      "runs finish (run the same sweep again)");
}

}  // namespace

size_t baseline_budgets(const std::vector<RunSummary>& runs, const std::string& baseline) {
  // A ladder's other budgets are models of their own (pre+250): the baseline's topology counts.
  const auto ref =
      std::find_if(runs.begin(), runs.end(), [&](const RunSummary& r) { return r.model == baseline; });
  if (ref == runs.end()) return 0;
  std::set<double> budgets;
  for (const auto& r : runs)
    if (r.topology == ref->topology && r.learning_rate == ref->learning_rate)
      budgets.insert(r.flops_per_token * double(r.tokens));
  return budgets.size();
}

SpeedupTable effective_speedup(const std::vector<RunSummary>& runs, const SpeedupOptions& options) {
  SpeedupTable t;
  t.baseline = options.baseline;
  t.loss = options.loss;
  std::vector<const RunSummary*> base;
  std::set<std::string> models;
  std::set<std::optional<double>> base_lrs;
  for (const auto& r : runs) {
    models.insert(r.model);
    if (r.model == options.baseline) {
      base.push_back(&r);
      base_lrs.insert(r.learning_rate);
    }
  }
  if (base.empty())
    throw Error(fmt::format("no run of the baseline model \"{}\"", options.baseline), "--baseline",
                fmt::format("name a model as the report's Model column does: {}", fmt::join(models, ", ")));
  if (base_lrs.size() > 1)
    throw Error(
        fmt::format("the baseline \"{}\" ran at {} learning rates", options.baseline, base_lrs.size()),
        "--baseline", "report the baseline's runs of one learning rate only");
  t.learning_rate = *base_lrs.begin();
  const RunSummary& ref = *base.front();
  if (options.loss != "train" && !std::isfinite(run_loss(ref, options.loss))) {
    std::set<std::string> labels;
    for (const auto& [label, ppl] : ref.eval_perplexity) labels.insert(label);
    throw Error(fmt::format("the baseline run {} has no \"{}\" evaluation", ref.run, options.loss),
                "--speedup-loss",
                fmt::format("use train or one of its lm evaluators: {}", fmt::join(labels, ", ")));
  }

  // The ladder: each budget's seed-mean loss.
  std::map<double, std::vector<const RunSummary*>> budgets;
  std::set<const RunSummary*> ladder;
  for (const auto& r : runs)
    if (r.topology == ref.topology && r.learning_rate == t.learning_rate && same_settings(r, ref)) {
      ladder.insert(&r);
      if (!r.diverged && !unfinished(r) && std::isfinite(run_loss(r, options.loss)) &&
          std::isfinite(r.flops_per_token))
        budgets[r.flops_per_token * double(r.tokens)].push_back(&r);
    }
  std::vector<double> compute, loss;
  for (const auto& [c, members] : budgets) {
    std::vector<double> l;
    for (const auto* r : members) l.push_back(run_loss(*r, options.loss));
    t.ladder.push_back({c, mean(l), int(members.size()), members.front()->model});
    compute.push_back(c);
    loss.push_back(mean(l));
  }
  refuse_a_thin_ladder(ladder, budgets.size(), options);
  t.fit = fit_power_law(compute, loss, "--baseline " + options.baseline);

  std::vector<double> base_tps;
  for (const auto* r : base)
    if (throughput_issue(*r, ref).empty()) base_tps.push_back(tokens_per_second(*r));
  t.baseline_tokens_per_second = mean(base_tps);

  // Rows: the baseline's group first, then every other group that is not a ladder budget.
  std::vector<std::pair<std::string, std::optional<double>>> keys = {{ref.model, t.learning_rate}};
  std::map<std::pair<std::string, std::optional<double>>, std::vector<const RunSummary*>> groups;
  for (const auto& r : runs) {
    const auto key = std::make_pair(r.model, r.learning_rate);
    if (ladder.count(&r) && r.model != ref.model) continue;
    if (!groups.count(key) && key != keys.front()) keys.push_back(key);
    groups[key].push_back(&r);
  }
  for (const auto& key : keys) {
    SpeedupRow row;
    row.model = key.first;
    row.learning_rate = key.second;
    std::vector<double> l, c, tps, seeds;
    for (const auto* r : groups[key]) {
      ++row.runs;
      if (unfinished(*r)) {
        ++row.unfinished;
        continue;
      }
      const double rl = run_loss(*r, options.loss), rc = r->flops_per_token * double(r->tokens);
      if (r->diverged || !std::isfinite(rl) || !std::isfinite(rc)) {
        row.diverged += r->diverged;
        continue;
      }
      l.push_back(rl);
      c.push_back(rc);
      const std::string issue = throughput_issue(*r, ref);
      if (issue.empty())
        tps.push_back(tokens_per_second(*r));
      else if (row.throughput_note.empty())
        row.throughput_note = issue;
      const auto eq = t.fit.compute_for(rl);
      if (!eq)
        ++row.seeds_below_asymptote;
      else if (issue.empty() && !base_tps.empty())
        seeds.push_back(*eq / rc * tokens_per_second(*r) / t.baseline_tokens_per_second);
    }
    if (!l.empty()) {
      row.loss = mean(l);
      row.compute = mean(c);
      row.compute_equivalent = t.fit.compute_for(row.loss);
      if (!row.compute_equivalent)
        row.range = FitRange::BelowAsymptote;
      else {
        row.multiplier = *row.compute_equivalent / row.compute;
        const double tol = 1e-9;
        if (*row.compute_equivalent > t.fit.c_max * (1 + tol)) row.range = FitRange::Above;
        if (*row.compute_equivalent < t.fit.c_min * (1 - tol)) row.range = FitRange::Below;
      }
      if (base_tps.empty())
        row.throughput_note = "the baseline has no comparable step times";
      else if (!tps.empty()) {
        row.throughput_ratio = mean(tps) / t.baseline_tokens_per_second;
        row.throughput_note.clear();
      }
      if (row.multiplier && row.throughput_ratio) row.speedup = *row.multiplier * *row.throughput_ratio;
      if (!seeds.empty()) {
        row.seed_low = *std::min_element(seeds.begin(), seeds.end());
        row.seed_high = *std::max_element(seeds.begin(), seeds.end());
      }
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

namespace {

std::string range_text(const SpeedupRow& r, const PowerLaw& fit) {
  switch (r.range) {
    case FitRange::Inside:
      return "inside";
    case FitRange::Above:
      return fmt::format("extrapolated: {:.2f}x the largest budget", *r.compute_equivalent / fit.c_max);
    case FitRange::Below:
      return fmt::format("extrapolated: {:.2f}x the smallest budget", *r.compute_equivalent / fit.c_min);
    case FitRange::BelowAsymptote:
      return fmt::format("loss below the fit's floor {:.3f}: no compute-equivalent", fit.e);
  }
  return "";
}

std::string opt(const std::optional<double>& v, const char* f) {
  return v ? fmt::format(fmt::runtime(f), *v) : std::string("-");
}

}  // namespace

std::string markdown_speedup(const SpeedupTable& t) {
  const PowerLaw& f = t.fit;
  const std::string loss_name = t.loss == "train" ? "final training loss" : t.loss + " loss (log perplexity)";
  std::string out = fmt::format("Effective speedup over {} (learning rate {}), from its {}:\n\n", t.baseline,
                                lr_text(t.learning_rate), loss_name);
  out += fmt::format(
      "Fit: L(C) = {}{:.4g} (C / {:.4g})^-{:.4f}, {}, to {} compute budgets from {:.4g} to {:.4g} FLOPs, rms "
      "residual {:.4f}; C = tokens x training FLOPs per token of the run's shape.\n\n",
      f.saturating ? fmt::format("{:.4f} + ", f.e) : "", f.a, f.c0, f.alpha,
      f.saturating ? "least squares on the loss" : "pure power law, least squares on the log loss", f.points,
      f.c_min, f.c_max, f.rms);
  if (f.saturating && f.e == 0)
    out +=
        "E sits at its bound 0: the losses do not flatten with compute across these budgets, so the "
        "saturating form has nothing to fit and reduces to the pure law.\n\n";
  out += "| Budget | runs | C (FLOPs) | loss | fit |\n|---|---:|---:|---:|---:|\n";
  for (const auto& p : t.ladder)
    out += fmt::format("| {} | {} | {:.4g} | {:.4f} | {:.4f} |\n", p.model, p.runs, p.compute, p.loss,
                       f.loss_at(p.compute));
  out +=
      "\n| Model | LR | runs | loss | C (FLOPs) | compute-equivalent | multiplier | tokens/s ratio | "
      "effective "
      "speedup | per seed | fit |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n";
  std::string notes;
  for (const auto& r : t.rows) {
    std::string runs = std::to_string(r.runs);
    if (r.diverged) runs += fmt::format(" ({} diverged)", r.diverged);
    if (r.unfinished) runs += fmt::format(" ({} unfinished, left out)", r.unfinished);
    std::string seeds = r.seed_low ? fmt::format("{:.2f} to {:.2f}", *r.seed_low, *r.seed_high) : "-";
    if (r.seeds_below_asymptote) seeds += fmt::format(" ({} below the floor)", r.seeds_below_asymptote);
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.model, lr_text(r.learning_rate), runs,
        std::isfinite(r.loss) ? fmt::format("{:.4f}", r.loss) : "-",
        std::isfinite(r.compute) ? fmt::format("{:.4g}", r.compute) : "-",
        opt(r.compute_equivalent, "{:.4g}"), opt(r.multiplier, "{:.2f}"), opt(r.throughput_ratio, "{:.3f}"),
        opt(r.speedup, "**{:.2f}**"), seeds, std::isfinite(r.loss) ? range_text(r, f) : "-");
    if (!r.throughput_ratio && !r.throughput_note.empty())
      notes += fmt::format("- {}: no tokens/s ratio ({})\n", r.model, r.throughput_note);
  }
  out += fmt::format(
      "\nmultiplier = compute-equivalent / C: the compute the baseline's fit needs for the row's seed-mean "
      "loss, over the compute the row spent. tokens/s ratio: the row's mean training tokens/s over the "
      "baseline's ({:.4g}). effective speedup = multiplier x tokens/s ratio: how many times the wall-clock "
      "time the baseline would need for that loss. per seed: the lowest and highest of each seed's own "
      "speedup. The baseline's own row differs from 1.00 by the fit's error at its budget. An extrapolated "
      "compute-equivalent lies outside the budgets fitted and rests on the curve's form alone.\n",
      t.baseline_tokens_per_second);
  return notes.empty() ? out : out + "\n" + notes;
}

std::string speedup_json(const SpeedupTable& t) {
  auto num = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  auto finite = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json j = {
      {"baseline", t.baseline},
      {"loss", t.loss},
      {"learning_rate", num(t.learning_rate)},
      {"baseline_tokens_per_second", finite(t.baseline_tokens_per_second)},
      {"fit",
       {{"form", t.fit.saturating ? "E + A (C/C0)^-alpha" : "A (C/C0)^-alpha"},
        {"E", t.fit.e},
        {"A", t.fit.a},
        {"alpha", t.fit.alpha},
        {"C0", t.fit.c0},
        {"compute_min", t.fit.c_min},
        {"compute_max", t.fit.c_max},
        {"points", t.fit.points},
        {"rms", t.fit.rms}}},
      {"ladder", nlohmann::json::array()},
      {"rows", nlohmann::json::array()},
  };
  for (const auto& p : t.ladder)
    j["ladder"].push_back({{"model", p.model}, {"compute", p.compute}, {"loss", p.loss}, {"runs", p.runs}});
  static const char* ranges[] = {"inside", "above", "below", "below_asymptote"};
  for (const auto& r : t.rows)
    j["rows"].push_back({{"model", r.model},
                         {"learning_rate", num(r.learning_rate)},
                         {"runs", r.runs},
                         {"diverged", r.diverged},
                         {"unfinished", r.unfinished},
                         {"loss", finite(r.loss)},
                         {"compute", finite(r.compute)},
                         {"compute_equivalent", num(r.compute_equivalent)},
                         {"fit_range", ranges[int(r.range)]},
                         {"multiplier", num(r.multiplier)},
                         {"throughput_ratio", num(r.throughput_ratio)},
                         {"throughput_note", r.throughput_note},
                         {"speedup", num(r.speedup)},
                         {"seed_low", num(r.seed_low)},
                         {"seed_high", num(r.seed_high)},
                         {"seeds_below_asymptote", r.seeds_below_asymptote}});
  return j.dump(2) + "\n";
}

}  // namespace siamese::runs
