"""Loads an exported folder with transformers and compares it with siamese's own outputs.

usage: hf_parity.py HF_DIR [IDS.npy LOGITS.npy GREEDY.npy]
Without the arrays it only checks that the folder loads. Exits non-zero on a mismatch,
and also when transformers is missing (scripts/test.sh installs it: a skip would hide it).
"""
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

folder = sys.argv[1]
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32)
model.eval()
print(type(model).__name__)
if len(sys.argv) == 2:
    sys.exit(0)
ids = torch.from_numpy(np.load(sys.argv[2]))
expected = torch.from_numpy(np.load(sys.argv[3]))
greedy = np.load(sys.argv[4]).tolist()
with torch.no_grad():
    logits = model(input_ids=ids).logits
err = (logits - expected).abs().max().item()
print(f"max |logits - siamese| = {err:.3g}")
out = model.generate(ids[:1, :6], max_new_tokens=len(greedy), do_sample=False, pad_token_id=0)
tokens = out[0, 6:].tolist()
print("greedy transformers", tokens)
print("greedy siamese     ", greedy)
sys.exit(0 if err < 1e-4 and tokens == greedy else 1)
