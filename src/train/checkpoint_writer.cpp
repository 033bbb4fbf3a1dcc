#include "siamese/train/checkpoint_writer.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "siamese/common/step_folder.h"

namespace siamese::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDiskFullFix =
    "free disk space or point save_folder at a disk with room; the earlier checkpoints are untouched and "
    "the run resumes from the newest of them";

// What a rank other than 0 leaves in the staging folder once its files are written: their
// sizes and hashes, or why it could not write them. Renamed into place whole, so rank 0
// never reads half a report.
fs::path report_path(const fs::path& staging, int rank) {
  return staging / fmt::format(".rank{}.json", rank);
}

// Writes `files` into `folder`, hashing on the way; returns the manifest's entries.
nlohmann::ordered_json write_files(const fs::path& folder, const std::vector<CheckpointFile>& files) {
  nlohmann::ordered_json listed = nlohmann::ordered_json::object();
  try {
    fs::create_directories(folder);
    for (const auto& file : files) {
      FileSink sink(folder / file.name, kDiskFullFix);
      if (file.archive) {
        torch::serialize::OutputArchive a;
        for (const auto& e : file.tensors) a.write(e.key, e.value, e.buffer);
        a.save_to([&sink](const void* data, size_t n) { return sink.write(data, n); });
      } else {
        sink.write(file.text);
      }
      sink.close();
      listed[file.name] = {{"bytes", sink.bytes()}, {"sha256", sink.sha256()}};
    }
  } catch (const fs::filesystem_error& e) {
    throw write_error(e.path1().empty() ? folder : e.path1(), e.code().value(), kDiskFullFix);
  }
  return listed;
}

}  // namespace

fs::path staging_folder(const fs::path& save_folder, int64_t step, long staging_id) {
  return save_folder / fmt::format(".{}.tmp-{}", step_folder_name(step), staging_id);
}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    abandoned_ = true;
  }
  changed_.notify_all();
  join();
}

void CheckpointWriter::join() {
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::start(SaveJob job, Sealed sealed) {
  TORCH_CHECK(!in_flight(), "a checkpoint save is still in flight");
  written_ = finished_ = abandoned_ = false;
  write_error_ = seal_error_ = nullptr;
  staging_ = staging_folder(job.save_folder, job.step, job.staging_id);
  thread_ = std::thread([this, job = std::move(job), sealed = std::move(sealed)] { run(job, sealed); });
}

void CheckpointWriter::run(const SaveJob& job, const Sealed& sealed) {
  const auto started = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  const int rank = job.layout.rank;
  nlohmann::ordered_json files;
  std::exception_ptr error;
  try {
    files = write_files(staging_, job.files);
  } catch (...) {
    error = std::current_exception();
  }
  if (rank != 0) {
    nlohmann::ordered_json report;
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        report["error"] = e.what();
      }
    } else {
      report["files"] = files;
    }
    try {
      write_file_atomically(report_path(staging_, rank), report.dump() + "\n", kDiskFullFix);
    } catch (...) {
      // Rank 0 then learns of the failure from the manager's agreement instead.
      if (!error) error = std::current_exception();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    written_ = true;
    write_error_ = error;
    finished_ = rank != 0 || error != nullptr;
    seconds_ = elapsed();
  }
  changed_.notify_all();
  if (rank != 0 || error) return;

  std::exception_ptr seal_error;
  try {
    for (int r = 1; r < job.layout.parts; ++r) {
      const fs::path report = report_path(staging_, r);
      std::unique_lock<std::mutex> lock(mutex_);
      while (!abandoned_ && !fs::exists(report)) changed_.wait_for(lock, std::chrono::milliseconds(5));
      if (abandoned_) break;
      lock.unlock();
      std::ifstream in(report);
      const nlohmann::json part = nlohmann::json::parse(in);
      if (part.contains("error"))
        throw Error(fmt::format("rank {} could not write its part of the checkpoint: {}", r,
                                part["error"].get<std::string>()),
                    staging_.string(), kDiskFullFix);
      for (const auto& [name, entry] : part.at("files").items()) files[name] = entry;
    }
    bool abandoned;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      abandoned = abandoned_;
    }
    if (!abandoned) {
      for (int r = 1; r < job.layout.parts; ++r) fs::remove(report_path(staging_, r));
      // Last: its presence says every file of every rank is complete.
      nlohmann::ordered_json manifest = manifest_head(job.step, job.layout, job.config_yaml);
      manifest["files"] = files;
      FileSink out(staging_ / kCheckpointManifest, kDiskFullFix);
      out.write(manifest.dump(2) + "\n");
      out.close();
      fsync_path(staging_);
      // Replacing an existing step<N> (a resumed run saving the same step again) goes through
      // a second rename so that some complete copy exists at every moment.
      const fs::path final_dir = job.save_folder / step_folder_name(job.step);
      const fs::path old = scratch_path(final_dir, "old");
      if (fs::exists(final_dir)) fs::rename(final_dir, old);
      fs::rename(staging_, final_dir);
      fsync_path(job.save_folder);
      fs::remove_all(old);
      if (sealed) sealed(final_dir, elapsed());
    }
  } catch (const fs::filesystem_error& e) {
    seal_error = std::make_exception_ptr(
        write_error(e.path1().empty() ? staging_ : e.path1(), e.code().value(), kDiskFullFix));
  } catch (const nlohmann::json::exception& e) {
    seal_error = std::make_exception_ptr(
        Error(std::string("a rank's report of its checkpoint part does not parse: ") + e.what(),
              staging_.string()));
  } catch (...) {
    seal_error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    seal_error_ = seal_error;
    finished_ = true;
    seconds_ = elapsed();
  }
  changed_.notify_all();
}

void CheckpointWriter::wait_written() {
  std::exception_ptr error;
  bool finished;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return written_; });
    error = write_error_;
    finished = finished_;
  }
  if (finished) join();
  if (error) std::rethrow_exception(error);
}

void CheckpointWriter::wait_sealed() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return finished_; });
  }
  join();
  if (seal_error_) std::rethrow_exception(seal_error_);
}

void CheckpointWriter::discard() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    abandoned_ = true;
  }
  changed_.notify_all();
  join();
  std::error_code ignored;
  fs::remove_all(staging_, ignored);
}

}  // namespace siamese::train
