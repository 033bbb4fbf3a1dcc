"""Runs OLMo-core's own repeated-n-gram detector on the sequences a test wrote.

usage: olmo_periodic.py IN OUT

Each line of IN is `max_period min_period token token ...`; the line of OUT at the same place
is the largest `times` of olmo_core.data.utils.find_periodic_sequences over that sequence (0
when it yields nothing): what OLMo-core's _validate_instance compares with
repetition_max_count. OLMo-core lives in $SIAMESE_OLMO_CORE (default
~/.cache/siamese/olmo-core), ahead of the project's environment on sys.path. Exits non-zero
when it does not import: a skip would hide a broken install.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from olmo_core_import import olmo_core

(data_utils,) = olmo_core("olmo_periodic", "olmo_core.data.utils")
find_periodic_sequences = data_utils.find_periodic_sequences

with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        max_period, min_period, *tokens = (int(w) for w in line.split())
        found = find_periodic_sequences(np.array(tokens, dtype=np.int64), max_period=max_period,
                                        min_period=min_period)
        out.write(f"{max((int(m.times) for m in found), default=0)}\n")
