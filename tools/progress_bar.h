#pragma once
// A progress line on stderr for long commands (tokenize, eval): done of total, rate and time
// left. On a terminal it redraws one line at most twice a second; into a file or a pipe (a
// cluster job's log) it writes a new line every 10 seconds instead of carriage returns.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace siamese {

class ProgressBar {
 public:
  // `unit` names what is counted; `scale` divides the counts for display (1e6 for MB).
  // `started` is when the counted work began: a bar made once the total is known, after some
  // of the work, still shows the true rate.
  ProgressBar(std::string label, int64_t total, std::string unit, double scale = 1,
              std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now())
      : label_(std::move(label)),
        unit_(std::move(unit)),
        total_(total),
        scale_(scale),
        terminal_(::isatty(STDERR_FILENO) == 1),
        start_(started) {}

  // `extra` is appended after the rate (e.g. ", 12,345 tokens/s").
  void update(int64_t done, const std::string& extra = "") {
    if (finished_) return;
    const auto now = std::chrono::steady_clock::now();
    const bool last = done >= total_;
    const auto every = terminal_ ? std::chrono::milliseconds(500) : std::chrono::milliseconds(10000);
    if (!last && now - last_draw_ < every) return;
    last_draw_ = now;
    finished_ = last;
    const double secs = std::max(std::chrono::duration<double>(now - start_).count(), 1e-9);
    const double rate = double(done) / secs;
    const int width = 24;
    const int filled = int(width * std::min<int64_t>(done, total_) / std::max<int64_t>(total_, 1));
    const std::string line =
        fmt::format("{} [{}{}] {:.{}f}/{:.{}f} {}, {:.1f} {}/s{}, {} {:.0f} s", label_,
                    std::string(filled, '#'), std::string(width - filled, ' '), done / scale_,
                    scale_ > 1 ? 1 : 0, total_ / scale_, scale_ > 1 ? 1 : 0, unit_, rate / scale_, unit_,
                    extra, last ? "took" : "ETA", last ? secs : double(total_ - done) / std::max(rate, 1e-9));
    std::fputs(terminal_ ? ("\r" + line + (last ? "\n" : "")).c_str() : (line + "\n").c_str(), stderr);
    std::fflush(stderr);
  }

 private:
  std::string label_, unit_;
  int64_t total_;
  double scale_;
  bool terminal_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace siamese
