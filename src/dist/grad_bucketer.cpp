#include "siamese/dist/grad_bucketer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>

#include "siamese/dist/grad_ready_hook.h"

namespace siamese::dist {

GradBucketer::GradBucketer(Communicator& comm, std::vector<torch::Tensor> params, int64_t bucket_bytes,
                           bool overlap)
    : comm_(comm), params_(std::move(params)), bucket_of_(params_.size()), overlap_(overlap) {
  for (size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k];
    TORCH_CHECK(p.requires_grad(), "GradBucketer: parameter ", k, " does not require grad");
    int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
    if (buckets_.empty() ||
        (buckets_.back().numel * static_cast<int64_t>(p.element_size()) + bytes > bucket_bytes &&
         !buckets_.back().params.empty()) ||
        buckets_.back().flat.scalar_type() != p.scalar_type()) {
      buckets_.emplace_back();
      buckets_.back().flat = torch::empty({0}, p.options());
    }
    buckets_.back().params.push_back(k);
    buckets_.back().numel += p.numel();
    bucket_of_[k] = buckets_.size() - 1;
  }
  for (auto& b : buckets_) b.flat = torch::zeros({b.numel}, b.flat.options());
  for (size_t k = 0; k < params_.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[k]);
    acc->add_post_hook(std::make_unique<GradReadyHook>([this, k] { on_grad_ready(k); }));
    accumulators_.push_back(std::move(acc));
  }
}

GradBucketer::~GradBucketer() = default;

int64_t GradBucketer::buffer_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : buckets_) bytes += b.flat.nbytes();
  return bytes;
}

void GradBucketer::prepare(bool sync) {
  sync_ = sync;
  if (!sync) return;
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
  }
}

void GradBucketer::on_grad_ready(size_t param) {
  if (!sync_ || !overlap_) return;
  auto& b = buckets_[bucket_of_[param]];
  if (b.pending > 0 && --b.pending == 0) launch(b);
}

void GradBucketer::launch(Bucket& b) {
  int64_t offset = 0;
  for (size_t k : b.params) {
    auto& p = params_[k];
    auto dst = b.flat.narrow(0, offset, p.numel());
    if (p.grad().defined()) {
      dst.copy_(p.grad().reshape(-1));
    } else {
      dst.zero_();
    }
    offset += p.numel();
  }
  b.work = comm_.all_reduce_sum_async(b.flat);
}

void GradBucketer::finish() {
  TORCH_CHECK(sync_, "GradBucketer::finish() without prepare(true)");
  auto start = std::chrono::steady_clock::now();
  // Buckets whose parameters got no gradient this step (unused parameters) or all of them
  // when not overlapping: launch now, in the same order on every rank.
  for (auto& b : buckets_) {
    if (!b.work) launch(b);
  }
  for (auto& b : buckets_) {
    comm_.wait(b.work);
    int64_t offset = 0;
    for (size_t k : b.params) {
      auto& p = params_[k];
      auto src = b.flat.narrow(0, offset, p.numel()).view(p.sizes());
      if (p.grad().defined()) {
        p.mutable_grad().copy_(src);
      } else {
        p.mutable_grad() = src.clone();
      }
      offset += p.numel();
    }
    b.work.reset();
  }
  sync_ = false;
  blocked_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace siamese::dist
