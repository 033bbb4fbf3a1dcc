"""transformers' OLMoE sparse block (OlmoeSparseMoeBlock: OlmoeTopKRouter + OlmoeExperts) and
its load_balancing_loss_func on the weights and input that tests/model/moe_test.cpp wrote into
each FOLDER (case.txt holds "EXPERTS TOP_K NORM_TOPK_PROB LBL_WEIGHT Z_WEIGHT"); writes back the
block's output, the router logits, the load-balancing and z losses, and the gradients of
sum(out * g) + LBL_WEIGHT * lbl + Z_WEIGHT * z.

    moe_reference.py FOLDER...
    moe_reference.py --count CONFIG.json   (prints OlmoeForCausalLM's total and active parameters)

Layouts: the C++ experts hold SwiGLU's value rows first and its gate rows second (OLMo's
ff_proj); transformers' gate_up_proj holds gate first, so the halves are swapped going in and
the gradient is swapped back. transformers' load_balancing_loss_func counts each token once
per selected expert, which is top_k times the per-assignment share the C++ layer uses, so its
value is divided by top_k. transformers has no router z-loss; it is written out here
(ST-MoE: mean over tokens of logsumexp(logits)^2).
"""

import sys

import numpy as np
import torch
from transformers.models.olmoe.configuration_olmoe import OlmoeConfig
from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock, load_balancing_loss_func


def main(folder, experts, top_k, norm_topk_prob, lbl_weight, z_weight):
    def load(name, grad=False):
        return torch.from_numpy(np.load(f"{folder}/{name}.npy")).requires_grad_(grad)

    x = load("x", grad=True)  # [B, T, d]
    ff_proj, ff_out = load("ff_proj"), load("ff_out")  # [E, 2I, d], [E, d, I]
    inner = ff_out.shape[-1]
    config = OlmoeConfig(
        hidden_size=x.shape[-1],
        intermediate_size=inner,
        num_experts=experts,
        num_experts_per_tok=top_k,
        norm_topk_prob=norm_topk_prob,
        hidden_act="silu",
    )
    config._experts_implementation = "eager"  # the per-expert loop, as a standalone module runs it
    block = OlmoeSparseMoeBlock(config).to(x.dtype)
    with torch.no_grad():
        block.gate.weight.copy_(load("router"))
        block.experts.gate_up_proj.copy_(torch.cat([ff_proj[:, inner:], ff_proj[:, :inner]], dim=1))
        block.experts.down_proj.copy_(ff_out)
    out = block(x)
    logits = torch.nn.functional.linear(x.reshape(-1, x.shape[-1]), block.gate.weight)
    lbl = load_balancing_loss_func((logits,), experts, top_k) / top_k
    z = torch.logsumexp(logits.float(), dim=-1).square().mean()
    ((out * load("g")).sum() + lbl_weight * lbl + z_weight * z).backward()

    gate_up = block.experts.gate_up_proj.grad
    results = {
        "out": out,
        "logits": logits,
        "lbl": lbl.reshape(1),
        "z": z.reshape(1),
        "grad_x": x.grad,
        "grad_router": block.gate.weight.grad,
        "grad_ff_proj": torch.cat([gate_up[:, inner:], gate_up[:, :inner]], dim=1),
        "grad_ff_out": block.experts.down_proj.grad,
    }
    for name, value in results.items():
        np.save(f"{folder}/ref_{name}.npy", value.detach().numpy())


def count(path):
    """Parameters of OlmoeForCausalLM built on the meta device from the OlmoeConfig fields in
    the JSON file: all of them, and those one token uses (top_k of the experts)."""
    import json

    from transformers import OlmoeForCausalLM

    with open(path) as f:
        config = OlmoeConfig(**json.load(f))
    with torch.device("meta"):
        model = OlmoeForCausalLM(config)
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    print(total, total - experts + experts // config.num_experts * config.num_experts_per_tok)


if __name__ == "__main__":
    if sys.argv[1] == "--count":
        count(sys.argv[2])
        sys.exit(0)
    for folder in sys.argv[1:]:
        with open(f"{folder}/case.txt") as f:
            e, k, norm, lw, zw = f.read().split()
        main(folder, int(e), int(k), norm == "1", float(lw), float(zw))
