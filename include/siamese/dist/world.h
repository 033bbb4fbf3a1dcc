#pragma once
// Where this process sits in a distributed launch, read from the launcher's environment:
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_USE_AGENT_STORE) or Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
// SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE).
// A plain `siamese train` is a world of one.
#include <string>

namespace siamese::dist {

struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  // Ranks on this node (0: the launcher did not say, as with a heterogeneous Slurm job).
  int local_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // torchrun's agent already hosts the TCPStore: every rank, rank 0 included, is a client.
  bool agent_hosts_store = false;
  std::string launcher = "none";  // none | torchrun | slurm

  bool distributed() const { return size > 1; }
  bool is_main() const { return rank == 0; }
};

// Reads the environment; malformed values raise siamese::Error naming the variable.
World detect_world();

// Under torchrun's agent (TORCHELASTIC_RUN_ID set), makes the kernel SIGKILL this process
// when the agent dies: an agent killed with SIGKILL cannot stop its workers, which would
// otherwise train on as orphans holding the save folder's lock. A rank whose agent died
// before this call kills itself at once. Elsewhere (srun, a plain start) it does nothing.
void die_with_launcher();

// Leaves this rank's exit code where scripts/torchrun reads it ($SIAMESE_EXIT_DIR/<local
// rank>, written as "<code> <local world size>"). torchrun itself turns any non-zero code
// into its own 1, so a job script could not tell a stopped run (resume it) from a crash;
// the wrapper gives back the ranks' code (docs/reliability.md, "Exit codes"). A rank that
// dies without returning from main writes nothing, which the wrapper reads as a crash.
void report_exit(int code);

// Whether this process has joined the ranks (a Communicator connected). Before that every rank
// reads the same config and command line and refuses them alike, so main prints a refusal from
// rank 0 only (8 ranks used to print the same one 8 times).
bool joined_ranks();
void mark_joined_ranks();

}  // namespace siamese::dist
