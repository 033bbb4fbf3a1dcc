"""Loads exported folders with transformers and compares them with siamese's own outputs.

usage: hf_parity.py HF_DIR [IDS.npy LOGITS.npy GREEDY.npy]
       hf_parity.py --cases CASE_DIR...
Without the arrays it only checks that the folder loads. With --cases, each CASE_DIR holds
hf/ and the three arrays; one process checks them all (transformers' import is most of the
cost of a check) and prints a `case CASE_DIR: ok` or `case CASE_DIR: FAILED ...` line each.
Exits non-zero on any mismatch, and also when transformers is missing (scripts/test.sh
installs it: a skip would hide it).
"""
import os
import sys
import traceback

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def load(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32)
    model.eval()
    print(type(model).__name__)
    return model


def matches(folder, ids_path, logits_path, greedy_path):
    """Whether transformers' logits (within 1e-4) and greedy tokens are siamese's."""
    model = load(folder)
    ids = torch.from_numpy(np.load(ids_path))
    expected = torch.from_numpy(np.load(logits_path))
    greedy = np.load(greedy_path).tolist()
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    err = (logits - expected).abs().max().item()
    print(f"max |logits - siamese| = {err:.3g}")
    out = model.generate(ids[:1, :6], max_new_tokens=len(greedy), do_sample=False, pad_token_id=0)
    tokens = out[0, 6:].tolist()
    print("greedy transformers", tokens)
    print("greedy siamese     ", greedy)
    return err < 1e-4 and tokens == greedy, f"max |logits - siamese| = {err:.3g}"


if sys.argv[1] == "--cases":
    failed = 0
    for case in sys.argv[2:]:
        try:
            ok, what = matches(*(os.path.join(case, f) for f in ("hf", "ids.npy", "logits.npy", "greedy.npy")))
        except Exception as e:  # noqa: BLE001 (a folder that fails to load must not hide the others)
            traceback.print_exc()
            ok, what = False, f"{type(e).__name__}: {e}"
        print(f"case {case}: {'ok' if ok else 'FAILED'} ({what})", flush=True)
        failed += not ok
    sys.exit(1 if failed else 0)
if len(sys.argv) == 2:
    load(sys.argv[1])
    sys.exit(0)
sys.exit(0 if matches(*sys.argv[1:5])[0] else 1)
