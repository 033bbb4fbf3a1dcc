#include "siamese/train/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "siamese/common/sha256.h"
#include "siamese/common/step_folder.h"
#include "siamese/config/load.h"
#include "siamese/config/schema.h"
#include "siamese/dist/sharded.h"

namespace siamese::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDiskFullFix =
    "free disk space or point save_folder at a disk with room; the earlier checkpoints are untouched and "
    "the run resumes from the newest of them";

torch::Tensor scalar(int64_t v) { return torch::tensor(v, torch::kInt64); }

void save_archive(torch::serialize::OutputArchive& a, FileSink& sink) {
  a.save_to([&sink](const void* data, size_t n) { return sink.write(data, n); });
}

// Parameters and buffers by name. Module::load would set_() each tensor to the stored one,
// which fails for tensors that share or view storage; copying in place keeps every alias.
void save_tensors(torch::nn::Module& model, FileSink& file) {
  torch::serialize::OutputArchive a;
  for (const auto& kv : model.named_parameters()) a.write(kv.key(), kv.value().detach());
  for (const auto& kv : model.named_buffers()) a.write(kv.key(), kv.value(), /*is_buffer=*/true);
  save_archive(a, file);
}

void load_tensors(torch::nn::Module& model, const fs::path& file) {
  torch::serialize::InputArchive a;
  a.load_from(file.string());
  torch::NoGradGuard no_grad;
  auto restore = [&](const std::string& name, torch::Tensor& target, bool is_buffer) {
    torch::Tensor stored;
    a.read(name, stored, is_buffer);
    if (stored.sizes() != target.sizes())
      throw Error(fmt::format("{} has shape {} in the checkpoint but {} in the model", name,
                              fmt::join(stored.sizes(), "x"), fmt::join(target.sizes(), "x")),
                  file.string(), "load it with the config it was saved with (config.yaml there)");
    target.copy_(stored);
  };
  for (auto& kv : model.named_parameters()) restore(kv.key(), kv.value(), false);
  for (auto& kv : model.named_buffers()) restore(kv.key(), kv.value(), true);
}

// Optimizer state by parameter name: AdamW's step and moments, Muon's momentum buffer, of
// what the optimizer updates (Optimizer::named_params): the parameters, or under a sharded
// strategy this rank's flat shard of each. LibTorch's own optimizer archive keys state by
// tensor addresses and did not restore a run bit for bit here; names also keep the file
// readable.
void save_optimizer(Optimizer& optim, FileSink& file) {
  torch::serialize::OutputArchive a;
  auto& state = optim.adamw().state();
  Muon* muon = optim.muon();
  for (const auto& kv : optim.named_params()) {
    if (muon && muon->owns(kv.value())) {
      const torch::Tensor& buffer = muon->momentum_buffer(kv.value());
      if (buffer.defined()) a.write(kv.key() + ".momentum_buffer", buffer, true);
      continue;
    }
    auto it = state.find(kv.value().unsafeGetTensorImpl());
    if (it == state.end()) continue;
    const auto& s = static_cast<const AdamWState&>(*it->second);
    a.write(kv.key() + ".step", scalar(static_cast<int64_t>(s.step_count.item<double>())));
    a.write(kv.key() + ".exp_avg", s.exp_avg(), true);
    a.write(kv.key() + ".exp_avg_sq", s.exp_avg_sq(), true);
  }
  save_archive(a, file);
}

// The optimizer files of a checkpoint: optim.pt (state of whole parameters), or one
// optim_shard<r>of<N>.pt per rank of a sharded run, in rank order.
std::vector<fs::path> optimizer_files(const fs::path& folder) {
  std::ifstream in(folder / kCheckpointManifest);
  const nlohmann::json manifest = nlohmann::json::parse(in);
  const int64_t shards = manifest.value("optimizer_shards", int64_t(1));
  if (shards == 1) return {folder / "optim.pt"};
  std::vector<fs::path> files;
  for (int64_t r = 0; r < shards; ++r) files.push_back(folder / optimizer_shard_name(int(r), int(shards)));
  return files;
}

// A parameter without state in the files (never updated, or updated by the other optimizer
// before optimizer.name changed) starts afresh. State saved by N ranks is put together
// whole, then cut into this run's shards (`layout`), so the world size may change on resume.
void load_optimizer(torch::nn::Module& model, Optimizer& optim, const std::vector<fs::path>& files,
                    dist::ShardLayout& layout) {
  std::vector<torch::serialize::InputArchive> archives(files.size());
  for (size_t i = 0; i < files.size(); ++i) archives[i].load_from(files[i].string());
  const auto params = model.named_parameters();
  auto whole = [&](const std::string& key, const torch::Tensor& param) -> std::optional<torch::Tensor> {
    std::vector<torch::Tensor> pieces;
    for (auto& a : archives) {
      torch::Tensor t;
      if (!a.try_read(key, t, true)) return std::nullopt;
      pieces.push_back(t.reshape(-1));
    }
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
    torch::Tensor step;
    if (!archives.front().try_read(kv.key() + ".step", step)) continue;
    auto exp_avg = whole(kv.key() + ".exp_avg", param), exp_avg_sq = whole(kv.key() + ".exp_avg_sq", param);
    if (!exp_avg || !exp_avg_sq)
      throw Error("the optimizer state of " + kv.key() + " is incomplete",
                  files.front().parent_path().string(), "resume from another checkpoint");
    auto& s = optim.adamw().state_of(kv.value());
    s.step_count.fill_(static_cast<double>(step.item<int64_t>()));
    s.exp_avg(*exp_avg);
    s.exp_avg_sq(*exp_avg_sq);
  }
}

}  // namespace

std::string optimizer_shard_name(int rank, int shards) {
  return fmt::format("optim_shard{}of{}.pt", rank, shards);
}

fs::path optimizer_shard_folder(const fs::path& save_folder, int64_t step, int shards) {
  return save_folder / fmt::format(".{}.shards-{}", step_folder_name(step), shards);
}

void save_optimizer_shard(const fs::path& save_folder, int64_t step, Optimizer& optim, int rank, int shards) {
  if (shards == 1 || rank < 0) return;
  const fs::path folder = optimizer_shard_folder(save_folder, step, shards);
  const std::string name = optimizer_shard_name(rank, shards);
  try {
    fs::create_directories(folder);
    FileSink sink(folder / name, kDiskFullFix);
    save_optimizer(optim, sink);
    sink.close();
    // The shard's own manifest: rank 0 checks the shard against it before it counts.
    FileSink manifest(folder / (name + ".json"), kDiskFullFix);
    manifest.write(
        nlohmann::ordered_json{{"file", name}, {"bytes", sink.bytes()}, {"sha256", sink.sha256()}}.dump(2) +
        "\n");
    manifest.close();
  } catch (const fs::filesystem_error& e) {
    throw write_error(e.path1().empty() ? folder : e.path1(), e.code().value(), kDiskFullFix);
  }
}

fs::path save_checkpoint(const fs::path& save_folder, torch::nn::Module& model, Optimizer& optim,
                         const TrainState& state, const std::string& config_yaml, int optimizer_shards,
                         const std::vector<const Stateful*>& tracked) {
  StateDict entries = state.state_dict();
  for (const Stateful* component : tracked) {
    for (auto& entry : component->state_dict()) {
      TORCH_CHECK(!state_entry(entries, entry.first).defined(), "two checkpointed components name ",
                  entry.first);
      entries.push_back(std::move(entry));
    }
  }
  const fs::path final_dir = save_folder / step_folder_name(state.step);
  const fs::path tmp = scratch_path(final_dir, "tmp");
  try {
    fs::create_directories(save_folder);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    nlohmann::ordered_json files;
    auto write_file = [&](const std::string& name, auto&& body) {
      FileSink sink(tmp / name, kDiskFullFix);
      body(sink);
      sink.close();
      files[name] = {{"bytes", sink.bytes()}, {"sha256", sink.sha256()}};
    };
    write_file("model.pt", [&](FileSink& f) { save_tensors(model, f); });
    if (optimizer_shards == 1) {
      write_file("optim.pt", [&](FileSink& f) { save_optimizer(optim, f); });
    } else {
      // Every rank's shard, each checked against its own manifest, joins the checkpoint.
      const fs::path staged = optimizer_shard_folder(save_folder, state.step, optimizer_shards);
      for (int r = 0; r < optimizer_shards; ++r) {
        const std::string name = optimizer_shard_name(r, optimizer_shards);
        std::ifstream in(staged / (name + ".json"));
        if (!in) throw Error("rank " + std::to_string(r) + " wrote no optimizer shard", staged.string());
        const nlohmann::json shard = nlohmann::json::parse(in);
        std::error_code ec;
        const auto bytes = fs::file_size(staged / name, ec);
        if (ec || bytes != shard.at("bytes").get<uintmax_t>() ||
            sha256_file((staged / name).string()) != shard.at("sha256").get<std::string>())
          throw Error(name + " does not match its manifest", staged.string(), kDiskFullFix);
        fs::rename(staged / name, tmp / name);
        files[name] = {{"bytes", bytes}, {"sha256", shard.at("sha256")}};
      }
      fs::remove_all(staged);
    }
    write_file("train_state.pt", [&](FileSink& f) {
      torch::serialize::OutputArchive a;
      for (const auto& [name, value] : entries) a.write(name, value);
      a.write("rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
      if (torch::cuda::is_available())
        // The current device's generator: the rank's own GPU (runtime.h).
        a.write("rng_cuda", at::globalContext().defaultGenerator(torch::kCUDA).get_state());
      save_archive(a, f);
    });
    write_file("train_state.json", [&](FileSink& f) {
      nlohmann::ordered_json scalars;
      for (const auto& [name, value] : entries)
        if (value.numel() == 1) {
          if (value.is_floating_point())
            scalars[name] = value.item<double>();
          else
            scalars[name] = value.item<int64_t>();
        }
      f.write(scalars.dump() + "\n");
    });
    write_file("config.yaml", [&](FileSink& f) { f.write(config_yaml); });
    // Last: its presence says every file above is complete.
    FileSink manifest(tmp / kCheckpointManifest, kDiskFullFix);
    manifest.write(nlohmann::ordered_json{{"step", state.step},
                                          {"optimizer_shards", optimizer_shards},
                                          {"files", files},
                                          {"config", config_yaml}}
                       .dump(2) +
                   "\n");
    manifest.close();
    fsync_path(tmp);

    // Replacing an existing step<N> (a resumed run saving the same step again) goes through
    // a second rename so that some complete copy exists at every moment.
    const fs::path old = scratch_path(final_dir, "old");
    if (fs::exists(final_dir)) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fsync_path(save_folder);
    fs::remove_all(old);
  } catch (const fs::filesystem_error& e) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw write_error(e.path1().empty() ? tmp : e.path1(), e.code().value(), kDiskFullFix);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  return final_dir;
}

namespace {

// The loader opens the optimizer files that optimizer_shards names: they must be the ones
// the manifest lists (and so verified), or a resume would read past them (0 shards) or open
// a file that is not there.
std::optional<std::string> optimizer_files_problem(const nlohmann::json& manifest) {
  std::set<std::string> listed;
  for (const auto& [name, entry] : manifest.at("files").items())
    if (name.rfind("optim", 0) == 0) listed.insert(name);
  const nlohmann::json shards = manifest.value("optimizer_shards", nlohmann::json(1));
  std::set<std::string> expected;
  // More shards than listed files cannot match; the bound keeps a huge count from looping.
  if (shards.is_number_integer() && shards.get<int64_t>() >= 1 &&
      shards.get<int64_t>() <= int64_t(listed.size())) {
    const int64_t n = shards.get<int64_t>();
    if (n == 1) expected.insert("optim.pt");
    for (int64_t r = 0; n > 1 && r < n; ++r) expected.insert(optimizer_shard_name(int(r), int(n)));
  }
  if (!expected.empty() && expected == listed) return std::nullopt;
  return fmt::format("manifest.json says optimizer_shards {} but lists the optimizer files {}", shards.dump(),
                     listed.empty() ? "(none)" : fmt::format("{}", fmt::join(listed, ", ")));
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
    if (const auto problem = optimizer_files_problem(manifest)) return problem;
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
    for (const char* required : {"model.pt", "train_state.pt", "config.yaml"})
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
    load_tensors(model, folder / "model.pt");
    dist::ParallelPlan one_process;
    dist::ParallelPlan& ranks = plan ? *plan : one_process;
    ranks.gradients().params_changed();
    if (optim) load_optimizer(model, *optim, optimizer_files(folder), ranks.layout());
    torch::serialize::InputArchive a;
    a.load_from((folder / "train_state.pt").string());
    // read() into a defined tensor would set_() it, so every read gets a fresh one.
    auto read = [&](const char* key) {
      torch::Tensor t;
      a.read(key, t);
      return t;
    };
    StateDict entries;
    for (const auto& key : a.keys())
      if (key != "rng_cpu" && key != "rng_cuda") entries.emplace_back(key, read(key.c_str()));
    TrainState s;
    s.load_state_dict(entries);
    for (Stateful* component : tracked) component->load_state_dict(entries);
    at::Generator cpu_generator = at::detail::getDefaultCPUGenerator();
    cpu_generator.set_state(read("rng_cpu"));
    torch::Tensor cuda_state;
    if (torch::cuda::is_available() && a.try_read("rng_cuda", cuda_state)) {
      at::Generator cuda_generator = at::globalContext().defaultGenerator(torch::kCUDA);
      cuda_generator.set_state(cuda_state);
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
