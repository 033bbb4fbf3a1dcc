"""Runs OLMo-core's own repeated-n-gram detector on the sequences a test wrote.

usage: olmo_periodic.py IN OUT

Each line of IN is `max_period min_period token token ...`; the line of OUT at the same place
is the largest `times` of olmo_core.data.utils.find_periodic_sequences over that sequence (0
when it yields nothing): what OLMo-core's _validate_instance compares with
repetition_max_count. OLMo-core lives in $SIAMESE_OLMO_CORE (default
~/.cache/siamese/olmo-core), ahead of the project's environment on sys.path. Exits non-zero
when it does not import: a skip would hide a broken install.
"""
import os
import sys

import numpy as np

olmo_core_dir = os.environ.get("SIAMESE_OLMO_CORE") or os.path.expanduser("~/.cache/siamese/olmo-core")
sys.path.insert(0, olmo_core_dir)
try:
    from olmo_core.data.utils import find_periodic_sequences
except ImportError as e:
    sys.exit(f"olmo_periodic: OLMo-core does not import from {olmo_core_dir}: {e}\n"
             "fix: run scripts/setup.sh (it installs scripts/requirements-olmo-core.txt there)")

with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        max_period, min_period, *tokens = (int(w) for w in line.split())
        found = find_periodic_sequences(np.array(tokens, dtype=np.int64), max_period=max_period,
                                        min_period=min_period)
        out.write(f"{max((int(m.times) for m in found), default=0)}\n")
