"""torchrun, with the ranks' exit code given back (scripts/torchrun runs this).

torchrun turns any non-zero exit of a rank into its own 1 and prints "FAILED", so a job script
cannot tell a run stopped by a signal after saving a checkpoint (siamese exits 4: resubmit it)
from a crash. Each rank leaves its code in $SIAMESE_EXIT_DIR (siamese::report_exit); once
torchrun returns, this exits with the most serious of them, and with 1 (a crash) when a rank
wrote none because it died without returning: a segfault, the OOM killer, `kill -9`. The
exception: torchrun stops the other ranks with SIGTERM once one fails (SIGKILL after a grace
period), so a rank still starting up when a peer refused a bad config writes nothing. Which
ranks torchrun signalled itself is recorded as it signals them, so its stops are told from a
kill by anyone else: when every failure is one of siamese's codes or such a stop, the codes
written decide. A port already in use ends in one line naming it and exit 2 (bad input), not
torchrun's traceback. The contract: docs/reliability.md, "Exit codes".

`--max-restarts N` (torchrun's own option) is taken here instead of by torchrun, whose
restarts retry every failure alike: a crash (a rank killed, dead or lost to its peer) starts
the ranks again, up to N times, and they resume from the newest intact checkpoint, while bad
input (2), a divergence (3), a stop (0, 4) and a signal to this launcher end it at once.
"""

import os
import re
import shutil
import signal
import sys
import tempfile

from torch.distributed import DistNetworkError
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.multiprocessing.subprocess_handler import SubprocessHandler
from torch.distributed.run import main as torchrun_main

# siamese's codes from least to most serious: finished, stopped with a checkpoint, non-finite
# loss, bad input. Any other code is a crash and outranks them all.
SEVERITY = [0, 4, 3, 2]


def rank_codes(folder):
    """The codes the ranks left, and the local world size they saw (0 if none wrote)."""
    codes, local_size = [], 0
    for name in os.listdir(folder):
        if not name.isdigit():
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            code, size = f.read().split()
        codes.append(int(code))
        local_size = int(size)
    return codes, local_size


def most_serious(codes):
    crashes = [c for c in codes if c not in SEVERITY]
    if crashes:
        return crashes[0]
    return max(codes, key=SEVERITY.index)


# The pids torchrun's agent sent a signal to (its stops), recorded as it sends them: a rank's exit
# status alone cannot tell torchrun's SIGKILL from the OOM killer's or a user's.
signalled = set()
_close = SubprocessHandler.close


def close_and_record(handler, death_sig=None):
    signalled.add(handler.proc.pid)
    _close(handler, death_sig)


SubprocessHandler.close = close_and_record


def crashes(failures):
    """The failures that are neither siamese's codes nor torchrun's own stops."""
    return [f for f in failures.values() if f.exitcode not in SEVERITY[1:] and f.pid not in signalled]


def death_text(failure):
    """How a failed rank ended, as a sentence's verb."""
    if failure.exitcode < 0:
        try:
            return f"died of {signal.Signals(-failure.exitcode).name}"
        except ValueError:
            return f"died of signal {-failure.exitcode}"
    return f"exited {failure.exitcode}"


def port_in_use(error):
    """The one-line message for a rendezvous port another process holds, or None."""
    if "EADDRINUSE" not in str(error):
        return None
    found = re.search(r"port: (\d+)", str(error))
    port = found.group(1) if found else "(see --master_port / --rdzv_endpoint)"
    return (
        f"scripts/torchrun: port {port} is already in use, so torchrun cannot listen on it for its "
        f"rendezvous; fix: pass a free one with --master_port (torchrun's default is 29500, which "
        f"another launch on this machine may hold; --rdzv_endpoint HOST:PORT under the c10d "
        f"rendezvous), or see who holds it: ss -ltnp 'sport = :{port}'"
    )


# torchrun's options that take no value (torch.distributed.run's parser), as scripts/torchrun
# lists them; every other option takes the next argument unless written with "=".
NO_VALUE = {"--no_python", "--no-python", "-m", "--module", "--run_path", "--run-path", "-h", "--help",
            "--standalone", "--virtual_local_rank", "--virtual-local-rank"}


def take_max_restarts(args):
    """The arguments without --max-restarts / --max_restarts, and its value (0 if absent)."""
    out, restarts, i = [], 0, 0
    while i < len(args):
        arg = args[i]
        name, equals, value = arg.partition("=")
        if name in ("--max-restarts", "--max_restarts"):
            if not equals:
                i += 1
                value = args[i] if i < len(args) else ""
            if not value.isdigit():
                sys.exit(f"scripts/torchrun: --max-restarts needs a count of restarts, got {value!r}")
            restarts = int(value)
        elif arg == "--" or not arg.startswith("-"):
            return out + args[i:], restarts  # the program and its own arguments
        else:
            out.append(arg)
            if not equals and arg not in NO_VALUE and i + 1 < len(args):
                i += 1
                out.append(args[i])
        i += 1
    return out, restarts


def main():
    args, restarts = take_max_restarts(sys.argv[1:])
    for attempt in range(restarts + 1):
        code, crashed = run_once(args)
        if not crashed or attempt == restarts:
            return code
        signalled.clear()
        print(
            f"scripts/torchrun: restart {attempt + 1} of {restarts} after the crash (exit {code}); the ranks "
            f"resume from the newest intact checkpoint",
            file=sys.stderr,
        )


def run_once(args):
    """One torchrun of `args`: the exit code, and whether it was a crash a restart retries."""
    folder = tempfile.mkdtemp(prefix="siamese-exit-")
    os.environ["SIAMESE_EXIT_DIR"] = folder
    try:
        try:
            torchrun_main(args)
            launcher_code, failures = 0, {}
        except ChildFailedError as e:
            launcher_code, failures = 1, e.failures
        except SignalException as e:
            launcher_code, failures = 128 + int(e.sigval), {}
        except SystemExit as e:
            launcher_code, failures = (e.code if isinstance(e.code, int) else 1), {}
        except DistNetworkError as e:
            message = port_in_use(e)
            if message is None:
                raise
            print(message, file=sys.stderr)
            return 2, False
        codes, local_size = rank_codes(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    crashed = crashes(failures)
    if crashed:
        # A crash outranks every code a rank wrote: the others failed because it died.
        first = min(crashed, key=lambda f: (f.timestamp, f.local_rank))
        code = first.exitcode if first.exitcode > 0 else 1
        print(
            f"scripts/torchrun: local rank {first.local_rank} (pid {first.pid}) {death_text(first)}, "
            f"and torchrun did not stop it: a crash (exit {code}); run the same command again to "
            f"resume training from the newest checkpoint",
            file=sys.stderr,
        )
        return code, True
    if launcher_code == 0 or not codes:
        return launcher_code, False
    if len(codes) < local_size and not failures:
        return launcher_code, False
    code = most_serious(codes)
    if code == 4:
        print(
            "scripts/torchrun: every rank stopped after saving a checkpoint (exit 4); "
            "run the same command again to resume",
            file=sys.stderr,
        )
    return code, code not in SEVERITY


if __name__ == "__main__":
    sys.exit(main())
