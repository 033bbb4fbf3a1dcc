#include "siamese/train/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <vector>

#include "siamese/common/error.h"

namespace siamese::train {

namespace fs = std::filesystem;

namespace {

void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open for fsync", p.string());
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw Error("fsync failed", p.string(), "check the disk is writable and not full");
}

std::optional<int64_t> step_of(const fs::path& dir) {
  static const std::regex pattern("step([0-9]+)");
  std::smatch m;
  const std::string name = dir.filename().string();
  if (!std::regex_match(name, m, pattern)) return std::nullopt;
  return std::stoll(m[1]);
}

std::vector<std::pair<int64_t, fs::path>> checkpoints(const fs::path& save_folder) {
  std::vector<std::pair<int64_t, fs::path>> out;
  if (!fs::is_directory(save_folder)) return out;
  for (const auto& e : fs::directory_iterator(save_folder)) {
    auto s = step_of(e.path());
    if (s && e.is_directory() && fs::exists(e.path() / "train_state.pt"))
      out.emplace_back(*s, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

torch::Tensor scalar(int64_t v) { return torch::tensor(v, torch::kInt64); }

// Parameters and buffers by name. Module::load would set_() each tensor to the stored one,
// which fails for tensors that share or view storage; copying in place keeps every alias.
void save_tensors(torch::nn::Module& model, const fs::path& file) {
  torch::serialize::OutputArchive a;
  for (const auto& kv : model.named_parameters()) a.write(kv.key(), kv.value().detach());
  for (const auto& kv : model.named_buffers()) a.write(kv.key(), kv.value(), /*is_buffer=*/true);
  a.save_to(file.string());
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

// AdamW moments by parameter name. LibTorch's own optimizer archive keys state by tensor
// addresses and did not restore a run bit for bit here; names also keep the file readable.
void save_adamw(torch::nn::Module& model, AdamW& optim, const fs::path& file) {
  torch::serialize::OutputArchive a;
  auto& state = optim.state();
  for (const auto& kv : model.named_parameters()) {
    auto it = state.find(kv.value().unsafeGetTensorImpl());
    if (it == state.end()) continue;
    const auto& s = static_cast<const AdamWState&>(*it->second);
    a.write(kv.key() + ".step", scalar(static_cast<int64_t>(s.step_count.item<double>())));
    a.write(kv.key() + ".exp_avg", s.exp_avg(), true);
    a.write(kv.key() + ".exp_avg_sq", s.exp_avg_sq(), true);
  }
  a.save_to(file.string());
}

void load_adamw(torch::nn::Module& model, AdamW& optim, const fs::path& file) {
  torch::serialize::InputArchive a;
  a.load_from(file.string());
  auto& state = optim.state();
  state.clear();
  for (const auto& kv : model.named_parameters()) {
    torch::Tensor step, exp_avg, exp_avg_sq;
    if (!a.try_read(kv.key() + ".step", step)) continue;  // never updated (no gradient yet)
    a.read(kv.key() + ".exp_avg", exp_avg, true);
    a.read(kv.key() + ".exp_avg_sq", exp_avg_sq, true);
    auto& s = optim.state_of(kv.value());
    s.step_count.fill_(static_cast<double>(step.item<int64_t>()));
    s.exp_avg(exp_avg.to(kv.value().device()));
    s.exp_avg_sq(exp_avg_sq.to(kv.value().device()));
  }
}

}  // namespace

fs::path save_checkpoint(const fs::path& save_folder, torch::nn::Module& model,
                         AdamW& optim, const TrainState& state,
                         const std::string& config_yaml, int64_t keep) {
  fs::create_directories(save_folder);
  const fs::path final_dir = save_folder / fmt::format("step{}", state.step);
  const fs::path tmp = save_folder / fmt::format(".step{}.tmp-{}", state.step, ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  save_tensors(model, tmp / "model.pt");
  save_adamw(model, optim, tmp / "optim.pt");
  {
    torch::serialize::OutputArchive a;
    a.write("step", scalar(state.step));
    a.write("tokens", scalar(state.tokens));
    a.write("bad_steps", scalar(state.bad_steps));
    a.write("rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
    if (torch::cuda::is_available())
      // The current device's generator: the rank's own GPU (runtime.h).
      a.write("rng_cuda", at::globalContext().defaultGenerator(torch::kCUDA).get_state());
    a.save_to((tmp / "train_state.pt").string());
  }
  std::ofstream(tmp / "train_state.json")
      << fmt::format("{{\"step\": {}, \"tokens\": {}, \"bad_steps\": {}}}\n", state.step,
                     state.tokens, state.bad_steps);
  std::ofstream(tmp / "config.yaml") << config_yaml;
  for (const auto& e : fs::directory_iterator(tmp)) fsync_path(e.path());
  fsync_path(tmp);

  // Replacing an existing step<N> (a resumed run saving the same step again) goes through
  // a second rename so that some complete copy exists at every moment.
  const fs::path old = save_folder / fmt::format(".step{}.old-{}", state.step, ::getpid());
  if (fs::exists(final_dir)) fs::rename(final_dir, old);
  fs::rename(tmp, final_dir);
  fsync_path(save_folder);
  fs::remove_all(old);

  if (keep > 0) {
    auto all = checkpoints(save_folder);
    for (size_t i = 0; i + keep < all.size(); ++i) fs::remove_all(all[i].second);
  }
  return final_dir;
}

void write_run_config(const fs::path& save_folder, const std::string& config_yaml) {
  fs::create_directories(save_folder);
  const fs::path tmp = save_folder / fmt::format(".config.yaml.tmp-{}", ::getpid());
  {
    std::ofstream out(tmp);
    out << config_yaml;
    if (!out) throw Error("cannot write the run's config", tmp.string(), "check the save_folder");
  }
  fs::rename(tmp, save_folder / "config.yaml");
}

std::optional<fs::path> latest_checkpoint(const fs::path& save_folder) {
  auto all = checkpoints(save_folder);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

TrainState load_checkpoint(const fs::path& folder, torch::nn::Module& model,
                           AdamW* optim) {
  if (!fs::exists(folder / "train_state.pt"))
    throw Error("not a checkpoint folder (no train_state.pt)", folder.string(),
                "point load_path at a save_folder/step<N> folder");
  try {
    load_tensors(model, folder / "model.pt");
    if (optim) load_adamw(model, *optim, folder / "optim.pt");
    torch::serialize::InputArchive a;
    a.load_from((folder / "train_state.pt").string());
    // read() into a defined tensor would set_() it, so every read gets a fresh one.
    auto read = [&](const char* key) {
      torch::Tensor t;
      a.read(key, t);
      return t;
    };
    TrainState s;
    s.step = read("step").item<int64_t>();
    s.tokens = read("tokens").item<int64_t>();
    s.bad_steps = read("bad_steps").item<int64_t>();
    at::Generator cpu_generator = at::detail::getDefaultCPUGenerator();
    cpu_generator.set_state(read("rng_cpu"));
    torch::Tensor cuda_state;
    if (torch::cuda::is_available() && a.try_read("rng_cuda", cuda_state)) {
      at::Generator cuda_generator = at::globalContext().defaultGenerator(torch::kCUDA);
      cuda_generator.set_state(cuda_state);
    }
    return s;
  } catch (const c10::Error& e) {
    throw Error(std::string("checkpoint does not match this model/optimizer: ") +
                    e.what_without_backtrace(),
                folder.string(), "load it with the config it was saved with (config.yaml there)");
  }
}

}  // namespace siamese::train
