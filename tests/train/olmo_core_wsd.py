"""OLMo-core's WSD learning rate at every step of a schedule, the reference for
LrSchedule.WsdIsOlmoCoresAtEveryStep (tests/train/lr_schedule_test.cpp).

usage: olmo_core_wsd.py PEAK WARMUP T_MAX WARMUP_MIN_LR DECAY_MIN_LR (decay=N | fraction=F)

Prints one line per t = 0 .. T_MAX: "t lr" with lr as repr of a Python float. OLMo-core comes
from $SIAMESE_OLMO_CORE (default ~/.cache/siamese/olmo-core), as tests/export/olmo_core_parity.py.
"""
import os
import sys

olmo_core_dir = os.environ.get("SIAMESE_OLMO_CORE") or os.path.expanduser("~/.cache/siamese/olmo-core")
sys.path.insert(0, olmo_core_dir)
try:
    from olmo_core.optim.scheduler import WSD
except ImportError as e:
    sys.exit(f"olmo_core_wsd: OLMo-core does not import from {olmo_core_dir}: {e}\n"
             "fix: run scripts/setup.sh (it installs scripts/requirements-olmo-core.txt there)")

peak, warmup, t_max, warmup_min_lr, decay_min_lr = (float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                                    float(sys.argv[4]), float(sys.argv[5]))
kind, value = sys.argv[6].split("=")
if kind == "decay":
    scheduler = WSD(warmup=warmup, decay=int(value), decay_fraction=None, warmup_min_lr=warmup_min_lr,
                    decay_min_lr=decay_min_lr)
else:
    scheduler = WSD(warmup=warmup, decay_fraction=float(value), warmup_min_lr=warmup_min_lr,
                    decay_min_lr=decay_min_lr)
for t in range(t_max + 1):
    print(t, repr(float(scheduler.get_lr(peak, t, t_max))))
