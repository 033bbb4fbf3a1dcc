#include "siamese/train/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <vector>

#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "siamese/common/mapped_archive.h"
#include "siamese/common/sha256.h"
#include "siamese/common/step_folder.h"
#include "siamese/config/load.h"
#include "siamese/config/schema.h"
#include "siamese/dist/sharded.h"
#include "siamese/train/checkpoint_writer.h"

namespace siamese::train {

namespace fs = std::filesystem;

namespace {

torch::Tensor scalar(int64_t v) { return torch::tensor(v, torch::kInt64); }

// Host memory that training cannot change while it is written, or `t` itself on the host.
torch::Tensor host_copy(const std::string& name, const torch::Tensor& t, HostStaging* staging) {
  if (staging) return staging->copy(name, t);
  return t.detach().to(torch::kCPU);
}

// The layout fields of a manifest; older manifests lack the parts, written by one process.
struct SavedLayout {
  int64_t model_parts = 1, optimizer_shards = 1, optimizer_parts = 1;
  explicit SavedLayout(const nlohmann::json& manifest)
      : model_parts(manifest.value("model_parts", int64_t(1))),
        optimizer_shards(manifest.value("optimizer_shards", int64_t(1))),
        optimizer_parts(manifest.value("optimizer_parts", int64_t(1))) {}
};

nlohmann::json read_manifest(const fs::path& folder) {
  std::ifstream in(folder / kCheckpointManifest);
  return nlohmann::json::parse(in);
}

std::vector<std::string> model_file_names(const SavedLayout& l) {
  if (l.model_parts == 1) return {"model.pt"};
  std::vector<std::string> names;
  for (int64_t r = 0; r < l.model_parts; ++r) names.push_back(model_part_name(int(r), int(l.model_parts)));
  return names;
}

// optim.pt (state of whole parameters), one optim_shard<r>of<N>.pt per rank of a sharded
// run, or one optim_part<r>of<N>.pt per ddp rank, in rank order.
std::vector<std::string> optimizer_file_names(const SavedLayout& l) {
  std::vector<std::string> names;
  if (l.optimizer_shards > 1)
    for (int64_t r = 0; r < l.optimizer_shards; ++r)
      names.push_back(optimizer_shard_name(int(r), int(l.optimizer_shards)));
  else if (l.optimizer_parts > 1)
    for (int64_t r = 0; r < l.optimizer_parts; ++r)
      names.push_back(optimizer_part_name(int(r), int(l.optimizer_parts)));
  else
    names.push_back("optim.pt");
  return names;
}

// Mapped, not read: a resume holds the live state and the page cache, not a second copy of
// every tensor (common/mapped_archive.h).
std::vector<MappedArchive> open_archives(const fs::path& folder, const std::vector<std::string>& names) {
  std::vector<MappedArchive> archives;
  for (const auto& name : names) archives.emplace_back((folder / name).string());
  return archives;
}

// The writer of each model tensor: the largest first, each to the writer with the fewest
// bytes so far, so that every rank writes about 1/parts of the model. Names and sizes alone
// decide it, so every rank computes the same owners.
std::map<std::string, int> part_owners(torch::nn::Module& model, int parts) {
  std::vector<std::pair<int64_t, std::string>> sizes;
  for (const auto& kv : model.named_parameters()) sizes.emplace_back(kv.value().nbytes(), kv.key());
  for (const auto& kv : model.named_buffers()) sizes.emplace_back(kv.value().nbytes(), kv.key());
  std::sort(sizes.begin(), sizes.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<int64_t> load(size_t(parts), 0);
  std::map<std::string, int> owner;
  for (const auto& [bytes, name] : sizes) {
    const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
    load[size_t(r)] += bytes;
    owner[name] = r;
  }
  return owner;
}

// Parameters and buffers by name. Module::load would set_() each tensor to the stored one,
// which fails for tensors that share or view storage; copying in place keeps every alias.
// Each tensor is read from the one file that holds it.
void load_tensors(torch::nn::Module& model, const fs::path& folder, const SavedLayout& layout) {
  const auto names = model_file_names(layout);
  auto archives = open_archives(folder, names);
  torch::NoGradGuard no_grad;
  auto restore = [&](const std::string& name, torch::Tensor& target) {
    std::optional<torch::Tensor> stored;
    size_t i = 0;
    while (i < archives.size() && !(stored = archives[i].find(name))) ++i;
    if (!stored)
      throw Error(name + " is in none of the checkpoint's model files", folder.string(),
                  "load it with the config it was saved with (config.yaml there)");
    if (stored->sizes() != target.sizes())
      throw Error(fmt::format("{} has shape {} in the checkpoint but {} in the model", name,
                              fmt::join(stored->sizes(), "x"), fmt::join(target.sizes(), "x")),
                  (folder / names[i]).string(),
                  "load it with the config it was saved with (config.yaml there)");
    target.copy_(*stored);
  };
  for (auto& kv : model.named_parameters()) restore(kv.key(), kv.value());
  for (auto& kv : model.named_buffers()) restore(kv.key(), kv.value());
}

// Optimizer state by parameter name: AdamW's step and moments, Muon's momentum buffer, of
// what the optimizer updates (Optimizer::named_params): the parameters, or under a sharded
// strategy this rank's flat shard of each; `mine` picks the names this file holds.
// LibTorch's own optimizer archive keys state by tensor addresses and did not restore a run
// bit for bit here; names also keep the file readable.
std::vector<ArchiveEntry> optimizer_entries(Optimizer& optim,
                                            const std::function<bool(const std::string&)>& mine,
                                            HostStaging* staging) {
  std::vector<ArchiveEntry> out;
  auto& state = optim.adamw().state();
  Muon* muon = optim.muon();
  for (const auto& kv : optim.named_params()) {
    if (!mine(kv.key())) continue;
    if (muon && muon->owns(kv.value())) {
      const torch::Tensor& buffer = muon->momentum_buffer(kv.value());
      const std::string key = kv.key() + ".momentum_buffer";
      if (buffer.defined()) out.push_back({key, host_copy("optim." + key, buffer, staging), true});
      continue;
    }
    auto it = state.find(kv.value().unsafeGetTensorImpl());
    if (it == state.end()) continue;
    const auto& s = static_cast<const AdamWState&>(*it->second);
    out.push_back({kv.key() + ".step", scalar(static_cast<int64_t>(s.step_count.item<double>()))});
    for (const auto& [key, value] : {std::pair{kv.key() + ".exp_avg", &s.exp_avg()},
                                     std::pair{kv.key() + ".exp_avg_sq", &s.exp_avg_sq()}})
      out.push_back({key, host_copy("optim." + key, *value, staging), true});
  }
  return out;
}

// A parameter without state in the files (never updated, or updated by the other optimizer
// before optimizer.name changed) starts afresh. State saved by N ranks is put together
// whole, then cut into this run's shards (`layout`), so the world size may change on resume.
// Flat shards hold a piece of every entry; parts (and optim.pt) hold each entry whole, once.
void load_optimizer(torch::nn::Module& model, Optimizer& optim, const fs::path& folder,
                    const SavedLayout& saved, dist::ShardLayout& layout) {
  auto archives = open_archives(folder, optimizer_file_names(saved));
  const bool sharded = saved.optimizer_shards > 1;
  const auto params = model.named_parameters();
  auto pieces_of = [&](const std::string& key) {
    std::vector<torch::Tensor> pieces;
    for (const auto& a : archives)
      if (const auto t = a.find(key)) pieces.push_back(t->reshape(-1));
    return pieces;
  };
  auto whole = [&](const std::string& key, const torch::Tensor& param) -> std::optional<torch::Tensor> {
    const auto pieces = pieces_of(key);
    if (pieces.size() != (sharded ? archives.size() : 1)) return std::nullopt;
    return layout.shard_of(dist::unshard(pieces, param.sizes())).to(param.device());
  };
  auto& state = optim.adamw().state();
  state.clear();
  Muon* muon = optim.muon();
  for (const auto& kv : optim.named_params()) {
    const torch::Tensor& param = params[kv.key()];
    if (muon && muon->owns(kv.value())) {
      muon->momentum_buffer(kv.value()) =
          whole(kv.key() + ".momentum_buffer", param).value_or(torch::Tensor());
      continue;
    }
    const auto steps = pieces_of(kv.key() + ".step");
    if (steps.empty()) continue;
    const torch::Tensor step = steps.front();
    auto exp_avg = whole(kv.key() + ".exp_avg", param), exp_avg_sq = whole(kv.key() + ".exp_avg_sq", param);
    if (!exp_avg || !exp_avg_sq)
      throw Error("the optimizer state of " + kv.key() + " is incomplete", folder.string(),
                  "resume from another checkpoint");
    auto& s = optim.adamw().state_of(kv.value());
    s.step_count.fill_(static_cast<double>(step.item<int64_t>()));
    s.exp_avg(*exp_avg);
    s.exp_avg_sq(*exp_avg_sq);
  }
}

}  // namespace

torch::Tensor HostStaging::copy(const std::string& name, const torch::Tensor& t) {
  auto& buffer = buffers_[name];
  if (!buffer.defined() || buffer.sizes() != t.sizes() || buffer.dtype() != t.dtype()) {
    buffer = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(t.is_cuda()));
    ++allocations_;
  }
  buffer.copy_(t.detach(), /*non_blocking=*/t.is_cuda());
  pending_ = pending_ || t.is_cuda();
  return buffer;
}

int64_t HostStaging::bytes() const {
  int64_t n = 0;
  for (const auto& [name, b] : buffers_) n += b.nbytes();
  return n;
}

void HostStaging::synchronize() {
  if (pending_) torch::cuda::synchronize();
  pending_ = false;
}

std::string optimizer_shard_name(int rank, int shards) {
  return fmt::format("optim_shard{}of{}.pt", rank, shards);
}
std::string optimizer_part_name(int rank, int parts) {
  return fmt::format("optim_part{}of{}.pt", rank, parts);
}
std::string model_part_name(int rank, int parts) { return fmt::format("model_part{}of{}.pt", rank, parts); }

nlohmann::ordered_json manifest_head(int64_t step, const PartLayout& layout, const std::string& config_yaml) {
  return {{"step", step},
          {"model_parts", layout.parts},
          {"optimizer_shards", layout.optimizer_shards},
          {"optimizer_parts", layout.optimizer_shards > 1 ? 1 : layout.parts},
          {"config", config_yaml}};
}

std::vector<CheckpointFile> snapshot_checkpoint(torch::nn::Module& model, Optimizer& optim,
                                                const TrainState& state, const std::string& config_yaml,
                                                const PartLayout& layout, HostStaging* staging,
                                                const std::vector<const Stateful*>& tracked) {
  std::vector<CheckpointFile> files;
  const bool whole = layout.parts == 1;
  const auto owner = part_owners(model, layout.parts);
  const auto mine = [&](const std::string& name) { return owner.at(name) == layout.rank; };
  auto tensors = CheckpointFile::of_tensors(whole ? "model.pt" : model_part_name(layout.rank, layout.parts));
  for (const auto& kv : model.named_parameters())
    if (mine(kv.key()))
      tensors.tensors.push_back({kv.key(), host_copy("model." + kv.key(), kv.value(), staging)});
  for (const auto& kv : model.named_buffers())
    if (mine(kv.key()))
      tensors.tensors.push_back({kv.key(), host_copy("model." + kv.key(), kv.value(), staging), true});
  files.push_back(std::move(tensors));
  if (layout.optimizer_shards > 1) {
    if (layout.optimizer_shard_rank >= 0)
      files.push_back(CheckpointFile::of_tensors(
          optimizer_shard_name(layout.optimizer_shard_rank, layout.optimizer_shards),
          optimizer_entries(
              optim, [](const std::string&) { return true; }, staging)));
  } else {
    files.push_back(
        CheckpointFile::of_tensors(whole ? "optim.pt" : optimizer_part_name(layout.rank, layout.parts),
                                   optimizer_entries(optim, mine, staging)));
  }
  if (staging) staging->synchronize();
  if (layout.rank != 0) return files;

  StateDict entries = state.state_dict();
  for (const Stateful* component : tracked) {
    for (auto& entry : component->state_dict()) {
      TORCH_CHECK(!state_entry(entries, entry.first).defined(), "two checkpointed components name ",
                  entry.first);
      // Small, and of a component's choosing: a copy of its own (state_dict() may hand out views).
      entries.push_back({entry.first, entry.second.detach().to(torch::kCPU, false, /*copy=*/true)});
    }
  }
  auto train_state = CheckpointFile::of_tensors("train_state.pt");
  for (const auto& [name, value] : entries) train_state.tensors.push_back({name, value});
  train_state.tensors.push_back({"rng_cpu", at::detail::getDefaultCPUGenerator().get_state()});
  if (torch::cuda::is_available())
    // The current device's generator: the rank's own GPU (runtime.h).
    train_state.tensors.push_back(
        {"rng_cuda", at::globalContext().defaultGenerator(torch::kCUDA).get_state()});
  files.push_back(std::move(train_state));
  nlohmann::ordered_json scalars;
  for (const auto& [name, value] : entries)
    if (value.numel() == 1) {
      if (value.is_floating_point())
        scalars[name] = value.item<double>();
      else
        scalars[name] = value.item<int64_t>();
    }
  files.push_back(CheckpointFile::of_text("train_state.json", scalars.dump() + "\n"));
  files.push_back(CheckpointFile::of_text("config.yaml", config_yaml));
  return files;
}

fs::path save_checkpoint(const fs::path& save_folder, torch::nn::Module& model, Optimizer& optim,
                         const TrainState& state, const std::string& config_yaml,
                         const std::vector<const Stateful*>& tracked) {
  const PartLayout one;
  CheckpointWriter writer;
  writer.start({save_folder, state.step, one,
                snapshot_checkpoint(model, optim, state, config_yaml, one, nullptr, tracked), config_yaml,
                long(::getpid())});
  try {
    writer.wait_written();
    writer.wait_sealed();
  } catch (...) {
    writer.discard();
    throw;
  }
  return save_folder / step_folder_name(state.step);
}

namespace {

// The loader opens the files that the layout fields name: they must be the ones the manifest
// lists (and so verified), or a resume would read past them (0 shards) or open a file that is
// not there.
std::optional<std::string> layout_problem(const nlohmann::json& manifest) {
  std::set<std::string> model_listed, optim_listed;
  for (const auto& [name, entry] : manifest.at("files").items()) {
    if (name.rfind("model", 0) == 0) model_listed.insert(name);
    if (name.rfind("optim", 0) == 0) optim_listed.insert(name);
  }
  const auto listing = [](const std::set<std::string>& names) {
    return names.empty() ? std::string("(none)") : fmt::format("{}", fmt::join(names, ", "));
  };
  // More parts than listed files cannot match; the bound keeps a huge count from looping.
  const auto count_problem = [&](const char* key, const std::set<std::string>& listed,
                                 const char* what) -> std::optional<std::string> {
    const nlohmann::json n = manifest.value(key, nlohmann::json(1));
    if (n.is_number_integer() && n.get<int64_t>() >= 1 && n.get<int64_t>() <= int64_t(listed.size()))
      return std::nullopt;
    return fmt::format("manifest.json says {} {} but lists the {} files {}", key, n.dump(), what,
                       listing(listed));
  };
  for (const auto& [key, listed, what] : {std::tuple{"model_parts", &model_listed, "model"},
                                          std::tuple{"optimizer_shards", &optim_listed, "optimizer"},
                                          std::tuple{"optimizer_parts", &optim_listed, "optimizer"}})
    if (const auto problem = count_problem(key, *listed, what)) return problem;
  const SavedLayout layout(manifest);
  const auto model_names = model_file_names(layout), optim_names = optimizer_file_names(layout);
  if (std::set<std::string>(model_names.begin(), model_names.end()) != model_listed)
    return fmt::format("manifest.json says model_parts {} but lists the model files {}", layout.model_parts,
                       listing(model_listed));
  if (std::set<std::string>(optim_names.begin(), optim_names.end()) != optim_listed)
    return fmt::format(
        "manifest.json says optimizer_shards {} and optimizer_parts {} but lists the optimizer "
        "files {}",
        layout.optimizer_shards, layout.optimizer_parts, listing(optim_listed));
  return std::nullopt;
}

}  // namespace

std::optional<std::string> checkpoint_problem(const fs::path& folder) {
  const fs::path manifest_path = folder / kCheckpointManifest;
  if (!fs::exists(manifest_path))
    return "no manifest.json (the save did not finish, or it is not a checkpoint folder)";
  nlohmann::json manifest;
  try {
    std::ifstream in(manifest_path);
    manifest = nlohmann::json::parse(in);
    if (const auto problem = layout_problem(manifest)) return problem;
    for (const auto& [name, entry] : manifest.at("files").items()) {
      const fs::path file = folder / name;
      std::error_code ec;
      const auto size = fs::file_size(file, ec);
      if (ec) return fmt::format("{} is missing", name);
      const auto want = entry.at("bytes").get<uintmax_t>();
      if (size != want) return fmt::format("{} has {} bytes, the manifest says {}", name, size, want);
      if (sha256_file(file.string()) != entry.at("sha256").get<std::string>())
        return fmt::format("{} does not match its sha256 in the manifest (its bytes changed)", name);
    }
    for (const char* required : {"train_state.pt", "config.yaml"})
      if (!manifest["files"].contains(required)) return fmt::format("the manifest lists no {}", required);
    std::ifstream config(folder / "config.yaml", std::ios::binary);
    if (manifest.at("config").get<std::string>() != std::string(std::istreambuf_iterator<char>(config), {}))
      return "the config in manifest.json differs from config.yaml";
  } catch (const nlohmann::json::exception& e) {
    return fmt::format("manifest.json is not a valid manifest ({})", e.what());
  } catch (const Error& e) {
    return e.problem();
  }
  return std::nullopt;
}

namespace {

config::TrainConfig saved_config(const fs::path& folder) {
  try {
    return config::load_config((folder / "config.yaml").string(), {});
  } catch (const Error& e) {
    throw Error("cannot read the checkpoint's config: " + e.problem(), e.where(),
                "resume from an intact checkpoint");
  }
}

// The saved config is read through the schema like any config, and every model key that
// changes what the weights compute is compared as text.
void check_same_model(const fs::path& folder, const config::ModelConfig& model) {
  const fs::path saved_path = folder / "config.yaml";
  const config::TrainConfig saved = saved_config(folder);
  config::TrainConfig current;
  current.model = model;
  std::vector<std::string> differ;
  for (const auto& f : config::schema::train_fields()) {
    if (f.key.rfind("model.", 0) != 0 || f.resume_may_change) continue;
    const std::string was = config::schema::value_text(f, saved),
                      now = config::schema::value_text(f, current);
    if (was != now) differ.push_back(fmt::format("{} (checkpoint {}, config {})", f.key, was, now));
  }
  if (!differ.empty())
    throw Error(fmt::format("the checkpoint was trained with another model: {}", fmt::join(differ, "; ")),
                folder.string(),
                "resume with the model settings in " + saved_path.string() +
                    ", or start a new run in another save_folder");
}

}  // namespace

StateDict TrainState::state_dict() const {
  return {{"step", scalar(step)}, {"tokens", scalar(tokens)}, {"bad_steps", scalar(bad_steps)}};
}

void TrainState::load_state_dict(const StateDict& state) {
  auto read = [&](const char* key) {
    const auto t = state_entry(state, key);
    TORCH_CHECK(t.defined(), "train_state.pt has no ", key);
    return t.item<int64_t>();
  };
  step = read("step");
  tokens = read("tokens");
  bad_steps = read("bad_steps");
}

TrainState load_checkpoint(const fs::path& folder, torch::nn::Module& model, Optimizer* optim,
                           const config::ModelConfig* same_model, dist::ParallelPlan* plan,
                           const std::vector<Stateful*>& tracked, ManifestCheck check) {
  std::optional<std::string> problem;
  if (check == ManifestCheck::Verify)
    problem = checkpoint_problem(folder);
  else if (!fs::exists(folder / kCheckpointManifest))
    problem = "no manifest.json";
  if (problem)
    throw Error("not an intact checkpoint: " + *problem, folder.string(),
                "point load_path at another save_folder/step<N> folder (an older one)");
  if (same_model) check_same_model(folder, *same_model);
  try {
    const SavedLayout saved(read_manifest(folder));
    load_tensors(model, folder, saved);
    dist::ParallelPlan one_process;
    dist::ParallelPlan& ranks = plan ? *plan : one_process;
    ranks.gradients().params_changed();
    if (optim) load_optimizer(model, *optim, folder, saved, ranks.layout());
    const MappedArchive a((folder / "train_state.pt").string());
    // Copies: components keep what they are given, and the mapping goes with the archive.
    auto read = [&](const std::string& key) {
      const auto t = a.find(key);
      if (!t) throw Error("train_state.pt has no " + key, folder.string(), "resume from another checkpoint");
      return t->clone();
    };
    StateDict entries;
    for (const auto& key : a.keys())
      if (key != "rng_cpu" && key != "rng_cuda") entries.emplace_back(key, read(key));
    TrainState s;
    s.load_state_dict(entries);
    for (Stateful* component : tracked) component->load_state_dict(entries);
    at::Generator cpu_generator = at::detail::getDefaultCPUGenerator();
    cpu_generator.set_state(read("rng_cpu"));
    if (torch::cuda::is_available() && a.find("rng_cuda")) {
      at::Generator cuda_generator = at::globalContext().defaultGenerator(torch::kCUDA);
      cuda_generator.set_state(read("rng_cuda"));
    }
    return s;
  } catch (const c10::Error& e) {
    throw Error(std::string("checkpoint does not match this model/optimizer: ") + e.what_without_backtrace(),
                folder.string(), "load it with the config it was saved with (config.yaml there)");
  }
}

std::map<std::string, std::string> saved_settings(const fs::path& folder) {
  return config::schema::training_settings(saved_config(folder));
}

}  // namespace siamese::train
