#include "siamese/tokenizer/tokenize_corpus.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "siamese/common/error.h"
#include "siamese/common/text_input.h"
#include "unicode.h"

namespace siamese::tokenizer {

namespace {

constexpr size_t kBatchBytes = 16 << 20;
// Documents longer than this are cut at safe newlines so that both threads get work.
constexpr size_t kPartBytes = 1 << 20;
constexpr size_t kMaxReportedProblems = 100;

bool is_jsonl(const std::string& path, InputFormat format) {
  if (format != InputFormat::Auto) return format == InputFormat::Jsonl;
  std::string p = path;
  if (p.size() > 3 && p.compare(p.size() - 3, 3, ".gz") == 0) p.resize(p.size() - 3);
  const auto ends = [&](const char* s) {
    const size_t n = std::char_traits<char>::length(s);
    return p.size() >= n && p.compare(p.size() - n, n, s) == 0;
  };
  return ends(".jsonl") || ends(".json") || ends(".ndjson");
}

// Encodes the parts of a batch on a fixed set of threads; threads persist across batches
// so their per-thread BPE caches stay warm.
class EncodePool {
 public:
  EncodePool(const Tokenizer& tokenizer, int threads) : tokenizer_(tokenizer) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker(); });
  }
  ~EncodePool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void run(const std::vector<std::string_view>& parts, std::vector<std::vector<int32_t>>& out) {
    out.assign(parts.size(), {});
    {
      std::lock_guard<std::mutex> lock(mutex_);
      parts_ = &parts;
      out_ = &out;
      next_ = 0;
      busy_ = static_cast<int>(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    try {
      for (size_t i; (i = next_.fetch_add(1)) < parts_->size();) {
        tokenizer_.encode_append((*parts_)[i], (*out_)[i]);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      next_ = parts_->size();
    }
  }
  void worker() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      work();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --busy_;
      }
      done_.notify_all();
    }
  }

  const Tokenizer& tokenizer_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::vector<std::string_view>* parts_ = nullptr;
  std::vector<std::vector<int32_t>>* out_ = nullptr;
  std::atomic<size_t> next_{0};
  int busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

class CorpusTokenizer {
 public:
  CorpusTokenizer(const Tokenizer& tokenizer, const TokenizeOptions& options)
      : tokenizer_(tokenizer),
        options_(options),
        eos_(resolve_eos(tokenizer, options)),
        writer_(options.output, dtype_for(std::max(tokenizer.max_token_id(), eos_))),
        pool_(tokenizer, std::max(1, options.threads)) {}

  TokenizeReport run() {
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    for (const auto& input : options_.inputs) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(input, ec);
      if (!ec) disk_total_ += int64_t(size);
    }
    for (const auto& input : options_.inputs) {
      if (is_jsonl(input, options_.format))
        read_jsonl(input);
      else if (options_.doc_per_line)
        read_lines(input);
      else
        read_whole(input);
      std::error_code ec;
      const auto size = std::filesystem::file_size(input, ec);
      if (!ec) disk_done_ += int64_t(size);
      reader_ = nullptr;
    }
    flush();
    if (options_.progress) options_.progress(disk_total_, disk_total_, writer_.tokens());
    TokenizeReport report;
    report.info.documents = documents_;
    report.info.skipped_documents = skipped_;
    report.info.eos_id = eos_;
    report.info.tokenizer = tokenizer_.name();
    report.info.tokenizer_sha256 = tokenizer_.sha256();
    report.info.vocab_size = tokenizer_.vocab_size();
    report.info.input_bytes = input_bytes_;
    report.info.sources = options_.inputs;
    writer_.commit(report.info);
    report.info.dtype = dtype_for(std::max(tokenizer_.max_token_id(), eos_));
    report.info.tokens = writer_.tokens();
    report.problems = std::move(problems_);
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    return report;
  }

 private:
  static int32_t resolve_eos(const Tokenizer& tokenizer, const TokenizeOptions& options) {
    const auto eos = options.eos_id ? options.eos_id : tokenizer.default_eos_id();
    if (!eos) {
      throw Error("no EOS id for tokenizer " + tokenizer.name(), tokenizer.path(),
                  "pass --eos-id (this tokenizer has no <|endoftext|> token)");
    }
    if (*eos < 0 || *eos > tokenizer.max_token_id()) {
      throw Error("EOS id " + std::to_string(*eos) + " is outside the vocabulary (0.." +
                      std::to_string(tokenizer.max_token_id()) + ")",
                  "--eos-id");
    }
    return *eos;
  }

  // A malformed document: fatal or skipped and counted, by policy.
  void problem(const std::string& where, const std::string& what) {
    if (options_.on_error == OnError::Stop) {
      throw Error(what, where, "fix the input, or pass --on-error skip to leave such documents out");
    }
    ++skipped_;
    if (problems_.size() < kMaxReportedProblems) {
      spdlog::warn("{}: {} (skipped)", where, what);
      problems_.push_back({where, what});
    }
  }

  static std::string utf8_problem(std::string_view text, size_t bad, int64_t* line) {
    *line += std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
    return "invalid UTF-8 (byte 0x" + [&] {
      static const char* hex = "0123456789ABCDEF";
      const auto b = static_cast<unsigned char>(text[bad]);
      return std::string{hex[b >> 4], hex[b & 15]};
    }() + ")";
  }

  void add_document(std::string text) {
    batch_bytes_ += text.size();
    input_bytes_ += static_cast<int64_t>(text.size());
    docs_.push_back(std::move(text));
    if (batch_bytes_ >= kBatchBytes) flush();
  }

  void read_whole(const std::string& path) {
    std::string text = read_text_file(path);
    const size_t bad = find_invalid_utf8(text);
    if (bad != std::string::npos) {
      int64_t line = 1;
      const std::string what = utf8_problem(text, bad, &line);
      problem(path + ":" + std::to_string(line), what);
      return;
    }
    add_document(std::move(text));
  }

  void read_lines(const std::string& path) {
    LineReader reader(path);
    reader_ = &reader;
    std::string line;
    while (reader.next(line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const size_t bad = find_invalid_utf8(line);
      if (bad != std::string::npos) {
        int64_t n = reader.line_number();
        problem(path + ":" + std::to_string(n), utf8_problem(line, bad, &n));
        continue;
      }
      add_document(line);
    }
  }

  void read_jsonl(const std::string& path) {
    LineReader reader(path);
    reader_ = &reader;
    std::string line;
    while (reader.next(line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = path + ":" + std::to_string(reader.line_number());
      const size_t bad = find_invalid_utf8(line);
      if (bad != std::string::npos) {
        int64_t n = 0;
        problem(where, utf8_problem(line, bad, &n));
        continue;
      }
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::parse_error& e) {
        problem(where, std::string("not valid JSON: ") + e.what());
        continue;
      }
      if (!j.is_object()) {
        problem(where, "JSON line is not an object");
        continue;
      }
      const auto it = j.find(options_.text_field);
      if (it == j.end()) {
        problem(where, "missing field \"" + options_.text_field + "\"");
        continue;
      }
      if (!it->is_string()) {
        problem(where, "field \"" + options_.text_field + "\" is not a string");
        continue;
      }
      add_document(it->get<std::string>());
    }
  }

  void flush() {
    if (docs_.empty()) return;
    std::vector<std::string_view> parts;
    std::vector<size_t> doc_end;  // index one past the last part of each document
    for (const auto& doc : docs_) {
      size_t begin = 0;
      if (doc.size() > 2 * kPartBytes) {
        for (size_t cut : tokenizer_.safe_cuts(doc, kPartBytes)) {
          parts.emplace_back(doc.data() + begin, cut - begin);
          begin = cut;
        }
      }
      parts.emplace_back(doc.data() + begin, doc.size() - begin);
      doc_end.push_back(parts.size());
    }
    std::vector<std::vector<int32_t>> ids;
    pool_.run(parts, ids);
    size_t part = 0;
    for (size_t end : doc_end) {
      int32_t last = -1;
      for (; part < end; ++part) {
        if (!ids[part].empty()) last = ids[part].back();
        writer_.append(ids[part].data(), ids[part].size());
      }
      if (last != eos_) writer_.append(&eos_, 1);
      ++documents_;
    }
    docs_.clear();
    batch_bytes_ = 0;
    if (options_.progress)
      options_.progress(disk_done_ + (reader_ ? reader_->file_offset() : 0), disk_total_, writer_.tokens());
  }

  const Tokenizer& tokenizer_;
  const TokenizeOptions& options_;
  int32_t eos_;
  TokenFileWriter writer_;
  EncodePool pool_;
  std::vector<std::string> docs_;
  size_t batch_bytes_ = 0;
  int64_t documents_ = 0, skipped_ = 0, input_bytes_ = 0;
  int64_t disk_done_ = 0, disk_total_ = 0;  // for progress: finished files, all files
  const LineReader* reader_ = nullptr;      // the file being read line by line
  std::vector<InputProblem> problems_;
};

}  // namespace

void check_output_path(const std::string& output, const std::vector<std::string>& inputs,
                       const std::vector<std::string>& also_written, bool force) {
  namespace fs = std::filesystem;
  std::vector<std::string> written = also_written;
  written.insert(written.begin(), output);
  for (const auto& w : written) {
    for (const auto& in : inputs) {
      std::error_code ec;
      const bool same =
          fs::equivalent(w, in, ec) || fs::path(w).lexically_normal() == fs::path(in).lexically_normal();
      if (same)
        throw Error("the output would overwrite the input " + in, w,
                    "pass another -o (token files are usually named .npy)");
    }
    if (!force && fs::exists(w))
      throw Error("the output exists", w, "pass --force to replace it, or choose another -o");
  }
}

TokenizeReport tokenize_corpus(const Tokenizer& tokenizer, const TokenizeOptions& options) {
  if (options.inputs.empty()) throw Error("no input files", "siamese tokenize", "name at least one input");
  if (options.output.empty()) throw Error("no output file", "siamese tokenize", "pass -o OUT.npy");
  check_output_path(options.output, options.inputs, {sidecar_path(options.output)}, options.force);
  return CorpusTokenizer(tokenizer, options).run();
}

int64_t encode_jsonl(const Tokenizer& tokenizer, const std::string& input, std::ostream& out,
                     const std::string& text_field) {
  int64_t lines = 0;
  std::string buffer;
  for_each_jsonl(input, [&](int64_t line, const nlohmann::json& j) {
    const auto it = j.find(text_field);
    const std::string where = input + ":" + std::to_string(line);
    if (it == j.end() || !it->is_string()) {
      throw Error("missing string field \"" + text_field + "\"", where, "pass --text-field");
    }
    const std::vector<int32_t> ids = tokenizer.encode(it->get_ref<const std::string&>());
    buffer = "{\"ids\": [";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) buffer += ", ";
      buffer += std::to_string(ids[i]);
    }
    buffer += "]}\n";
    out << buffer;
    ++lines;
  });
  out.flush();
  if (!out) throw Error("cannot write the output", input);
  return lines;
}

}  // namespace siamese::tokenizer
