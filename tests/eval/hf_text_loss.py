"""The per-token loss transformers computes on an exported byte-level model over the
non-empty lines of a text file, each read as [BOS] + its bytes (what `siamese eval --text
--doc-per-line` scores when every line fits one window).

usage: hf_text_loss.py HF_DIR TEXT_FILE BOS_ID    prints the mean loss over all lines' tokens
"""
import sys

import torch
from transformers import AutoModelForCausalLM

folder, text_file, bos = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32)
model.eval()
nll, tokens = 0.0, 0
with open(text_file, "rb") as f:
    for line in f.read().split(b"\n"):
        if not line:
            continue
        ids = torch.tensor([[bos] + list(line)])
        with torch.no_grad():
            out = model(input_ids=ids, labels=ids)  # mean over the len-1 predicted tokens
        nll += out.loss.double().item() * (ids.shape[1] - 1)
        tokens += ids.shape[1] - 1
print(f"{nll / tokens:.12f}")
