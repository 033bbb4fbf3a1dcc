#include "siamese/dist/sharded.h"

#include <algorithm>
#include <chrono>

#include "siamese/common/error.h"
#include "siamese/dist/grad_ready_hook.h"

namespace siamese::dist {

int64_t shard_chunk(int64_t numel, int world) { return (numel + world - 1) / world; }

torch::Tensor shard_piece(const torch::Tensor& whole, int rank, int world) {
  const int64_t n = whole.numel(), c = shard_chunk(n, world);
  auto piece = torch::zeros({c}, whole.options());
  const int64_t begin = std::min<int64_t>(n, rank * c), len = std::min<int64_t>(n, begin + c) - begin;
  piece.narrow(0, 0, len).copy_(whole.reshape(-1).narrow(0, begin, len));
  return piece;
}

torch::Tensor unshard(const std::vector<torch::Tensor>& pieces, at::IntArrayRef shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  // One piece needs no concatenation: a single copy keeps a resume's peak at the state's size.
  const torch::Tensor flat = pieces.size() == 1 ? pieces.front() : torch::cat(pieces);
  return flat.narrow(0, 0, n).view(shape).clone();
}

namespace {

// Copies between a parameter-shaped tensor and its chunks in a unit's [world, row] matrix,
// chunk r in row r at `offset`; the padding past the last element stays as it is.
template <class Copy>
void for_each_chunk(int64_t numel, int64_t chunk, int world, Copy copy) {
  for (int r = 0; r < world; ++r) {
    const int64_t begin = std::min<int64_t>(numel, r * chunk);
    const int64_t len = std::min<int64_t>(numel, begin + chunk) - begin;
    if (len > 0) copy(r, begin, len);
  }
}

// Parameters sit in a unit's storage at 64-byte boundaries, as the allocator would place them.
int64_t aligned(int64_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

ShardedGradients::ShardedGradients(Communicator& comm, ShardedOptions options)
    : comm_(comm), options_(std::move(options)) {
  shards_ = &comm_;
  const World& world = comm_.world();
  const int R = options_.replicas;
  if (R <= 1) return;
  TORCH_CHECK(world.size % R == 0, "ShardedGradients: ", R, " replicas do not divide ", world.size, " ranks");
  const int S = world.size / R, group = world.rank / S, index = world.rank % S;
  std::vector<int> shard_ranks, replica_ranks;
  for (int i = 0; i < S; ++i) shard_ranks.push_back(group * S + i);
  for (int g = 0; g < R; ++g) replica_ranks.push_back(g * S + index);
  shard_group_ = comm_.subgroup("shard" + std::to_string(group), shard_ranks);
  replicas_ = comm_.subgroup("replica" + std::to_string(index), replica_ranks);
  shards_ = shard_group_.get();
}

ShardedGradients::~ShardedGradients() = default;

void ShardedGradients::attach(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (auto p : params) comm_.broadcast(p);
}

ShardLayout::NamedTensors ShardedGradients::optimizer_params(const ShardLayout::NamedTensors& params) {
  TORCH_CHECK(entries_.empty(), "ShardedGradients::optimizer_params: called twice");
  torch::NoGradGuard no_grad;
  const int W = shards_->size();
  // Units in reverse registration order, roughly the order backward finishes gradients in.
  std::vector<size_t> order;
  for (size_t k = params.size(); k-- > 0;)
    if (params[k].value().requires_grad()) order.push_back(k);
  int64_t unit_bytes = 0, last_key = 0;
  for (size_t k : order) {
    const torch::Tensor& p = params[k].value();
    if (p.scalar_type() != torch::kFloat)
      throw Error("parameter " + params[k].key() + " is " + std::string(c10::toString(p.scalar_type())) +
                      ", and the sharded master weights are float32",
                  "distributed_strategy", "train with float32 parameters (precision amp_* autocasts them)");
    const int64_t bytes = p.numel() * int64_t(p.element_size());
    const int64_t key = options_.unit_of ? options_.unit_of(params[k].key()) : -1;
    const bool new_unit = units_.empty() || (options_.unit_of ? key != last_key
                                                              : unit_bytes + bytes > options_.bucket_bytes &&
                                                                    !units_.back().entries.empty());
    if (new_unit) {
      units_.emplace_back();
      units_.back().key = key;
      unit_bytes = 0;
    }
    last_key = key;
    Unit& u = units_.back();
    Entry e{p, shard_chunk(p.numel(), W), u.row};
    u.row += e.chunk;
    u.storage_bytes += aligned(bytes);
    u.entries.push_back(entries_.size());
    unit_bytes += bytes;
    entries_.push_back(e);
    unit_of_entry_.push_back(units_.size() - 1);
  }
  int64_t total = 0;
  for (size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    u.offset = total;
    total += u.row;
    if (releases(u)) units_of_layer_[u.key].push_back(i);
  }
  if (!units_of_layer_.empty()) reached_.assign(size_t(units_of_layer_.rbegin()->first) + 1, false);
  for (const Entry& e : entries_)
    if (options_.shard_parameters && (!e.param.is_contiguous() || e.param.storage_offset() != 0 ||
                                      e.param.storage().nbytes() != e.param.nbytes()))
      throw Error(
          "a parameter shares its storage with another tensor, and FULL_SHARD frees each "
          "parameter's storage between uses",
          "fsdp.sharding_strategy", "use fsdp.sharding_strategy: SHARD_GRAD_OP");
  const auto options =
      torch::TensorOptions()
          .dtype(torch::kFloat)
          .device(entries_.empty() ? torch::Device(torch::kCPU) : entries_.front().param.device());
  shard_ = torch::zeros({total}, options);
  grad_shard_ = torch::zeros({total}, options);

  // The named views the optimizer updates, in the order of `params` (its groups sort names).
  std::vector<torch::Tensor> views(params.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    const Unit& u = units_[unit_of_entry_[i]];
    auto view = shard_.narrow(0, u.offset + e.offset, e.chunk).detach();
    view.copy_(shard_piece(e.param, shards_->rank(), W));
    view.set_requires_grad(true);  // a leaf the optimizer owns, like a parameter
    views_.push_back(view);
    views[order[i]] = view;
  }
  ShardLayout::NamedTensors out;
  for (size_t k = 0; k < params.size(); ++k)
    if (views[k].defined()) out.insert(params[k].key(), views[k]);

  for (size_t i = 0; i < entries_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(entries_[i].param);
    acc->add_post_hook(std::make_unique<GradReadyHook>([this, i] { on_grad_ready(i); }));
    accumulators_.push_back(std::move(acc));
  }
  return out;
}

void ShardedGradients::set_requires_sync(bool sync) {
  sync_ = sync;
  unfinished_ = int64_t(reached_.size()) - 1;
  for (auto& u : units_) {
    u.pending = u.entries.size();
    if (sync_) u.launched = false;
  }
}

// SHARD_GRAD_OP: every rank runs the same autograd graph, and the engine runs it in the
// same order, so collectives started from here follow one order on every rank. FULL_SHARD
// finishes its blocks from reached() instead, in block order: there a parameter's
// accumulator fires once for each recomputation that reads it, and with block_type moe the
// graphs differ between ranks (which experts get tokens), and so may the order in which a
// block's last gradients land. Its other unit waits for finish().
void ShardedGradients::on_grad_ready(size_t entry) {
  Unit& u = units_[unit_of_entry_[entry]];
  if (u.pending == 0 || --u.pending > 0) return;
  if (sync_ && options_.overlap && !options_.shard_parameters) launch(u);
}

void ShardedGradients::launch(Unit& u) {
  torch::NoGradGuard no_grad;
  const int W = shards_->size();
  u.flat = pool_.take(W * u.row, shard_.options().dtype(options_.reduce_dtype)).zero_().view({W, u.row});
  for (size_t i : u.entries) {
    Entry& e = entries_[i];
    if (!e.param.grad().defined()) continue;  // no gradient this step: zeros
    const auto g = e.param.grad().reshape(-1);
    for_each_chunk(e.param.numel(), e.chunk, W, [&](int r, int64_t begin, int64_t len) {
      u.flat[r].narrow(0, e.offset, len).copy_(g.narrow(0, begin, len));
    });
    // ZeRO-2's saving: once in the unit's buffer, the full gradient is not needed again.
    e.param.mutable_grad().reset();
  }
  auto out = options_.reduce_dtype == torch::kFloat ? grad_shard_.narrow(0, u.offset, u.row)
                                                    : pool_.take(u.row, u.flat.options());
  if (options_.reduce_dtype != torch::kFloat) u.reduced = out;
  u.flat = u.flat.view({-1});
  u.work = shards_->reduce_scatter_sum_async(out, u.flat);
  u.launched = true;
  in_flight_.push_back(size_t(&u - units_.data()));
  for (; in_flight_.size() > kReduceScattersInFlight; in_flight_.pop_front())
    complete(units_[in_flight_.front()]);
}

void ShardedGradients::complete(Unit& u) {
  const auto start = std::chrono::steady_clock::now();
  comm_.wait(u.work);
  blocked_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  u.work.reset();
  pool_.give(u.flat);
  if (u.reduced.defined()) {
    grad_shard_.narrow(0, u.offset, u.row).copy_(u.reduced);
    pool_.give(u.reduced);
  }
  if (replicas_) {
    auto mine = grad_shard_.narrow(0, u.offset, u.row);
    u.replica_sum = replicas_->all_reduce_sum_async(mine);
  }
}

void ShardedGradients::finish() {
  TORCH_CHECK(sync_, "ShardedGradients::finish() without set_requires_sync(true)");
  // All of this blocks the step, the waits complete() counts included.
  const auto start = std::chrono::steady_clock::now();
  const double blocked_before = blocked_seconds_;
  // Units without a gradient this step, or all of them without overlap: now, in the same
  // order on every rank.
  for (int64_t l = unfinished_; l >= 0; --l) finish_layer(l);
  for (auto& u : units_) {
    if (!u.launched) launch(u);
    if (releases(u)) release(u);
  }
  for (; !in_flight_.empty(); in_flight_.pop_front()) complete(units_[in_flight_.front()]);
  for (auto& u : units_)
    if (u.replica_sum) {
      comm_.wait(u.replica_sum);
      u.replica_sum.reset();
    }
  // The optimizer's zero_grad() let go of them at the start of the step.
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Unit& u = units_[unit_of_entry_[i]];
    views_[i].mutable_grad() = grad_shard_.narrow(0, u.offset + entries_[i].offset, entries_[i].chunk);
  }
  sync_ = false;
  blocked_seconds_ =
      blocked_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ShardedGradients::after_update() {
  torch::NoGradGuard no_grad;
  const int W = shards_->size();
  for (auto& u : units_) {
    if (u.released) continue;  // gathered from the updated shard when its block next runs
    auto flat = pool_.take(W * u.row, shard_.options());
    auto mine = pool_.take(u.row, shard_.options()).copy_(shard_.narrow(0, u.offset, u.row));
    comm_.wait(shards_->all_gather_async(flat, mine));
    const auto rows = flat.view({W, u.row});
    for (size_t i : u.entries) {
      Entry& e = entries_[i];
      auto p = e.param.view({-1});
      for_each_chunk(e.param.numel(), e.chunk, W, [&](int r, int64_t begin, int64_t len) {
        p.narrow(0, begin, len).copy_(rows[r].narrow(0, e.offset, len));
      });
    }
    pool_.give(flat);
    pool_.give(mine);
  }
}

void ShardedGradients::params_changed() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < entries_.size(); ++i)
    if (!units_[unit_of_entry_[i]].released)  // a released unit's shard is its only copy
      views_[i].copy_(shard_piece(entries_[i].param, shards_->rank(), shards_->size()));
}

// The parameters kept whole, and the float32 master shard, which for FULL_SHARD's blocks is
// the only copy.
int64_t ShardedGradients::parameter_bytes(int64_t param_bytes) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (releases(units_[unit_of_entry_[i]])) param_bytes -= entries_[i].param.nbytes();
  return param_bytes + (shard_.defined() ? shard_.nbytes() : 0);
}

void ShardedGradients::gather(Unit& u) {
  if (!u.released) return;
  torch::NoGradGuard no_grad;
  const int W = shards_->size();
  if (!u.gathering) prefetch_unit(u);
  comm_.wait(u.gathering);
  u.gathering.reset();
  const auto rows = u.gathered.view({W, u.row});
  u.storage =
      pool_.take(u.storage_bytes, torch::TensorOptions().dtype(torch::kUInt8).device(shard_.device()));
  auto* base = static_cast<uint8_t*>(u.storage.data_ptr());
  int64_t at = 0;
  for (size_t i : u.entries) {
    Entry& e = entries_[i];
    c10::StorageImpl* storage = e.param.storage().unsafeGetStorageImpl();
    // The unit's buffer owns the bytes; release() hands it back to the pool.
    storage->set_data_ptr_noswap(at::DataPtr(base + at, e.param.device()));
    storage->set_nbytes(e.param.nbytes());
    at += aligned(int64_t(e.param.nbytes()));
    // Written through a tensor with its own version counter: autograd's saved references to
    // the parameter must not see an in-place change.
    auto p = e.param.variable_data().view({-1});
    for_each_chunk(e.param.numel(), e.chunk, W, [&](int r, int64_t begin, int64_t len) {
      p.narrow(0, begin, len).copy_(rows[r].narrow(0, e.offset, len));
    });
  }
  pool_.give(u.gathered);
  pool_.give(u.gather_input);
  u.released = false;
}

void ShardedGradients::prefetch_unit(Unit& u) {
  if (!u.released || u.gathering) return;
  u.gathered = pool_.take(shards_->size() * u.row, shard_.options());
  u.gather_input = pool_.take(u.row, shard_.options()).copy_(shard_.narrow(0, u.offset, u.row));
  u.gathering = shards_->all_gather_async(u.gathered, u.gather_input);
}

void ShardedGradients::release(Unit& u) {
  if (u.released || !releases(u)) return;
  for (size_t i : u.entries) {
    c10::StorageImpl* storage = entries_[i].param.storage().unsafeGetStorageImpl();
    storage->set_data_ptr_noswap(at::DataPtr(nullptr, entries_[i].param.device()));
    storage->set_nbytes(0);
  }
  pool_.give(u.storage);
  u.released = true;
}

void ShardedGradients::for_layer(int64_t layer, const std::function<void(Unit&)>& fn) {
  const auto it = units_of_layer_.find(layer);
  if (it == units_of_layer_.end()) return;
  for (size_t i : it->second) fn(units_[i]);
}

// A block may read the next block's parameters too (SiameseNorm fuses the next sublayer's
// input norm into its stream update), so that one is whole as well; the one after is on
// its way meanwhile. In backward a block's parameters stay until their last gradient has
// accumulated, which is after their last use wherever it is.
void ShardedGradients::before_block(int64_t layer) {
  for_layer(layer, [this](Unit& u) { gather(u); });
  for_layer(layer + 1, [this](Unit& u) { gather(u); });
  for_layer(layer + 2, [this](Unit& u) { prefetch_unit(u); });
}

void ShardedGradients::after_block(int64_t layer, const std::vector<torch::Tensor>& before,
                                   const std::vector<torch::Tensor>& after) {
  if (layer < int64_t(reached_.size())) reached_[size_t(layer)] = false;
  // A stream the block passed through unchanged leads backward to earlier blocks only.
  const auto passed_through = [&](const torch::Tensor& t) {
    return std::any_of(before.begin(), before.end(), [&](const torch::Tensor& b) { return t.is_same(b); });
  };
  for (const auto& t : after)
    if (t.requires_grad() && !passed_through(t))
      t.register_hook([this, layer](const torch::Tensor&) { reached(layer); });
  for_layer(layer, [this](Unit& u) { release(u); });
}

void ShardedGradients::reached(int64_t layer) {
  if (layer >= int64_t(reached_.size()) || reached_[size_t(layer)]) return;
  reached_[size_t(layer)] = true;
  for_layer(layer, [this](Unit& u) { gather(u); });
  // A block's backward (recomputed or not) ran whole before backward reaches the block below
  // it, and reads its own parameters and the next block's: two blocks up, the gradients are
  // final.
  for (; unfinished_ >= layer + 2; --unfinished_) finish_layer(unfinished_);
  for_layer(layer - 1, [this](Unit& u) { prefetch_unit(u); });
}

void ShardedGradients::finish_layer(int64_t layer) {
  for_layer(layer, [this](Unit& u) {
    if (sync_ && options_.overlap && !u.launched) launch(u);
    release(u);
  });
}

void ShardedGradients::make_params_whole() {
  if (!whole_) pool_before_whole_ = pool_.bytes();
  whole_ = true;
  for (auto& u : units_) gather(u);
}

// What the blocks held whole at once goes back to the allocator: a save or an export must
// not leave every block's storage in the pool for the rest of the run.
void ShardedGradients::release_params() {
  for (auto& u : units_) release(u);
  if (whole_) pool_.shrink_to(pool_before_whole_);
  whole_ = false;
}

torch::Tensor ShardedGradients::shard_of(const torch::Tensor& whole) {
  return shard_piece(whole, shards_->rank(), shards_->size());
}

torch::Tensor ShardedGradients::whole_of(const torch::Tensor& piece, at::IntArrayRef shape) {
  auto mine = piece.contiguous();
  auto rows = torch::empty({shards_->size() * mine.numel()}, mine.options());
  comm_.wait(shards_->all_gather_async(rows, mine));
  return unshard({rows}, shape);
}

double ShardedGradients::take_comm_seconds() {
  const double s = blocked_seconds_;
  blocked_seconds_ = 0;
  return s;
}

std::string ShardedGradients::name() const {
  const std::string reduced =
      options_.reduce_dtype == torch::kFloat
          ? ""
          : std::string(", gradients reduced in ") + c10::toString(options_.reduce_dtype);
  if (replicas_)
    return "fsdp HYBRID_SHARD (FULL_SHARD over " + std::to_string(shards_->size()) + " ranks, " +
           std::to_string(replicas_->size()) + " replicas" + reduced + ")";
  return options_.shard_parameters
             ? "fsdp FULL_SHARD (parameters, gradients and optimizer state sharded" + reduced + ")"
             : "fsdp SHARD_GRAD_OP (gradients and optimizer state sharded" + reduced + ")";
}

void GatheredBlocks::run(int64_t layer, std::vector<torch::Tensor>& streams,
                         const std::function<void()>& block) {
  shards_.before_block(layer);
  const std::vector<torch::Tensor> before = streams;
  block();
  shards_.after_block(layer, before, streams);
}

}  // namespace siamese::dist
