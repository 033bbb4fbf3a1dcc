#pragma once
// fsdp.sharding_strategy SHARD_GRAD_OP (ZeRO-2) over a c10d process group: every rank keeps
// the whole parameters for forward and backward, but only its shard of the gradients, of
// the float32 master weights and of the optimizer state.
//
// Layout. Each parameter's flattened elements split into world-size chunks of
// c = ceil(numel / world) (the last padded with zeros); rank r holds chunk r of every
// parameter. The parameters are grouped into units (buckets of distributed.bucket_mb, or one
// per transformer block with fsdp.wrapping_strategy by_block); a unit's chunks for rank r sit
// side by side in this rank's flat shard, so one reduce_scatter_tensor per unit (input: the
// unit's gradients as [world, unit chunk] rows) leaves every rank exactly its gradient shard,
// and one all_gather_into_tensor per unit after the update makes the parameters whole.
//
// Step. The unit's reduce-scatter starts from autograd hooks as soon as backward has every
// gradient of the unit (as the ddp path's buckets do), and the full gradients are freed right
// after they are copied out. At most kReduceScattersInFlight units are in flight: launching
// one more first waits for the oldest and frees its buffer, so the whole gradients never
// exist at once (ZeRO-2's saving; without the bound, Gloo queues every unit and holds all of
// them at the end of backward). The optimizer updates named views into the master shard (one
// per parameter, so weight decay groups and the checkpoint's names stay as they are); the
// global gradient norm is the square root of the all-reduced sum of the shards' squared norms.
//
// FULL_SHARD (ZeRO-3, `shard_parameters`) keeps the units of transformer blocks (unit_of >= 0)
// only as this rank's shard between uses: its block runner (GatheredBlocks) gathers a block's
// units (one all_gather_into_tensor each) before it runs and frees their storage after, with the
// next block's gather in flight meanwhile. Backward reaches a block through the gradients of
// the streams it produced; a hook on them gathers it again (prefetching the block below), and
// when backward reaches the block below, this block's gradients are complete: they are
// reduce-scattered and its parameters freed. So every rank issues its collectives in block
// order, whatever order autograd happens to finish gradients in. The other units (embedding,
// final norm, LM head) stay whole. Freeing keeps each parameter's tensor and storage object
// and drops only the bytes, so what autograd saved in forward sees the values gathered back.
//
// HYBRID_SHARD (`replicas` > 1) is FULL_SHARD inside each group of world / replicas
// consecutive ranks (a node, by default) and a replica across the groups: the reduce-scatter
// and all-gathers run in the shard group, and each unit's gradient shard is then all-reduced
// over the ranks that hold the same shard in the other groups, as PyTorch's HSDP does.
#include <torch/torch.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "siamese/dist/buffer_pool.h"
#include "siamese/dist/communicator.h"
#include "siamese/dist/gradient_strategy.h"
#include "siamese/dist/shard_layout.h"
#include "siamese/model/block_runner.h"

namespace siamese::dist {

// Reduce-scatters one rank keeps in flight: one running while the next unit's gradients are
// copied out, as FSDP overlaps one reduce-scatter with the next block's backward.
inline constexpr size_t kReduceScattersInFlight = 2;

struct ShardedOptions {
  int64_t bucket_bytes = 25 << 20;  // unit size without a unit_of
  bool overlap = true;              // start reduce-scatters during backward
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // A parameter's unit by name (fsdp.wrapping_strategy by_block: its block); a new unit
  // starts where the value changes. Null: units of about bucket_bytes.
  std::function<int64_t(const std::string&)> unit_of;
  // FULL_SHARD: the units with unit_of >= 0 (a block's layer) hold parameters only while
  // their block runs.
  bool shard_parameters = false;
  // HYBRID_SHARD: copies of the sharded model, each over world / replicas consecutive ranks.
  int replicas = 1;
  // The dtype gradients are reduce-scattered in (fsdp.precision pure under autocast: the
  // autocast dtype, half the bytes on the wire); the shards, the replicas' all-reduce and the
  // optimizer stay float32.
  torch::Dtype reduce_dtype = torch::kFloat;
};

// Elements of each rank's chunk of a tensor with `numel` elements over `world` ranks.
int64_t shard_chunk(int64_t numel, int world);
// Rank `rank`'s chunk of `whole` (flattened, zero-padded), a new 1-D tensor.
torch::Tensor shard_piece(const torch::Tensor& whole, int rank, int world);
// The tensor shaped `shape` whose chunks are `pieces`, in rank order (the reverse).
torch::Tensor unshard(const std::vector<torch::Tensor>& pieces, at::IntArrayRef shape);

// The fsdp strategies' gradients and the state they share with their layout and, under
// FULL_SHARD, their block runner: ParallelPlan::sharded builds the three together.
class ShardedGradients : public GradientStrategy {
 public:
  // Over `comm`, which must outlive it.
  ShardedGradients(Communicator& comm, ShardedOptions options);
  ~ShardedGradients() override;

  void attach(const std::vector<torch::Tensor>& params) override;
  void set_requires_sync(bool sync) override;
  void finish() override;
  double take_comm_seconds() override;
  void after_update() override;
  void params_changed() override;
  // The full gradients live only between backward and the unit's reduce-scatter.
  int64_t gradient_bytes(int64_t) const override { return grad_shard_.defined() ? grad_shard_.nbytes() : 0; }
  int64_t parameter_bytes(int64_t param_bytes) const override;
  void make_params_whole() override;
  void release_params() override;
  std::string name() const override;

  // What ShardedLayout reads.
  ShardLayout::NamedTensors optimizer_params(const ShardLayout::NamedTensors& params);
  Communicator& shards() const { return *shards_; }
  // -1 on a rank whose shard a rank of the first replica writes (HYBRID_SHARD).
  int shard_writer_rank() const { return replicas_ && replicas_->rank() > 0 ? -1 : shards_->rank(); }
  torch::Tensor shard_of(const torch::Tensor& whole);
  torch::Tensor whole_of(const torch::Tensor& piece, at::IntArrayRef shape);

  // What GatheredBlocks calls around block `layer` (FULL_SHARD).
  void before_block(int64_t layer);
  void after_block(int64_t layer, const std::vector<torch::Tensor>& before,
                   const std::vector<torch::Tensor>& after);

 private:
  struct Entry {
    torch::Tensor param;
    int64_t chunk = 0;   // elements of each rank's chunk
    int64_t offset = 0;  // of this parameter's chunk within its unit's row
  };
  struct Unit {
    std::vector<size_t> entries;
    int64_t row = 0;     // elements of one rank's row: the sum of its entries' chunks
    int64_t offset = 0;  // of the row within the shard
    size_t pending = 0;
    torch::Tensor flat;     // [world * row] while its collective runs
    torch::Tensor reduced;  // [row] in reduce_dtype when that is not float32, until copied in
    c10::intrusive_ptr<c10d::Work> work;
    bool launched = false;                       // this step's reduce-scatter has started
    c10::intrusive_ptr<c10d::Work> replica_sum;  // HYBRID_SHARD: its gradient shard over replicas
    int64_t key = 0;                             // unit_of's value: the block's layer, or -1
    bool released = false;                       // FULL_SHARD: its parameters hold no storage
    torch::Tensor gathered, gather_input;        // [world * row] and [row] while its all-gather runs
    torch::Tensor storage;                       // FULL_SHARD: its parameters' bytes while whole
    int64_t storage_bytes = 0;                   // their sizes at 64-byte boundaries
    c10::intrusive_ptr<c10d::Work> gathering;
  };
  void on_grad_ready(size_t entry);
  void launch(Unit& unit);
  // Waits for the unit's reduce-scatter, frees its buffer and, under HYBRID_SHARD, starts
  // the all-reduce of its shard over the replicas.
  void complete(Unit& unit);
  bool releases(const Unit& unit) const { return options_.shard_parameters && unit.key >= 0; }
  void gather(Unit& unit);         // its parameters whole again (waits for its prefetch)
  void prefetch_unit(Unit& unit);  // starts gather()'s all-gather
  void release(Unit& unit);
  void for_layer(int64_t layer, const std::function<void(Unit&)>& fn);
  // Backward has reached block `layer` (a gradient of a stream it produced).
  void reached(int64_t layer);

  Communicator& comm_;
  ShardedOptions options_;
  std::unique_ptr<Communicator> shard_group_, replicas_;  // HYBRID_SHARD's two groups
  Communicator* shards_ = nullptr;  // the ranks the state is sharded over: shard_group_ or comm_
  std::vector<Entry> entries_;
  std::vector<size_t> unit_of_entry_;
  std::vector<Unit> units_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<torch::Tensor> views_;  // entry i's chunk of shard_: what the optimizer updates
  torch::Tensor shard_;               // this rank's float32 master weights, every unit's row
  torch::Tensor grad_shard_;          // their gradients, summed over ranks
  std::deque<size_t> in_flight_;      // units whose reduce-scatter runs, oldest first
  BufferPool pool_;                   // every buffer a step takes, kept between steps
  bool whole_ = false;                // make_params_whole() without release_params() since
  int64_t pool_before_whole_ = 0;     // the pool's bytes before it
  bool sync_ = false;
  double blocked_seconds_ = 0;
  std::map<int64_t, std::vector<size_t>> units_of_layer_;  // FULL_SHARD's block units by layer
  std::vector<bool> reached_;  // per layer: backward has reached it since its forward
  int64_t unfinished_ = -1;    // recomputed blocks: the highest layer not finished this backward
  void finish_layer(int64_t layer);
};

// The optimizer's view of ShardedGradients' flat shards.
class ShardedLayout : public ShardLayout {
 public:
  explicit ShardedLayout(ShardedGradients& shards) : shards_(shards) {}
  NamedTensors optimizer_params(const NamedTensors& params) override {
    return shards_.optimizer_params(params);
  }
  void sum_shards_(torch::Tensor& tensor) override { shards_.shards().all_reduce_sum(tensor); }
  int optimizer_shards() const override { return shards_.shards().size(); }
  int optimizer_shard_rank() const override { return shards_.shard_writer_rank(); }
  torch::Tensor shard_of(const torch::Tensor& whole) override { return shards_.shard_of(whole); }
  torch::Tensor whole_of(const torch::Tensor& piece, at::IntArrayRef shape) override {
    return shards_.whole_of(piece, shape);
  }

 private:
  ShardedGradients& shards_;
};

// FULL_SHARD's block runner: a block's parameters are gathered before it runs and freed after.
class GatheredBlocks : public model::BlockRunner {
 public:
  explicit GatheredBlocks(ShardedGradients& shards) : shards_(shards) {}
  void run(int64_t layer, std::vector<torch::Tensor>& streams, const std::function<void()>& block) override;

 private:
  ShardedGradients& shards_;
};

}  // namespace siamese::dist
