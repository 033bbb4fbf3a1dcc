#include "siamese/common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace siamese {

void init_logging(int rank, const std::string& level) {
  auto logger = spdlog::stderr_color_mt("siamese");
  logger->set_pattern(rank == 0 ? "[%H:%M:%S] %v" : "[%H:%M:%S rank " + std::to_string(rank) + "] %v");
  logger->set_level(rank == 0 ? spdlog::level::from_str(level) : spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

}  // namespace siamese
