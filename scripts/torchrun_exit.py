"""torchrun, with the ranks' exit code given back (scripts/torchrun runs this).

torchrun turns any non-zero exit of a rank into its own 1 and prints "FAILED", so a job script
cannot tell a run stopped by a signal after saving a checkpoint (siamese exits 4: resubmit it)
from a crash. Each rank leaves its code in $SIAMESE_EXIT_DIR (siamese::report_exit); once
torchrun returns, this exits with the most serious of them, and with torchrun's own code when a
rank wrote none (it died without returning: a crash). The exception: torchrun stops the other
ranks with SIGTERM once one fails, so a rank still starting up when a peer refused a bad config
writes nothing; when the failures torchrun saw are siamese's codes and its own stops, the ranks
without a code were stopped by torchrun and the codes written decide. The contract:
docs/reliability.md, "Exit codes".
"""

import os
import shutil
import signal
import sys
import tempfile

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
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


def failed_with_own_codes(failures):
    """Whether the ranks torchrun saw fail exited with siamese's codes, apart from those it then
    stopped itself (SIGTERM, SIGKILL after its grace period): no rank crashed."""
    own = [f for f in failures.values() if f.exitcode in SEVERITY[1:]]
    stopped = [f for f in failures.values() if f.exitcode in (-signal.SIGTERM, -signal.SIGKILL)]
    return bool(own) and len(own) + len(stopped) == len(failures)


def main():
    folder = tempfile.mkdtemp(prefix="siamese-exit-")
    os.environ["SIAMESE_EXIT_DIR"] = folder
    try:
        try:
            torchrun_main()
            launcher_code, failures = 0, {}
        except ChildFailedError as e:
            launcher_code, failures = 1, e.failures
        except SignalException as e:
            launcher_code, failures = 128 + int(e.sigval), {}
        except SystemExit as e:
            launcher_code, failures = (e.code if isinstance(e.code, int) else 1), {}
        codes, local_size = rank_codes(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if launcher_code == 0 or not codes:
        return launcher_code
    if len(codes) < local_size and not failed_with_own_codes(failures):
        return launcher_code
    code = most_serious(codes)
    if code == 4:
        print(
            "scripts/torchrun: every rank stopped after saving a checkpoint (exit 4); "
            "run the same command again to resume",
            file=sys.stderr,
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
