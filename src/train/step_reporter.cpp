#include "siamese/train/step_reporter.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "siamese/analysis/grad_norms.h"
#include "siamese/model/accounting.h"
#include "siamese/train/save_folder.h"
#include "siamese/train/trainer.h"
#include "siamese/train/wandb_stream.h"

namespace siamese::train {
namespace {

// "z_loss inf, " when `cause` is one of the step's auxiliary terms, else "".
std::string term_value(const model::HostValues& terms, const std::string& cause) {
  for (const auto& v : terms)
    if (v.name == cause && v.scalar()) return fmt::format("{} {}, ", v.name, v.values.front());
  return "";
}

bool finite(const model::HostValue& v) {
  return std::all_of(v.values.begin(), v.values.end(), [](double x) { return std::isfinite(x); });
}

// What to change after a step whose `cause` went non-finite: the z-loss carries its
// multiplier, which overflows by itself; anything else is the run diverging.
std::string nonfinite_fix(const config::ReportSection& cfg, const std::string& cause) {
  if (cause == metric::kZLoss)
    return fmt::format(
        "the z-loss is auxiliary_loss_multiplier ({}) x logsumexp(logits)^2 per token: resume from it with a "
        "smaller auxiliary_loss_multiplier (OLMo's is 1e-4) or softmax_auxiliary_loss: false",
        cfg.auxiliary_loss_multiplier);
  return "resume from it with a lower learning rate or set max_bad_steps to skip such steps";
}

}  // namespace

StepReporter::StepReporter(const config::ReportSection& cfg, torch::Device device, bool main_rank,
                           int world_size, const std::filesystem::path& run_dir, int64_t first_step,
                           int64_t max_steps)
    : cfg_(cfg),
      device_(device),
      run_dir_(run_dir),
      read_interval_(device.is_cuda() ? cfg.console_log_interval : 1),
      tokens_per_step_(cfg.global_batch * cfg.model.max_sequence_length),
      flops_per_token_(model::flops_per_token(cfg.model, cfg.model.max_sequence_length)),
      peak_(mfu_peak(cfg.peak_tflops, device, cfg.precision, cfg.allow_tf32)),
      peak_flops_(peak_.tflops ? std::optional<double>(*peak_.tflops * 1e12 * world_size) : std::nullopt),
      bad_steps_(cfg.max_bad_steps),
      clock_(device),
      spikes_(cfg.loss_spike_factor) {
  if (main_rank) {
    spdlog::info("{}", peak_.said);
    sinks_.push_back(std::make_unique<MetricsLog>(run_dir / "metrics.jsonl", first_step));
    sinks_.push_back(std::make_unique<TensorBoardWriter>(run_dir / "tensorboard"));
    if (cfg.wandb.enabled())
      sinks_.push_back(std::make_unique<WandbStream>(
          cfg.wandb, run_dir, run_config_path(run_dir).value_or(run_dir / "config.yaml")));
  }
  sinks_.push_back(std::make_unique<ConsoleLog>(cfg.console_log_interval, first_step, max_steps));
}

void StepReporter::event(const MetricsRow& row) {
  for (const auto& sink : sinks_) sink->write(row);
}

int StepReporter::flush(TrainState& state, const LossScaler& scaler) {
  if (pending_.empty()) return 0;
  // One copy: each step's grad norm, loss scale and values, in the values' order.
  std::vector<torch::Tensor> values;
  for (const auto& p : pending_)
    values.push_back(
        torch::cat({torch::stack({p.result.grad_norm, p.result.loss_scale}), p.result.values.flat()}));
  const auto host = torch::cat(values).cpu();
  const double* v = host.data_ptr<double>();
  const double peak_mib = peak_memory_mib(device_);
  for (size_t i = 0; i < pending_.size(); ++i) {
    const PendingStep& p = pending_[i];
    const double grad_norm = v[0], loss_scale = v[1];
    model::HostValues terms = model::host_values(p.result.values, v + 2);
    v += 2 + p.result.values.numel();
    const bool finite_loss = std::all_of(terms.begin(), terms.end(), finite);
    const double loss = terms.front().values.front();  // "loss" comes first
    terms.erase(terms.begin());
    const auto verdict = bad_steps_.judge(finite_loss, std::isfinite(grad_norm),
                                          scaler.enabled() ? loss_scale : 0, state.bad_steps);
    if (verdict == BadStepPolicy::Verdict::Overflow) {
      spdlog::info("step {}: fp16 gradients overflowed at loss scale {}; step skipped, scale now {}", p.step,
                   loss_scale, loss_scale / 2);
      event(metrics_row(p.step, "overflow", {{"loss", loss}, {"loss_scale", loss_scale}}));
      continue;
    }
    if (verdict != BadStepPolicy::Verdict::Continue) {
      // The first term that went non-finite names the cause: the cross-entropy, or an
      // auxiliary term whose weight may be what overflowed.
      std::string cause = std::isfinite(loss) ? "grad_norm" : metric::kLoss;
      if (std::isfinite(loss))
        for (const auto& t : terms)
          if (!finite(t)) {
            cause = t.name;
            break;
          }
      MetricsRow row = metrics_row(p.step, metric::kNonfiniteEvent,
                                   {{"cause", cause}, {"loss", loss}, {"grad_norm", grad_norm}});
      for (const auto& t : terms)
        if (t.scalar()) row[t.name] = t.values.front();
      event(row);
      if (verdict == BadStepPolicy::Verdict::Skip) {
        spdlog::warn("step {}: non-finite {} ({}loss {}, grad norm {}); skipped ({} of {} allowed)", p.step,
                     cause, term_value(terms, cause), loss, grad_norm, state.bad_steps,
                     bad_steps_.max_bad_steps());
        continue;
      }
      spdlog::error("step {}: non-finite {} ({}loss {}, grad norm {}); stopping: {}; {}", p.step, cause,
                    term_value(terms, cause), loss, grad_norm, last_checkpoint_note(run_dir_),
                    nonfinite_fix(cfg_, cause));
      return kExitNonFinite;
    }
    StepMetrics m;
    m.step = p.step;
    m.tokens = p.tokens;
    m.loss = loss;
    m.terms = std::move(terms);
    m.lr = p.lr;
    m.grad_norm = grad_norm;
    m.step_seconds = clock_.seconds(p.start_mark, p.end_mark);
    m.step_tokens = tokens_per_step_;
    m.flops_per_token = flops_per_token_;
    m.peak_flops = peak_flops_;
    m.elapsed = p.elapsed;
    m.loss_spike = spikes_.observe(loss);
    m.comm_seconds = p.comm_seconds;
    m.peak_memory_mib = peak_mib;
    if (scaler.enabled()) m.loss_scale = loss_scale;
    if (cfg_.instance_filter) m.filtered_instances = p.filtered;
    event(m.to_row());
    if (p.result.layer_grad_norms) event(analysis::layer_grad_norms_row(p.step, *p.result.layer_grad_norms));
    if (p.filtered > 0)
      spdlog::info("step {}: the instance filter left out {} instance(s) with repeated n-grams", p.step,
                   p.filtered);
    if (m.loss_spike) spdlog::warn("step {}: loss spike {:.4f}", p.step, loss);
  }
  pending_.clear();
  clock_.keep_last();
  return 0;
}

}  // namespace siamese::train
