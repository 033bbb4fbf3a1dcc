#pragma once
// The process exit codes of every command, in one place, for whoever decides what to do next
// (a sweep, a Slurm script, a restart policy). scripts/torchrun_exit.py gives the ranks' codes
// back by the same numbers, the most serious first: bad input, a non-finite step, a stop.
namespace siamese {

inline constexpr int kExitOk = 0;
// A crash (an exception no command turned into bad input, a killed rank): retry it.
inline constexpr int kExitCrash = 1;
// Bad input (a config key, a path, a command line): retrying the same command fails again.
inline constexpr int kExitBadInput = 2;
// Training stopped on a non-finite loss or gradient; its last checkpoint is kept.
inline constexpr int kExitNonFinite = 3;
// Stopped by SIGTERM / SIGINT after saving a checkpoint: not finished, resumable. A caller
// must not count the run as done.
inline constexpr int kExitStopped = 4;
// A check the command ran found a fault (`siamese kernels --check`: a row out of tolerance).
inline constexpr int kExitFailedCheck = 5;

}  // namespace siamese
