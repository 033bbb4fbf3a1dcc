// `siamese sweep SWEEP.yaml` or `siamese sweep --config C --topologies a,b --lr x,y [--seeds
// 1,2] [--set key=value] --out DIR`: topology x learning rate (x seed) runs of one base config
// (src/runs/sweep.cpp). Locally it trains the grid: every run's config is checked before the
// first starts, finished runs are skipped, an interrupted one resumes from its last
// checkpoint, a run folder trained with other settings is refused (--resume-changed trains it
// on), --jobs N trains N runs at once as child processes, and each start says "run k of N"
// and the time left. For a cluster, --scripts DIR writes one launch script per run (torchrun
// on one or several nodes, or a Slurm batch script) that works as written, every value in it
// checked or quoted.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <thread>

#include "commands.h"
#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "siamese/common/user_path.h"
#include "siamese/config/schema.h"
#include "siamese/dist/world.h"
#include "siamese/runs/run_summary.h"
#include "siamese/runs/sweep.h"
#include "siamese/train/console_log.h"
#include "siamese/train/cost_estimate.h"
#include "siamese/train/decay_branch.h"
#include "siamese/train/lr_schedule.h"
#include "siamese/train/provenance.h"
#include "siamese/train/stop_policy.h"
#include "siamese/train/trainer.h"

namespace siamese::cli {

namespace {

namespace fs = std::filesystem;

struct SweepArgs {
  std::string file;
  // The sweep on the command line; with a file, each replaces the file's list.
  std::string config;
  std::vector<std::string> topologies;
  std::vector<double> learning_rates;
  std::vector<int64_t> seeds;
  std::vector<std::string> decay_branches;
  std::vector<std::string> settings;  // --set key=value, after the file's overrides
  std::string out;                    // save_root
  bool print = false;
  std::string scripts;
  std::string launcher = "torchrun";
  std::string binary;
  std::string torchrun;  // empty: the clone's scripts/torchrun (default_torchrun)
  std::vector<std::string> only;
  bool resume_changed = false;
  bool estimate = true;  // measure a step of each model and say what the sweep costs
  int jobs = 1;
  int nodes = 1;
  int nproc = 1;
  int gpus_per_node = -1;  // -1: one GPU per process
  // Slurm's allocation settings, each written as an #SBATCH line when given.
  std::string partition, account, time_limit;
  int cpus_per_task = 0;
  int max_restarts = 0;            // a crashed run's restarts: scripts/torchrun's, or Slurm requeues
  std::vector<std::string> given;  // the launch-script options on the command line
};

// The options that shape launch scripts only, and which of them are Slurm's.
struct ScriptOption {
  const char* name;
  bool slurm;
};
constexpr ScriptOption kScriptOptions[] = {
    {"--launcher", false},     {"--nodes", false},        {"--nproc", false},  {"--torchrun", false},
    {"--gpus-per-node", true}, {"--partition", true},     {"--account", true}, {"--time", true},
    {"--cpus-per-task", true}, {"--max-restarts", false},
};

// Single-quoted for a POSIX shell when it holds anything but safe characters.
std::string shell_quote(const std::string& s) {
  if (!s.empty() &&
      s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,+") ==
          std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Control characters as escapes (\n, \x1b): text for a comment line of a script, where a
// newline would end the comment and start a shell line.
std::string visible(const std::string& s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out;
}

std::string own_binary() { return fs::read_symlink("/proc/self/exe").string(); }

// This process's command line, quoted for a shell, for a comment line: what generated a
// launch script.
std::string invocation() {
  std::string text;
  for (const auto& arg : train::command_line()) text += (text.empty() ? "" : " ") + shell_quote(arg);
  return visible(text);
}

// Slurm's time formats (sbatch --time): minutes, minutes:seconds, hours:minutes:seconds,
// days-hours, days-hours:minutes, days-hours:minutes:seconds, and its words for no limit.
bool slurm_time(const std::string& t) {
  static const std::regex form(R"(\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2})");
  std::string lower;
  for (const char c : t) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::regex_match(t, form) || lower == "infinite" || lower == "unlimited";
}

// A value of an #SBATCH line: sbatch splits those lines into words and ends them at a newline,
// after which the text is a line of the script.
void check_slurm_word(const std::string& value, const char* option, const std::string& allowed) {
  const auto bad =
      value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" + allowed);
  if (bad == std::string::npos) return;
  throw Error(fmt::format("{} \"{}\" has \"{}\": a Slurm name here is letters, digits and {}", option,
                          visible(value), visible(value.substr(bad, 1)), fmt::join(allowed, " ")),
              option, "give the name as Slurm lists it (sinfo, sacctmgr show assoc)");
}

// Every value written into an #SBATCH line; the run names are checked by expand_sweep.
void check_slurm_values(const SweepArgs& a, const fs::path& dir) {
  if (!a.partition.empty()) check_slurm_word(a.partition, "--partition", "_.-,");
  if (!a.account.empty()) check_slurm_word(a.account, "--account", "_.-");
  if (!a.time_limit.empty() && !slurm_time(a.time_limit))
    throw Error(fmt::format("--time \"{}\" is not one of Slurm's time formats", visible(a.time_limit)),
                "--time",
                "write minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes or "
                "days-hours:minutes:seconds, e.g. --time 2-00:00:00 (two days) or --time 90");
  const std::string out = fs::absolute(dir).string();
  if (const auto bad = out.find_first_of(" \t\n\r\v\f%"); bad != std::string::npos)
    throw Error(fmt::format("the scripts' folder \"{}\" has \"{}\", which cannot go into #SBATCH --output "
                            "(sbatch splits its lines at spaces and reads % as a file-name pattern)",
                            visible(out), visible(out.substr(bad, 1))),
                "--scripts", "write the scripts to a folder whose path has no spaces and no %");
}

// The torchrun of the torch this binary links is not on PATH (the project's Python is used
// without activating it), so scripts call the clone's scripts/torchrun, which finds it; the
// binary is in a build folder of that clone (build/siamese).
std::string default_torchrun() {
  const fs::path script = fs::path(own_binary()).parent_path().parent_path() / "scripts" / "torchrun";
  if (!fs::is_regular_file(script))
    throw Error("this binary is not in a build folder of a clone: there is no " + script.string(),
                "--torchrun",
                "name the torchrun the launch scripts should call, e.g. --torchrun "
                "/path/to/siamese/scripts/torchrun");
  return script.string();
}

std::string train_command(const std::string& binary, const runs::SweepRun& r) {
  std::string cmd = shell_quote(binary) + " train " + shell_quote(fs::absolute(r.base).string());
  for (const auto& o : r.overrides) cmd += " " + shell_quote(o);
  return cmd;
}

std::string launch_script(const SweepArgs& a, const runs::SweepRun& r, const fs::path& dir) {
  const std::string train = train_command(a.binary.empty() ? own_binary() : a.binary, r);
  const int gpus = a.gpus_per_node < 0 ? a.nproc : a.gpus_per_node;
  // scripts/torchrun restarts crashes only; another torchrun's own option retries every failure.
  const std::string restarts = a.max_restarts > 0 ? fmt::format(" --max-restarts {}", a.max_restarts) : "";
  std::string s = "#!/usr/bin/env bash\n";
  if (a.launcher == "slurm") {
    s += fmt::format("#SBATCH --job-name={}\n#SBATCH --nodes={}\n#SBATCH --ntasks-per-node={}\n", r.name,
                     a.nodes, a.nproc);
    if (gpus > 0) s += fmt::format("#SBATCH --gpus-per-node={}\n", gpus);
    for (const auto& [option, value] :
         {std::pair<const char*, std::string>{"partition", a.partition},
          {"account", a.account},
          {"time", a.time_limit},
          {"cpus-per-task", a.cpus_per_task ? std::to_string(a.cpus_per_task) : ""}})
      if (!value.empty()) s += fmt::format("#SBATCH --{}={}\n", option, value);
    s += fmt::format("#SBATCH --output={}\n", (fs::absolute(dir) / (r.name + "-%j.out")).string());
    // A requeued job appends to its output rather than replacing the crash's.
    if (a.max_restarts > 0) s += "#SBATCH --requeue\n#SBATCH --open-mode=append\n";
  }
  s += fmt::format("# {}: generated by `{}`.\n", r.name, invocation());
  s += "set -euo pipefail\ncd " + shell_quote(fs::current_path().string()) + "\n";
  if (a.launcher == "slurm") {
    s += "# One task per process; each reads its rank from SLURM_PROCID and all meet at the\n"
         "# first node of the allocation. Every node must see this folder, the binary and the\n"
         "# run's save_folder at the same paths (a shared filesystem): rank 0 writes the\n"
         "# checkpoints that every rank reads on resume.\n"
         "export MASTER_ADDR=${MASTER_ADDR:-$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)}\n"
         "export MASTER_PORT=${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 20000))}\n";
    if (a.max_restarts == 0) {
      s += "srun --kill-on-bad-exit=1 " + train + "\n";
      return s;
    }
    // srun has no restart loop: the job requeues itself after a crash and the ranks resume
    // from the newest intact checkpoint. Exit codes as the trainer defines them
    // (docs/reliability.md): bad input (2), a divergence (3) and a stop (0; 4, a checkpoint
    // to resume from) are not retried. No --kill-on-bad-exit: it would SIGKILL the ranks still
    // running when the first exits with 2, and srun would return 137, a crash's code.
    s += "rc=0\nsrun " + train + " || rc=$?\n";
    s += "case $rc in 0 | 2 | 3 | 4) exit \"$rc\" ;; esac\n";
    s += fmt::format(
        "if [ \"${{SLURM_RESTART_COUNT:-0}}\" -lt {0} ]; then\n"
        "  echo \"{1}: a crash (exit $rc); requeueing job $SLURM_JOB_ID, restart "
        "$((${{SLURM_RESTART_COUNT:-0}} + 1)) of "
        "{0}\" >&2\n"
        "  scontrol requeue \"$SLURM_JOB_ID\"\n"
        "fi\n"
        "exit \"$rc\"\n",
        a.max_restarts, r.name);
  } else if (a.nodes == 1) {
    // --standalone: a rendezvous on this host at a free port.
    s += fmt::format("exec {} --standalone --nnodes 1 --nproc_per_node {}{} --no_python {}\n",
                     shell_quote(a.torchrun), a.nproc, restarts, train);
  } else {
    s += "# Run this script on each of the nodes, with MASTER_ADDR set to the first one.\n";
    s += fmt::format(
        "exec {} --nnodes {} --nproc_per_node {}{} --rdzv_backend c10d "
        "--rdzv_endpoint \"${{MASTER_ADDR:?set MASTER_ADDR to the first node}}:${{MASTER_PORT:-29500}}\" "
        "--rdzv_id {} --no_python {}\n",
        shell_quote(a.torchrun), a.nodes, a.nproc, restarts, shell_quote(r.name), train);
  }
  return s;
}

void write_scripts(SweepArgs a, const std::vector<const runs::SweepRun*>& runs) {
  if (a.launcher == "torchrun" && a.torchrun.empty()) a.torchrun = default_torchrun();
  const fs::path dir = a.scripts;
  if (a.launcher == "slurm") check_slurm_values(a, dir);
  create_folder(dir, "--scripts");
  std::string submit = "#!/usr/bin/env bash\n# Every run of `" + invocation() + "`.\nset -euo pipefail\n";
  for (const auto* r : runs) {
    const fs::path path = dir / (r->name + ".sh");
    write_file_atomically(path, launch_script(a, *r, dir));
    fs::permissions(path, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                    fs::perm_options::add);
    submit += (a.launcher == "slurm" ? "sbatch " : "") + shell_quote(fs::absolute(path).string()) + "\n";
  }
  const fs::path all = dir / "all.sh";
  write_file_atomically(all, submit);
  fs::permissions(all, fs::perms::owner_exec, fs::perm_options::add);
  spdlog::info("wrote {} launch scripts to {} ({} submits or runs them all)", runs.size(), dir.string(),
               all.string());
}

// A child `siamese train` with its own share of the cores; its output goes to
// <save_folder>/train.log.
pid_t start_child(const runs::SweepRun& r, int threads) {
  create_folder(r.save_folder, "the save_folder of run " + r.name);
  const std::string log = (fs::path(r.save_folder) / "train.log").string();
  std::vector<std::string> args = {own_binary(), "train", r.base};
  args.insert(args.end(), r.overrides.begin(), r.overrides.end());
  const pid_t pid = ::fork();
  if (pid < 0) throw Error("fork failed", "siamese sweep --jobs", "lower --jobs");
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

runs::Sweep sweep_of(const SweepArgs& a) {
  if (a.file.empty() && a.config.empty())
    throw Error("no sweep given", "siamese sweep",
                "name a sweep file (configs/sweeps/), or the base config and lists: --config C --topologies "
                "pre,hybrid_pre --lr 1e-3,2e-3 [--seeds 1,2,3] --out runs/cmp");
  runs::SweepSpec spec = a.file.empty() ? runs::SweepSpec{} : runs::read_sweep_file(a.file);
  if (!a.config.empty()) spec.base = a.config;
  if (!a.topologies.empty()) {
    spec.topologies.clear();
    for (const auto& t : a.topologies) spec.topologies.push_back(config::parse_variant(t, "--topologies"));
    spec.where["topologies"] = "--topologies";
  }
  if (!a.learning_rates.empty()) {
    spec.learning_rates = a.learning_rates;
    spec.where["learning_rates"] = "--lr";
  }
  if (!a.seeds.empty()) {
    spec.seeds = a.seeds;
    spec.where["seeds"] = "--seeds";
  }
  if (!a.decay_branches.empty()) {
    spec.decay_branches.clear();
    for (const auto& b : a.decay_branches)
      spec.decay_branches.push_back(runs::parse_branch(b, "--decay-branches"));
    spec.where["decay_branches"] = "--decay-branches";
  }
  for (const auto& s : a.settings) {
    spec.overrides.push_back(runs::override_from_setting(s, "--set"));
    spec.where[spec.overrides.back()] = "--set " + s;
  }
  if (!a.out.empty()) spec.save_root = a.out;
  if (spec.topologies.empty())
    throw Error("no topologies to sweep", "--topologies", "list them, e.g. --topologies pre,hybrid_pre,mhc");
  if (spec.learning_rates.empty())
    throw Error("no learning rates to sweep", "--lr", "list them, e.g. --lr 1e-3,2e-3");
  return runs::expand_sweep(spec, a.file.empty() ? "the command line" : a.file);
}

// Options that shape launch scripts do nothing without --scripts, Slurm's nothing in torchrun
// scripts and --torchrun nothing in Slurm's: each used to be taken without a word.
void check_options(const SweepArgs& a) {
  if (a.launcher != "torchrun" && a.launcher != "slurm")
    throw Error(fmt::format("unknown launcher \"{}\"", a.launcher), "--launcher", "use torchrun or slurm");
  if (a.print && !a.scripts.empty())
    throw Error("--print and --scripts both given: --print writes no scripts", "--print",
                "leave out --print to write the scripts, or --scripts to print the command lines");
  for (const auto& name : a.given) {
    bool slurm = false;
    for (const auto& o : kScriptOptions) slurm = slurm || (o.slurm && name == o.name);
    if (a.scripts.empty())
      throw Error(fmt::format("{} shapes launch scripts, and this sweep writes none", name), name,
                  fmt::format("add --scripts DIR to write them, or leave out {} to train here", name));
    if (slurm && a.launcher != "slurm")
      throw Error(fmt::format("{} is a Slurm setting, and these are torchrun scripts", name), name,
                  fmt::format("add --launcher slurm, or leave out {}", name));
    if (name == "--torchrun" && a.launcher == "slurm")
      throw Error(
          "--torchrun names the torchrun of torchrun scripts; Slurm scripts start each rank with srun", name,
          "leave out --torchrun, or use --launcher torchrun");
  }
}

// The runs --only keeps. A part that matches no run is refused: a typo used to train nothing
// and exit 0.
std::vector<const runs::SweepRun*> selected_runs(const runs::Sweep& sweep,
                                                 const std::vector<std::string>& only) {
  for (const auto& part : only) {
    bool matched = false;
    for (const auto& r : sweep.runs) matched = matched || r.name.find(part) != std::string::npos;
    if (matched) continue;
    std::vector<std::string> names;
    for (const auto& r : sweep.runs) names.push_back(r.name);
    throw Error(fmt::format("--only \"{}\" is in no run's name; the sweep's runs are {}", part,
                            fmt::join(names, ", ")),
                "--only", "give a part of one of those names, e.g. a topology or lr0.001");
  }
  std::vector<const runs::SweepRun*> runs;
  for (const auto& r : sweep.runs) {
    bool keep = only.empty();
    for (const auto& part : only) keep = keep || r.name.find(part) != std::string::npos;
    if (keep) runs.push_back(&r);
  }
  return runs;
}

struct Plan {
  std::vector<const runs::SweepRun*> todo;
  std::vector<config::TrainConfig> configs;  // of `todo`
  int skipped = 0;                           // finished already
};

// A branch needs its stable run earlier in the plan (or finished), on a wsd schedule, and that
// run's checkpoint at the branch's step kept: refused before anything trains, not when the
// stable run is done.
void check_branch_parent(const runs::Sweep& sweep, const runs::SweepRun& branch) {
  const runs::SweepRun* parent = nullptr;
  for (const auto& r : sweep.runs)
    if (r.name == branch.parent) parent = &r;
  const config::TrainConfig c = load_run_config({parent->base, parent->overrides});
  const std::string where = "--decay-branches (decay_branches) of " + sweep.path;
  if (c.scheduler.name != config::SchedulerName::Wsd)
    throw Error(fmt::format("run {} has decay branches, and its schedule is {}, not wsd", parent->name,
                            config::name_of(c.scheduler.name)),
                where, "--set scheduler.name=wsd: a branch continues a stable phase");
  if (branch.branch_at % c.save_interval != 0 || c.save_num_checkpoints_to_keep != -1)
    throw Error(
        fmt::format("run {} must keep its checkpoint at step {} for branch {}, and it saves every {} "
                    "steps keeping {}",
                    parent->name, branch.branch_at, branch.name, c.save_interval,
                    c.save_num_checkpoints_to_keep),
        where,
        "--set save_interval=<a divisor of every branch's step> --set save_num_checkpoints_to_keep=-1");
  const int64_t steps = train::planned_length(c).steps;
  if (branch.branch_at >= steps)
    throw Error(fmt::format("branch {} starts at step {}, and run {} trains {} steps", branch.name,
                            branch.branch_at, parent->name, steps),
                where, "branch from a step inside the stable run");
}

// Every config is read before the first run starts: a typo in --set or the file fails now,
// not hours into the sweep (children read theirs again). A run folder that holds a run
// trained with other settings is refused, naming the keys, unless --resume-changed: reusing
// it silently gave a finished 4-step run to a sweep of 8 steps, or one variant's checkpoint to
// another.
Plan plan_runs(const SweepArgs& a, const runs::Sweep& sweep, const std::vector<const runs::SweepRun*>& runs) {
  Plan plan;
  std::vector<std::string> differ;
  for (const auto* r : runs) {
    config::TrainConfig c;
    try {
      c = load_run_config({r->base, r->overrides});
    } catch (const Error& e) {
      throw Error(e.problem(), fmt::format("run {} of {}: {}", r->name, sweep.path, e.where()), e.fix());
    }
    if (!r->parent.empty()) {
      check_branch_parent(sweep, *r);
      // A branch that trained already holds its decayed settings; decay_branch needs the parent's
      // checkpoint, there whenever the branch's folder is.
      if (fs::is_directory(r->save_folder)) c = train::decay_branch(c);
    }
    std::vector<std::string> changes;
    bool finished = false;
    if (fs::is_directory(r->save_folder)) {
      const auto summary = runs::summarize_run(r->save_folder);
      // The settings the run trained with: its newest checkpoint's config.yaml, else the
      // config written at its start (none: nothing to compare).
      for (const auto& ch : config::schema::changed_settings(summary.settings, c))
        changes.push_back(fmt::format("{} {} -> {}", ch.key, ch.was, ch.now));
      finished = runs::state_text(summary) == "finished";
    }
    if (!changes.empty() && !a.resume_changed) {
      differ.push_back(fmt::format("{} ({})", r->name, fmt::join(changes, ", ")));
      continue;
    }
    if (!changes.empty()) {
      spdlog::warn("sweep: {} resumes with changed settings: {}", r->name, fmt::join(changes, ", "));
    } else if (finished) {
      spdlog::info("sweep: {} finished already, skipped", r->name);
      ++plan.skipped;
      continue;
    }
    plan.todo.push_back(r);
    plan.configs.push_back(std::move(c));
  }
  if (!differ.empty())
    throw Error(fmt::format("{} of the sweep's run folders hold{} a run trained with other settings than the "
                            "sweep gives it: {}",
                            differ.size(), differ.size() == 1 ? "s" : "", fmt::join(differ, "; ")),
                sweep.save_root,
                "--resume-changed trains them on with the sweep's settings (each run logs each change and "
                "records it in its metrics.jsonl); or --out another folder for new runs; or give the "
                "settings they were trained with");
  return plan;
}

// Runs that end inside their warmup compare learning rates they never train at: said once for
// the sweep, before any starts, with the first such run's numbers.
void warn_short_runs(const Plan& plan) {
  std::vector<std::string> names;
  std::string first;
  for (size_t i = 0; i < plan.todo.size(); ++i) {
    const auto& c = plan.configs[i];
    const std::string why =
        train::short_of_peak(c.scheduler, c.optimizer.learning_rate, train::planned_length(c).schedule_max);
    if (why.empty()) continue;
    if (first.empty()) first = plan.todo[i]->name + ": " + why;
    names.push_back(plan.todo[i]->name);
  }
  if (names.empty()) return;
  spdlog::warn(
      "sweep: {} of {} runs end inside their warmup and never train at the learning rate they are "
      "named for ({}); {}",
      names.size(), plan.todo.size(), fmt::join(names, ", "), first);
}

// What the sweep will cost, from one short measured step of each distinct model, before the
// first run starts (a README comparison once said 2 hours and took 5).
double log_cost(const Plan& plan, int jobs) {
  std::vector<std::string> names;
  for (const auto* r : plan.todo) names.push_back(r->name);
  spdlog::info(
      "sweep: measuring a step of each distinct model of the {} runs to train (--no-estimate skips this)",
      plan.todo.size());
  const train::SweepCost cost = train::sweep_cost(plan.configs, names);
  for (const auto& m : cost.models)
    spdlog::info(
        "sweep:   {}{}: {:.3g} s a step, {} steps, about {}", m.first_run,
        m.runs > 1 ? fmt::format(" and {} more run{} of its model", m.runs - 1, m.runs > 2 ? "s" : "") : "",
        m.seconds_per_step, m.steps, train::format_eta(m.seconds_per_step * double(m.steps)));
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  spdlog::info(
      "sweep: estimated {} of training steps for {} runs of {} model{}, one after another with {} threads "
      "(evaluations and saves come on top){}",
      train::format_eta(cost.seconds()), plan.todo.size(), cost.models.size(),
      cost.models.size() > 1 ? "s" : "", threads,
      jobs > 1 ? fmt::format("; --jobs {} trains {} at a time with {} threads each, which on a CPU's shared "
                             "cores takes about as long",
                             jobs, jobs, std::max(1, threads / jobs))
               : "");
  return cost.seconds();
}

// SIGTERM / SIGINT stop the sweep: the running runs save and stop, none starts after.
int stopped_by_signal() {
  spdlog::warn(
      "sweep stopped by signal {}: the running runs saved a checkpoint; run the sweep again to go on",
      train::stop_signal());
  return kExitStopped;
}

using Progress = std::function<std::string(const runs::SweepRun*, const char*)>;

// One run after another in this process; counts `done` and `stopped` (non-finite).
int train_here(const Plan& plan, const Progress& progress, int& done, int& stopped) {
  for (size_t i = 0; i < plan.todo.size(); ++i) {
    const auto* r = plan.todo[i];
    if (train::stop_signal()) return stopped_by_signal();
    spdlog::info("sweep: {}", progress(r, ""));
    spdlog::debug("sweep: {} {}", r->base, fmt::join(r->overrides, " "));
    const int rc = train::train(r->parent.empty() ? plan.configs[i] : train::decay_branch(plan.configs[i]));
    ++done;
    if (rc == kExitStopped) return stopped_by_signal();
    if (rc == kExitNonFinite) {
      spdlog::warn("run {} stopped on a non-finite loss; continuing with the next run", r->name);
      ++stopped;
    } else if (rc != 0) {
      return rc;
    }
  }
  return 0;
}

// `jobs` runs at once as child processes; each checks its own config, and one that fails for
// another reason stops new starts.
int train_children(const Plan& plan, int jobs, const Progress& progress, int& done, int& stopped) {
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / jobs);
  std::map<pid_t, const runs::SweepRun*> running;
  size_t next = 0;
  int failed_rc = 0;
  bool forwarded = false;
  while (next < plan.todo.size() || !running.empty()) {
    // A branch starts once its stable run has ended (runs start in order).
    const auto waits = [&](const runs::SweepRun* r) {
      for (const auto& [pid, run] : running)
        if (run->name == r->parent) return true;
      return false;
    };
    while (failed_rc == 0 && !train::stop_signal() && next < plan.todo.size() &&
           static_cast<int>(running.size()) < jobs && !waits(plan.todo[next])) {
      const auto* r = plan.todo[next++];
      spdlog::info("sweep: {}, {} threads, log {}/train.log", progress(r, "started "), threads,
                   r->save_folder);
      running[start_child(*r, threads)] = r;
    }
    if (running.empty()) break;
    // Polled, so that a signal to the sweep reaches the children instead of orphaning them.
    if (const int sig = train::stop_signal(); sig && !forwarded) {
      for (const auto& [pid, run] : running) ::kill(pid, sig);
      forwarded = true;
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0) break;
    if (pid == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    const auto* r = running.at(pid);
    running.erase(pid);
    ++done;
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    // A child killed before it set up its own handlers stops without a checkpoint; its
    // earlier checkpoints are still there.
    if (forwarded && (rc == kExitStopped || rc == 128 + train::stop_signal())) {
      spdlog::info("sweep: {} saved and stopped", r->name);
    } else if (rc == 0) {
      spdlog::info("sweep: {} done; {} of {} runs ended", r->name, done, plan.todo.size());
    } else if (rc == kExitNonFinite) {
      spdlog::warn("sweep: {} stopped on a non-finite loss", r->name);
      ++stopped;
    } else {
      spdlog::error("sweep: {} failed (exit {}); see {}/train.log. Not starting further runs.", r->name, rc,
                    r->save_folder);
      failed_rc = rc;
    }
  }
  if (failed_rc != 0) return failed_rc;
  return forwarded ? stopped_by_signal() : 0;
}

int run_sweep(const SweepArgs& a) {
  check_options(a);
  const auto sweep = sweep_of(a);
  const auto runs = selected_runs(sweep, a.only);
  if (a.print) {
    for (const auto* r : runs)
      std::cout << train_command(a.binary.empty() ? "siamese" : a.binary, *r) << "\n";
    return 0;
  }
  if (!a.scripts.empty()) {
    write_scripts(a, runs);
    return 0;
  }
  if (dist::detect_world().distributed())
    throw Error(
        "siamese sweep trains its runs itself; under torchrun or srun every rank would run "
        "the whole sweep",
        "WORLD_SIZE / SLURM_NTASKS",
        "run the sweep without a launcher, or write launch scripts with --scripts DIR");
  if (a.jobs < 1) throw Error(fmt::format("--jobs {} must be at least 1", a.jobs), "--jobs", "use 1 or more");

  std::map<const runs::SweepRun*, int> position;  // "run k of N" among the runs asked for
  for (const auto* r : runs) position[r] = static_cast<int>(position.size()) + 1;
  const Plan plan = plan_runs(a, sweep, runs);
  std::vector<std::string> names, trained;
  for (const auto& r : sweep.runs) names.push_back(r.name);
  for (const auto* r : plan.todo) trained.push_back(r->name);
  warn_short_runs(plan);
  const double estimated = a.estimate && !plan.todo.empty() ? log_cost(plan, a.jobs) : 0;
  runs::record_sweep(sweep.save_root, names, trained, a.jobs);
  const auto start = std::chrono::steady_clock::now();
  int done = 0, stopped = 0;  // runs of `todo` that ended (for the time left), non-finite ones
  const Progress progress = [&](const runs::SweepRun* r, const char* what) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return fmt::format("run {} of {}: {}{} ({})", position[r], runs.size(), what, r->name,
                       runs::time_left_text(done, static_cast<int>(plan.todo.size()), elapsed, estimated));
  };
  train::install_stop_handlers();
  const int rc = a.jobs == 1 ? train_here(plan, progress, done, stopped)
                             : train_children(plan, a.jobs, progress, done, stopped);
  if (rc != 0) return rc;
  spdlog::info("sweep done: {} runs, {} skipped as finished, {} stopped on non-finite values", runs.size(),
               plan.skipped, stopped);
  return 0;
}

}  // namespace

void add_sweep_command(CLI::App& app, Handler& run) {
  auto args = std::make_shared<SweepArgs>();
  auto* cmd = app.add_subcommand("sweep", "Train a topology x LR (x seed) grid, or write its launch scripts");
  cmd->add_option("sweep", args->file,
                  "sweep YAML (configs/sweeps/); or give the sweep with --config and the lists");
  cmd->add_option("--config", args->config, "base config of every run (replaces the file's base)");
  cmd->add_option("--topologies", args->topologies,
                  "topologies or variants, e.g. pre,hybrid_pre,mhc or pre:model.layer_norm_type=dyt")
      ->delimiter(',');
  cmd->add_option("--lr", args->learning_rates, "peak learning rates, e.g. 1e-3,2e-3")->delimiter(',');
  cmd->add_option("--set", args->settings,
                  "a config setting of every run, key=value (repeat it: --set max_duration=20 --set "
                  "model.n_layers=4); after the file's overrides")
      ->allow_extra_args(false);
  cmd->add_option("--out", args->out,
                  "folder of the runs, <out>/<topology>-lr<lr>-s<seed> (the file's save_root)");
  cmd->add_option("--jobs", args->jobs, "runs trained at once (child processes sharing the cores)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--print", args->print, "print each run's `siamese train` command line instead");
  cmd->add_option("--scripts", args->scripts, "write one launch script per run (and all.sh) to this folder");
  cmd->add_option("--launcher", args->launcher, "launch scripts for: torchrun | slurm");
  cmd->add_option("--nodes", args->nodes, "nodes per run in launch scripts")->check(CLI::PositiveNumber);
  cmd->add_option("--nproc", args->nproc, "processes (ranks) per node in launch scripts")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--gpus-per-node", args->gpus_per_node,
                  "GPUs Slurm allocates per node (default: --nproc; 0 for CPU ranks)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--partition", args->partition, "Slurm partition of each job (#SBATCH --partition)");
  cmd->add_option("--account", args->account, "Slurm account charged (#SBATCH --account)");
  cmd->add_option("--time", args->time_limit,
                  "Slurm time limit of each job, e.g. 2-00:00:00 (#SBATCH --time)");
  cmd->add_option("--cpus-per-task", args->cpus_per_task,
                  "CPUs Slurm gives each rank (#SBATCH --cpus-per-task)")
      ->check(CLI::PositiveNumber);
  cmd->add_option(
         "--max-restarts", args->max_restarts,
         "restarts of a crashed run (a rank killed, a lost node) in launch scripts: scripts/torchrun "
         "--max-restarts, or a Slurm job that requeues itself; bad input, a divergence and a stop are "
         "not retried")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--binary", args->binary,
                  "siamese binary in scripts and printed lines (default: this one)");
  cmd->add_option("--torchrun", args->torchrun,
                  "torchrun executable in launch scripts (default: scripts/torchrun of the clone whose "
                  "build folder holds this binary)");
  cmd->add_option("--only", args->only, "only runs whose name contains one of these")->delimiter(',');
  cmd->add_option("--seeds", args->seeds, "seeds, e.g. 1,2,3 (default: the config's seed)")->delimiter(',');
  cmd->add_option(
         "--decay-branches", args->decay_branches,
         "decay branches of each run, STEP:STEPS, e.g. 250:50,500:100: from the run's checkpoint at "
         "STEP a run that decays over STEPS (a wsd schedule's; docs/analysis.md, the cheaper ladder)")
      ->delimiter(',');
  cmd->add_flag(
      "--no-estimate", [args](int64_t) { args->estimate = false; },
      "start training at once, without first measuring a step of each model to say what the "
      "sweep costs");
  cmd->add_flag("--resume-changed", args->resume_changed,
                "train on in a run folder whose run was trained with other settings than the sweep's (each "
                "change is logged and recorded); without it such a folder is refused");
  cmd->callback([&run, args, cmd] {
    for (const auto& o : kScriptOptions)
      if (cmd->get_option(o.name)->count() > 0) args->given.push_back(o.name);
    run = [args] { return run_sweep(*args); };
  });
}

}  // namespace siamese::cli
