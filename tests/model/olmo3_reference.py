"""transformers' Olmo3ForCausalLM on the weights tests/model/sliding_window_test.cpp wrote into
each FOLDER (case.json: the shape, sliding_window, layer_types and the parameter names); writes
back its logits for ids.npy and the gradients of sum(logits * g) under the C++ names.

    olmo3_reference.py FOLDER...

Olmo3RMSNorm and eager attention's softmax compute in float32 whatever their input; in float64
they are made to keep the input's type, the same formulas otherwise. RoPE's angles and tables
are float32 on both sides.
"""

import contextlib
import json
import sys
from unittest import mock

import numpy as np
import torch
from transformers import Olmo3Config, Olmo3ForCausalLM
from transformers.models.olmo3.modeling_olmo3 import Olmo3RMSNorm


def rms_keeping_dtype(self, x):
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def main(folder):
    with open(f"{folder}/case.json") as file:
        case = json.load(file)
    ours = {name: torch.from_numpy(np.load(f"{folder}/{name}.npy")) for name in case["params"]}
    ids = torch.from_numpy(np.load(f"{folder}/ids.npy"))
    g = torch.from_numpy(np.load(f"{folder}/g.npy"))
    dtype = g.dtype
    d, kv, inner = case["d_model"], case["kv_width"], case["inner"]
    rope = {"rope_type": "default", "rope_theta": case["rope_theta"]}
    config = Olmo3Config(
        vocab_size=case["embedding_size"],
        hidden_size=d,
        intermediate_size=inner,
        num_hidden_layers=case["n_layers"],
        num_attention_heads=case["n_heads"],
        num_key_value_heads=case["n_kv_heads"],
        max_position_embeddings=case["max_sequence_length"],
        rms_norm_eps=case["eps"],
        sliding_window=case["sliding_window"],
        layer_types=case["layer_types"],
        rope_parameters={"sliding_attention": dict(rope), "full_attention": dict(rope)},
        tie_word_embeddings=False,
        eos_token_id=None,
        pad_token_id=None,
        attn_implementation="eager",
    )
    model = Olmo3ForCausalLM(config).to(dtype)
    assert model.config._attn_implementation == "eager"

    # Each HF tensor as slices of a C++ one: (ours, first row, rows).
    pieces = {"model.embed_tokens.weight": ("wte.weight", 0, None), "model.norm.weight": ("topology.ln_f.weight", 0, None),
              "lm_head.weight": ("ff_out.weight", 0, None)}
    for l in range(case["n_layers"]):
        hf, b = f"model.layers.{l}.", f"blocks.{l}."
        pieces.update({
            hf + "self_attn.q_proj.weight": (b + "attn.att_proj.weight", 0, d),
            hf + "self_attn.k_proj.weight": (b + "attn.att_proj.weight", d, kv),
            hf + "self_attn.v_proj.weight": (b + "attn.att_proj.weight", d + kv, kv),
            hf + "self_attn.o_proj.weight": (b + "attn.attn_out.weight", 0, None),
            hf + "self_attn.q_norm.weight": (b + "attn.q_norm.weight", 0, None),
            hf + "self_attn.k_norm.weight": (b + "attn.k_norm.weight", 0, None),
            hf + "mlp.up_proj.weight": (b + "mlp.ff_proj.weight", 0, inner),
            hf + "mlp.gate_proj.weight": (b + "mlp.ff_proj.weight", inner, inner),
            hf + "mlp.down_proj.weight": (b + "mlp.ff_out.weight", 0, None),
            hf + "post_attention_layernorm.weight": ("topology." + b + "attn_norm.weight", 0, None),
            hf + "post_feedforward_layernorm.weight": ("topology." + b + "ff_norm.weight", 0, None),
        })
    params = dict(model.named_parameters())
    assert set(params) == set(pieces), set(params) ^ set(pieces)
    with torch.no_grad():
        for name, (src, first, rows) in pieces.items():
            t = ours[src]
            params[name].copy_(t if rows is None else t[first : first + rows])

    softmax = torch.nn.functional.softmax
    with contextlib.ExitStack() as keep:
        if dtype == torch.float64:
            keep.enter_context(mock.patch.object(Olmo3RMSNorm, "forward", rms_keeping_dtype))
            keep.enter_context(
                mock.patch.object(torch.nn.functional, "softmax", lambda x, dim, dtype=None: softmax(x, dim=dim))
            )
        logits = model(input_ids=ids).logits
    (logits * g).sum().backward()
    results = {"logits": logits}
    grads = {name: torch.zeros_like(t) for name, t in ours.items()}
    for name, (src, first, rows) in pieces.items():
        grads[src][first : first + (rows or grads[src].shape[0])] += params[name].grad
    results.update({"grad_" + name: grad for name, grad in grads.items()})
    for name, value in results.items():
        np.save(f"{folder}/ref_{name}.npy", value.detach().numpy())


if __name__ == "__main__":
    for case_folder in sys.argv[1:]:
        main(case_folder)
