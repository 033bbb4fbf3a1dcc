"""OLMo-core's WSD learning rate at every step of a schedule, the reference for
LrSchedule.WsdIsOlmoCoresAtEveryStep (tests/train/lr_schedule_test.cpp).

usage: olmo_core_wsd.py PEAK WARMUP T_MAX WARMUP_MIN_LR DECAY_MIN_LR (decay=N | fraction=F)

Prints one line per t = 0 .. T_MAX: "t lr" with lr as repr of a Python float. OLMo-core comes
from tests/support/olmo_core_import.py's folder.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from olmo_core_import import olmo_core

(scheduler,) = olmo_core("olmo_core_wsd", "olmo_core.optim.scheduler")
WSD = scheduler.WSD

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
