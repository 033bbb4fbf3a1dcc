"""OLMo-core's MoE router over a few steps, the reference for MoeRouter.* (tests/model/moe_router_test.cpp).

usage: olmo_core_router.py FOLDER
FOLDER holds spec.json ({"top_k", "bias_gamma" (or null), "granularity", "steps"}), weight.npy
(the router's [experts, d_model] weight) and x<step>.npy ([B, S, d_model] inputs). For each
step the router runs in training mode, then post_batch() (the bias update); written:
experts<step>.npy and weights<step>.npy ([B*S, top_k]), lb<step>.npy (the load-balancing loss,
unweighted) and bias<step>.npy (score_bias after the step, when bias_gamma is set).
OLMo-core comes from tests/support/olmo_core_import.py's folder.
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from olmo_core_import import olmo_core

moe_loss, moe_router = olmo_core("olmo_core_router", "olmo_core.nn.moe.loss", "olmo_core.nn.moe.router")

folder = Path(sys.argv[1])
spec = json.loads((folder / "spec.json").read_text())
torch.set_num_threads(1)
weight = torch.from_numpy(np.load(folder / "weight.npy"))
experts, d_model = weight.shape
router = moe_router.MoELinearRouter(d_model=d_model, num_experts=experts, top_k=spec["top_k"], bias_gamma=spec["bias_gamma"],
                         lb_loss_weight=1.0, lb_loss_granularity=moe_loss.MoELoadBalancingLossGranularity(spec["granularity"]))
with torch.no_grad():
    router.weight.copy_(weight.reshape(-1))
router.train()
for step in range(spec["steps"]):
    x = torch.from_numpy(np.load(folder / f"x{step}.npy"))
    weights, indices, _, aux = router(x)
    np.save(folder / f"experts{step}.npy", indices.reshape(-1, spec["top_k"]).numpy())
    np.save(folder / f"weights{step}.npy", weights.detach().reshape(-1, spec["top_k"]).numpy())
    np.save(folder / f"lb{step}.npy", aux.detach().numpy())
    router.post_batch()
    if spec["bias_gamma"] is not None:
        np.save(folder / f"bias{step}.npy", router.score_bias.numpy())
print(f"{spec['steps']} steps of OLMo-core's router, {experts} experts, top {spec['top_k']}")
