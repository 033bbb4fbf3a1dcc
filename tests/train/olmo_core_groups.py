"""OLMo-core's parameter groups for a list of parameter names and group overrides, the reference
for GroupOverrides.TakeTheParametersOlmoCoresGlobsGiveThem (tests/train/group_overrides_test.cpp).

usage: olmo_core_groups.py SPEC.json OUT.json
SPEC.json: {"names": [...], "overrides": [{"params": [...], "opts": {...}}, ...]}.
OUT.json: {"groups": [{"params": [names], "opts": {...}}, ...]} in OLMo-core's order (the
overrides, then the rest), or {"error": "..."} when OLMo-core refuses the overrides.
OLMo-core comes from tests/support/olmo_core_import.py's folder.
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from olmo_core_import import olmo_core

exceptions, optim = olmo_core("olmo_core_groups", "olmo_core.exceptions", "olmo_core.optim")

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

config = optim.AdamWConfig(group_overrides=[optim.OptimGroupOverride(params=o["params"], opts=o["opts"])
                                      for o in spec["overrides"]])
name_of = {id(p): n for n, p in model.named_parameters()}
try:
    groups = config.build_groups(model)
    out = {"groups": [{"params": [name_of[id(p)] for p in g["params"]],
                       "opts": {k: v for k, v in g.items() if k != "params"}} for g in groups]}
except exceptions.OLMoConfigurationError as e:
    out = {"error": str(e)}
Path(sys.argv[2]).write_text(json.dumps(out))
