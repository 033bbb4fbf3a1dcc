#include "siamese/train/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <vector>

#include "siamese/common/error.h"
#include "siamese/common/sha256.h"
#include "siamese/common/step_folder.h"
#include "siamese/config/schema.h"

namespace siamese::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = "manifest.json";

std::string free_space(const fs::path& p) {
  struct statvfs v {};
  if (::statvfs(p.c_str(), &v) != 0) return "free space unknown";
  return fmt::format("{:.1f} MiB free", double(v.f_bavail) * double(v.f_frsize) / (1 << 20));
}

Error write_error(const fs::path& file, int err) {
  return Error(fmt::format("cannot write: {} ({})", std::strerror(err), free_space(file.parent_path())),
               file.string(),
               "free disk space or point save_folder at a disk with room; the earlier checkpoints "
               "are untouched and the run resumes from the newest of them");
}

void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw write_error(p, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw write_error(p, err);
}

// A file written through write(2) whose size and sha256 are counted on the way. It reports
// success to its caller even after a failed write and raises the first error at close():
// LibTorch's archive writer must never see a short write, since it then aborts the
// process from a destructor instead of throwing.
class FileSink {
 public:
  explicit FileSink(fs::path path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) error_ = errno;
  }
  ~FileSink() {
    if (fd_ >= 0) ::close(fd_);
  }
  size_t write(const void* data, size_t n) {
    const auto* p = static_cast<const char*>(data);
    for (size_t done = 0; error_ == 0 && done < n;) {
      const ssize_t w = ::write(fd_, p + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        error_ = w < 0 ? errno : ENOSPC;
      else
        done += static_cast<size_t>(w);
    }
    sha_.update(data, n);
    bytes_ += n;
    return n;
  }
  void write(const std::string& text) { write(text.data(), text.size()); }
  // fsyncs and closes; returns {"bytes": n, "sha256": hex} for the manifest.
  nlohmann::json close() {
    if (error_ == 0 && ::fsync(fd_) != 0) error_ = errno;
    if (fd_ >= 0 && ::close(fd_) != 0 && error_ == 0) error_ = errno;
    fd_ = -1;
    if (error_ != 0) throw write_error(path_, error_);
    return {{"bytes", bytes_}, {"sha256", sha_.hex()}};
  }

 private:
  fs::path path_;
  int fd_ = -1;
  int error_ = 0;
  uint64_t bytes_ = 0;
  Sha256 sha_;
};

void save_archive(torch::serialize::OutputArchive& a, FileSink& sink) {
  a.save_to([&sink](const void* data, size_t n) { return sink.write(data, n); });
}

std::optional<int64_t> step_of(const fs::path& dir) {
  bool too_large = false;
  const auto step = step_of_folder(dir.filename().string(), &too_large);
  if (too_large) spdlog::warn("{}: ignored, its step number does not fit in 64 bits", dir.string());
  return step;
}

// Folders a save or prune in progress uses: .step<N>.tmp-<pid> (being written),
// .step<N>.old-<pid> (the copy being replaced), .step<N>.del-<pid> (being pruned).
const std::regex& scratch_pattern() {
  static const std::regex pattern("\\.(step[0-9]+)\\.(tmp|old|del)-[0-9]+");
  return pattern;
}

// Renames first so that a prune cut short never leaves a folder named step<N>.
void remove_checkpoint(const fs::path& dir) {
  const fs::path doomed = dir.parent_path() / fmt::format(".{}.del-{}", dir.filename().string(), ::getpid());
  fs::rename(dir, doomed);
  fs::remove_all(doomed);
}

torch::Tensor scalar(int64_t v) { return torch::tensor(v, torch::kInt64); }

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

// AdamW moments by parameter name. LibTorch's own optimizer archive keys state by tensor
// addresses and did not restore a run bit for bit here; names also keep the file readable.
void save_adamw(torch::nn::Module& model, AdamW& optim, FileSink& file) {
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
  save_archive(a, file);
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

SaveFolderLock::SaveFolderLock(const fs::path& save_folder) {
  fs::create_directories(save_folder);
  const fs::path path = save_folder / ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(fmt::format("cannot open the lock file: {}", std::strerror(errno)), path.string(),
                "make save_folder writable");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    throw Error(fmt::format("another process (pid {}) is training into this save_folder",
                            n > 0 ? std::string(holder, strcspn(holder, "\n")) : "unknown"),
                save_folder.string(),
                "wait for it to finish or stop it, or give this run its own save_folder");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0)
    spdlog::warn("{}: cannot record this process's id ({})", path.string(), std::strerror(errno));
}

SaveFolderLock::~SaveFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

void clean_save_folder(const fs::path& save_folder, const SaveFolderLock&) {
  if (!fs::is_directory(save_folder)) return;
  std::vector<fs::path> scratch;
  for (const auto& e : fs::directory_iterator(save_folder)) scratch.push_back(e.path());
  for (const auto& p : scratch) {
    std::smatch m;
    const std::string name = p.filename().string();
    if (!std::regex_match(name, m, scratch_pattern())) continue;
    const fs::path final_dir = save_folder / m[1].str();
    // A replacement cut between its two renames: the old copy is the only complete one.
    if (m[2] == "old" && !fs::exists(final_dir) && !checkpoint_problem(p)) {
      spdlog::warn("{}: restored as {} (its replacement was interrupted)", p.string(), final_dir.string());
      fs::rename(p, final_dir);
      continue;
    }
    spdlog::warn("{}: removed, left by an interrupted {}", p.string(), m[2] == "del" ? "pruning" : "save");
    fs::remove_all(p);
  }
}

fs::path save_checkpoint(const fs::path& save_folder, torch::nn::Module& model, AdamW& optim,
                         const TrainState& state, const std::string& config_yaml) {
  const fs::path final_dir = save_folder / step_folder_name(state.step);
  const fs::path tmp = save_folder / fmt::format(".step{}.tmp-{}", state.step, ::getpid());
  try {
    fs::create_directories(save_folder);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    nlohmann::ordered_json files;
    auto write_file = [&](const std::string& name, auto&& body) {
      FileSink sink(tmp / name);
      body(sink);
      files[name] = sink.close();
    };
    write_file("model.pt", [&](FileSink& f) { save_tensors(model, f); });
    write_file("optim.pt", [&](FileSink& f) { save_adamw(model, optim, f); });
    write_file("train_state.pt", [&](FileSink& f) {
      torch::serialize::OutputArchive a;
      a.write("step", scalar(state.step));
      a.write("tokens", scalar(state.tokens));
      a.write("bad_steps", scalar(state.bad_steps));
      a.write("loss_scale", torch::tensor(state.loss_scale, torch::kFloat64));
      a.write("loss_scale_good_steps", scalar(state.loss_scale_good_steps));
      a.write("rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
      if (torch::cuda::is_available())
        // The current device's generator: the rank's own GPU (runtime.h).
        a.write("rng_cuda", at::globalContext().defaultGenerator(torch::kCUDA).get_state());
      save_archive(a, f);
    });
    write_file("train_state.json", [&](FileSink& f) {
      f.write(nlohmann::ordered_json{{"step", state.step},
                                     {"tokens", state.tokens},
                                     {"bad_steps", state.bad_steps},
                                     {"loss_scale", state.loss_scale},
                                     {"loss_scale_good_steps", state.loss_scale_good_steps}}
                  .dump() +
              "\n");
    });
    write_file("config.yaml", [&](FileSink& f) { f.write(config_yaml); });
    // Last: its presence says every file above is complete.
    FileSink manifest(tmp / kManifest);
    manifest.write(
        nlohmann::ordered_json{{"step", state.step}, {"files", files}, {"config", config_yaml}}.dump(2) +
        "\n");
    manifest.close();
    fsync_path(tmp);

    // Replacing an existing step<N> (a resumed run saving the same step again) goes through
    // a second rename so that some complete copy exists at every moment.
    const fs::path old = save_folder / fmt::format(".step{}.old-{}", state.step, ::getpid());
    if (fs::exists(final_dir)) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fsync_path(save_folder);
    fs::remove_all(old);
  } catch (const fs::filesystem_error& e) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw write_error(e.path1().empty() ? tmp : e.path1(), e.code().value());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  return final_dir;
}

void prune_checkpoints(const fs::path& save_folder, int64_t keep, int64_t resumed_step,
                       const std::set<int64_t>& written) {
  if (keep <= 0) return;
  std::vector<fs::path> prunable;
  for (const auto& [step, dir] : checkpoint_folders(save_folder))
    if ((step <= resumed_step || written.count(step)) && fs::exists(dir / kManifest)) prunable.push_back(dir);
  for (size_t i = 0; i + keep < prunable.size(); ++i) remove_checkpoint(prunable[i]);
}

void write_run_config(const fs::path& save_folder, const std::string& config_yaml) {
  fs::create_directories(save_folder);
  const fs::path tmp = save_folder / fmt::format(".config.yaml.tmp-{}", ::getpid());
  FileSink out(tmp);
  out.write(config_yaml);
  try {
    out.close();
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  fs::rename(tmp, save_folder / "config.yaml");
}

std::vector<std::pair<int64_t, fs::path>> checkpoint_folders(const fs::path& save_folder) {
  std::vector<std::pair<int64_t, fs::path>> out;
  if (!fs::is_directory(save_folder)) return out;
  for (const auto& e : fs::directory_iterator(save_folder)) {
    if (!e.is_directory()) continue;
    if (auto s = step_of(e.path())) out.emplace_back(*s, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> checkpoint_problem(const fs::path& folder) {
  const fs::path manifest_path = folder / kManifest;
  if (!fs::exists(manifest_path))
    return "no manifest.json (the save did not finish, or it is not a checkpoint folder)";
  nlohmann::json manifest;
  try {
    std::ifstream in(manifest_path);
    manifest = nlohmann::json::parse(in);
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

std::optional<fs::path> latest_checkpoint(const fs::path& save_folder) {
  auto all = checkpoint_folders(save_folder);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const auto problem = checkpoint_problem(it->second);
    if (!problem) return it->second;
    spdlog::warn("{}: skipped, not an intact checkpoint: {}", it->second.string(), *problem);
  }
  return std::nullopt;
}

namespace {

// Keys that change how a model is initialised, regularised or computed (memory, kernels),
// not what its trained weights mean: a resumed run may change them.
bool may_change_on_resume(const std::string& key) {
  static const std::set<std::string> keys = {"model.attention_dropout",
                                             "model.residual_dropout",
                                             "model.embedding_dropout",
                                             "model.flash_attention",
                                             "model.activation_checkpointing",
                                             "model.init_device",
                                             "model.init_fn",
                                             "model.init_std",
                                             "model.init_cutoff_factor",
                                             "model.emb_init_std",
                                             "model.scale_emb_init"};
  return keys.count(key) > 0;
}

std::string yaml_text(const YAML::Node& node) {
  if (!node.IsDefined()) return "(absent)";
  if (node.IsNull()) return "null";
  if (node.IsScalar()) return node.Scalar();
  return YAML::Dump(node);
}

void check_same_model(const fs::path& folder, const ModelConfig& model) {
  const fs::path saved_path = folder / "config.yaml";
  YAML::Node saved;
  try {
    saved = YAML::LoadFile(saved_path.string());
  } catch (const YAML::Exception& e) {
    throw Error("cannot read the checkpoint's config: " + e.msg, saved_path.string(),
                "resume from an intact checkpoint");
  }
  TrainConfig current;
  current.model = model;
  std::vector<std::string> differ;
  for (const auto& f : schema::train_fields()) {
    if (f.key.rfind("model.", 0) != 0 || may_change_on_resume(f.key)) continue;
    YAML::Node node = saved;
    size_t start = 0;
    for (size_t dot; node.IsDefined() && (dot = f.key.find('.', start)) != std::string::npos; start = dot + 1)
      node.reset(node[f.key.substr(start, dot - start)]);
    if (node.IsDefined()) node.reset(node[f.key.substr(start)]);
    const std::string was = yaml_text(node), now = schema::value_text(f, current);
    if (was != now) differ.push_back(fmt::format("{} (checkpoint {}, config {})", f.key, was, now));
  }
  if (!differ.empty())
    throw Error(fmt::format("the checkpoint was trained with another model: {}", fmt::join(differ, "; ")),
                folder.string(),
                "resume with the model settings in " + saved_path.string() +
                    ", or start a new run in another save_folder");
}

}  // namespace

TrainState load_checkpoint(const fs::path& folder, torch::nn::Module& model, AdamW* optim,
                           const ModelConfig* same_model) {
  if (const auto problem = checkpoint_problem(folder))
    throw Error("not an intact checkpoint: " + *problem, folder.string(),
                "point load_path at another save_folder/step<N> folder (an older one)");
  if (same_model) check_same_model(folder, *same_model);
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
    // Checkpoints written before loss scaling existed have no scale: a run resumed from one
    // starts the scale afresh.
    torch::Tensor scale;
    if (a.try_read("loss_scale", scale)) {
      s.loss_scale = scale.item<double>();
      s.loss_scale_good_steps = read("loss_scale_good_steps").item<int64_t>();
    }
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

}  // namespace siamese::train
