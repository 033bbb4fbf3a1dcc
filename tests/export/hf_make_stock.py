"""Saves a small random stock transformers model, a batch and what transformers computes on
it, for `siamese import`.

usage: hf_make_stock.py llama|olmo2|olmo3|olmoe|olmoe_fused OUT_DIR IDS.npy LOGITS.npy [EXTRA_CONFIG_JSON]
olmoe_fused writes OLMoE's experts as transformers holds them in memory (one gate_up_proj and
one down_proj tensor per layer) instead of save_pretrained's per-expert tensors; transformers
reads both, and the folder is checked to load back to the same logits. olmo3 has a sliding
layer of window 8, then a full one, and its own RoPE period.
Also writes IDS.tokens (the batch as raw uint16 tokens, a data file for `siamese train`) and
prints "loss <value>": transformers' mean next-token loss on the batch (labels = ids).
"""
import json
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Olmo3Config,
    Olmo3ForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
)

kind, out, ids_path, logits_path = sys.argv[1:5]
extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
classes = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "olmo2": (Olmo2Config, Olmo2ForCausalLM),
    "olmo3": (Olmo3Config, Olmo3ForCausalLM),
    "olmoe": (OlmoeConfig, OlmoeForCausalLM),
    "olmoe_fused": (OlmoeConfig, OlmoeForCausalLM),
}
if kind.startswith("olmoe"):
    extra = {"num_experts": 4, "num_experts_per_tok": 2, **extra}
if kind == "olmo3":
    rope = {"rope_type": "default", "rope_theta": 20000.0}
    extra = {"sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
             "rope_parameters": {"sliding_attention": dict(rope), "full_attention": dict(rope)}, **extra}
config_class, model_class = classes[kind]
torch.manual_seed(0)
config = config_class(vocab_size=256, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, pad_token_id=0, eos_token_id=1,
                      **extra)
model = model_class(config).eval()
with torch.no_grad():
    for name, p in model.named_parameters():
        if "norm" in name:
            p.copy_(1.0 + 0.3 * torch.randn_like(p))
        elif name.endswith("mlp.gate.weight"):
            p.mul_(20.0)  # decisive routing: no near-tie for float rounding to flip
model.save_pretrained(out)
ids = torch.randint(2, 256, (4, 64))  # 4 sequences of max_position_embeddings
np.save(ids_path, ids.numpy())
ids.numpy().astype("<u2").tofile(ids_path.removesuffix(".npy") + ".tokens")
with torch.no_grad():
    result = model(input_ids=ids, labels=ids)
if kind == "olmoe_fused":
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight" or
             not config.tie_word_embeddings}
    assert any(k.endswith("mlp.experts.gate_up_proj") for k in state), sorted(state)[:8]
    save_file(state, f"{out}/model.safetensors", metadata={"format": "pt"})
    with torch.no_grad():
        reloaded = model_class.from_pretrained(out).eval()(input_ids=ids).logits
    assert torch.equal(reloaded, result.logits), "transformers does not read the fused folder back"
np.save(logits_path, result.logits.numpy())
print(f"loss {result.loss.item():.9f}")
