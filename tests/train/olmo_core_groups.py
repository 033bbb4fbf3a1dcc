"""OLMo-core's parameter groups for a list of parameter names and group overrides, the reference
for Optimizer.GroupOverridesMatchTheParametersOlmoCoresGlobsMatch (tests/train/optimizer_test.cpp).

usage: olmo_core_groups.py SPEC.json OUT.json
SPEC.json: {"names": [...], "overrides": [{"params": [...], "opts": {...}}, ...]}.
OUT.json: {"groups": [{"params": [names], "opts": {...}}, ...]} in OLMo-core's order (the
overrides, then the rest), or {"error": "..."} when OLMo-core refuses the overrides.
OLMo-core comes from $SIAMESE_OLMO_CORE (default ~/.cache/siamese/olmo-core).
"""
import json
import os
import sys
from pathlib import Path

olmo_core_dir = os.environ.get("SIAMESE_OLMO_CORE") or os.path.expanduser("~/.cache/siamese/olmo-core")
sys.path.insert(0, olmo_core_dir)
try:
    import torch
    from olmo_core.exceptions import OLMoConfigurationError
    from olmo_core.optim import AdamWConfig, OptimGroupOverride
except ImportError as e:
    sys.exit(f"olmo_core_groups: OLMo-core does not import from {olmo_core_dir}: {e}\n"
             "fix: run scripts/setup.sh (it installs scripts/requirements-olmo-core.txt there)")

spec = json.loads(Path(sys.argv[1]).read_text())

# A module whose named_parameters() are exactly the given names: one submodule per prefix.
model = torch.nn.Module()
for name in spec["names"]:
    *path, leaf = name.split(".")
    at = model
    for part in path:
        if part not in at._modules:
            at.add_module(part, torch.nn.Module())
        at = at._modules[part]
    at.register_parameter(leaf, torch.nn.Parameter(torch.zeros(1)))
assert [n for n, _ in model.named_parameters()] == spec["names"]

config = AdamWConfig(group_overrides=[OptimGroupOverride(params=o["params"], opts=o["opts"])
                                      for o in spec["overrides"]])
name_of = {id(p): n for n, p in model.named_parameters()}
try:
    groups = config.build_groups(model)
    out = {"groups": [{"params": [name_of[id(p)] for p in g["params"]],
                       "opts": {k: v for k, v in g.items() if k != "params"}} for g in groups]}
except OLMoConfigurationError as e:
    out = {"error": str(e)}
Path(sys.argv[2]).write_text(json.dumps(out))
