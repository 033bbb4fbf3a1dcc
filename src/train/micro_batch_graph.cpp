#include "siamese/train/micro_batch_graph.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include <utility>

namespace siamese::train {

std::optional<std::string> cuda_graph_refusal(const config::StepSection& cfg, torch::Device device,
                                              int world_size, bool gathers_blocks) {
  if (!device.is_cuda()) return "CUDA graphs need a CUDA device (device: " + device.str() + ")";
  if (world_size > 1)
    return "the run has " + std::to_string(world_size) +
           " ranks: their collectives run from the gradient hooks, outside any graph";
  if (gathers_blocks) return "a sharded strategy gathers and frees the blocks' weights in every forward";
  if (cfg.moe) return "MoE's routing reads the experts' token counts on the host";
  if (cfg.activation_checkpointing != config::ActivationCheckpointing::None)
    return "activation checkpointing saves and restores the random state on the host in backward";
  if (cfg.generate_doc_lengths) return "data.generate_doc_lengths finds the documents' starts by their count";
  if (cfg.dropout) return "dropout draws random numbers (a dropout of 0 everywhere allows graphs)";
  return std::nullopt;
}

// A CUDA graph that says whether capture_end got as far as owning its pools (its reset() then
// releases them; before that, nobody does).
struct MicroBatchCudaGraph : at::cuda::CUDAGraph {
  bool capture_ended() const { return capture_ended_; }
};

namespace {

// `to` waits for what is queued on `from` so far.
void wait_for(const at::cuda::CUDAStream& from, const at::cuda::CUDAStream& to) {
  at::cuda::CUDAEvent done;
  done.record(from);
  done.block(to);
}

// The output with storage of its own: the graph's is rewritten by the next replay.
MicroBatchOutput copied(const MicroBatchOutput& out) {
  MicroBatchOutput c;
  c.sums.nll = out.sums.nll.clone();
  if (out.sums.z.defined()) c.sums.z = out.sums.z.clone();
  c.values = out.values.cloned();
  return c;
}

// Leaves a capture that threw: ends it on `stream` if it is still under way, and where the
// graph does not own `pool` yet, stops the allocators routing allocations to it (their filters
// point into the graph about to go) and releases it (else it keeps a micro-batch of memory).
void abandon_capture(const MicroBatchCudaGraph& graph, const at::cuda::CUDAStream& stream,
                     c10::DeviceIndex device, c10::MempoolId_t pool) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream.stream(), &status) == cudaSuccess &&
      status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream.stream(), &partial);
    if (partial != nullptr) cudaGraphDestroy(partial);
  }
  if (!graph.capture_ended()) {
    // Each step may be done already (capture_end got that far) or never begun: it throws then.
    const auto attempt = [](const auto& step) {
      try {
        step();
      } catch (const c10::Error&) {
      }
    };
    attempt([&] { c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool); });
    attempt([&] { c10::cuda::CUDACachingAllocator::releasePool(device, pool); });
    attempt([&] { at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(pool); });
    attempt([&] { at::getHostAllocator(at::kCUDA)->release_pool(pool); });
  }
  cudaGetLastError();  // the capture's error is not sticky: the context goes on
  at::autocast::clear_cache();
}

}  // namespace

struct MicroBatchGraph::State {
  int64_t warmup;
  int64_t eager = 0;  // warm-up calls so far
  int64_t replays = 0;
  bool abandoned = false;
  std::optional<at::cuda::CUDAStream> side;
  std::unique_ptr<MicroBatchCudaGraph> graph;
  torch::Tensor ids;        // the graph's input
  MicroBatchOutput output;  // the graph's outputs, rewritten by every replay
};

MicroBatchGraph::MicroBatchGraph(int64_t warmup) : s_(std::make_unique<State>()) { s_->warmup = warmup; }
MicroBatchGraph::~MicroBatchGraph() = default;

int64_t MicroBatchGraph::replays() const { return s_->replays; }
bool MicroBatchGraph::abandoned() const { return s_->abandoned; }

MicroBatchOutput MicroBatchGraph::run(const torch::Tensor& ids, const Work& work) {
  if (s_->abandoned) return work(ids);
  const at::cuda::CUDAStream main = at::cuda::getCurrentCUDAStream(ids.device().index());
  if (!s_->side) s_->side = at::cuda::getStreamFromPool(false, ids.device().index());
  const at::cuda::CUDAStream side = *s_->side;
  if (s_->eager < s_->warmup) {
    ++s_->eager;
    wait_for(main, side);
    MicroBatchOutput out;
    {
      const at::cuda::CUDAStreamGuard on_side(side);
      out = work(ids);
    }
    wait_for(side, main);
    return out;
  }
  if (!s_->graph) {
    s_->ids = ids.clone();
    // A cast autocast cached before the capture would be read at its address after the cache
    // let it go; casts made inside the capture are the graph's own.
    at::autocast::clear_cache();
    auto graph = std::make_unique<MicroBatchCudaGraph>();
    const auto pool = at::cuda::graph_pool_handle();
    wait_for(main, side);
    // While a capture is under way the allocator gives no cached block back to the device: the
    // warm-up's, cached in the eager pool, go first, or the capture may run out of memory.
    c10::cuda::CUDACachingAllocator::emptyCache();
    try {
      const at::cuda::CUDAStreamGuard on_side(side);
      // Thread-local: the data loader's pinning and a background save's copies go on in other
      // threads meanwhile; this thread's and the stream's work is what is captured.
      graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      s_->output = work(s_->ids);
      graph->capture_end();
    } catch (const std::exception& e) {
      s_->output = {};
      s_->ids.reset();
      abandon_capture(*graph, side, ids.device().index(), pool);
      s_->abandoned = true;
      spdlog::warn("cuda_graphs: the micro-batch could not be captured, the run goes on without graphs: {}",
                   e.what());
      return work(ids);
    }
    wait_for(side, main);
    s_->graph = std::move(graph);
    // Without their autograd history, which would keep the captured nodes (and the gradient
    // accumulators, tied to the side stream) alive.
    s_->output.sums.nll = s_->output.sums.nll.detach();
    if (s_->output.sums.z.defined()) s_->output.sums.z = s_->output.sums.z.detach();
    spdlog::info("cuda_graphs: captured the forward and backward of a micro-batch of {} sequences",
                 ids.size(0));
  } else {
    s_->ids.copy_(ids);
  }
  s_->graph->replay();
  ++s_->replays;
  return copied(s_->output);
}

}  // namespace siamese::train
