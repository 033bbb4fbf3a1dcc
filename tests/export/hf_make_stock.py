"""Saves a small random stock LlamaForCausalLM and its logits, for `siamese import`.

usage: hf_make_llama.py OUT_DIR IDS.npy LOGITS.npy [EXTRA_CONFIG_JSON]
"""
import json
import sys

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                     rms_norm_eps=1e-5, tie_word_embeddings=False, **extra)
model = LlamaForCausalLM(config).eval()
with torch.no_grad():
    for name, p in model.named_parameters():
        if "norm" in name:
            p.copy_(1.0 + 0.3 * torch.randn_like(p))
model.save_pretrained(sys.argv[1])
ids = torch.randint(96, (2, 10))
np.save(sys.argv[2], ids.numpy())
with torch.no_grad():
    np.save(sys.argv[3], model(input_ids=ids).logits.numpy())
