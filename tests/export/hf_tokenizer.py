"""Loads the tokenizer of each exported folder with transformers' AutoTokenizer, as a user
would, and checks it against the reference encodings of the tokenizer.json it came from.

Stock exports (no modeling_siamese.py) are loaded with no arguments at all; siamese exports
with trust_remote_code=False, since transformers 5 reads config.json's class first and that
class lives in modeling_siamese.py. Either way no prompt may appear and none of our Python
may run: the tokenizer is transformers' own class.

usage: hf_tokenizer.py GOLDEN.jsonl FOLDER...
"""
import builtins
import json
import os
import sys

prompts = []
builtins.input = lambda *args: prompts.append(args) or "n"

from transformers import AutoTokenizer

golden_path, folders = sys.argv[1], sys.argv[2:]
with open(golden_path) as f:
    golden = [json.loads(line) for line in f]

failed = False
for folder in folders:
    problems = []
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    custom = os.path.exists(os.path.join(folder, "modeling_siamese.py"))
    tok = AutoTokenizer.from_pretrained(folder, **({"trust_remote_code": False} if custom else {}))
    if prompts:
        problems.append(f"transformers asked to run remote code: {prompts}")
    if any("modeling_siamese" in name for name in sys.modules):
        problems.append("modeling_siamese was imported")
    if not type(tok).__module__.startswith("transformers."):
        problems.append(f"tokenizer class {type(tok)} is not transformers' own")
    for key in ("eos_token_id", "pad_token_id"):
        if getattr(tok, key) != config[key]:
            problems.append(f"{key} {getattr(tok, key)} != config.json's {config[key]}")
    if tok.model_max_length != config["max_position_embeddings"]:
        problems.append(f"model_max_length {tok.model_max_length}")
    for row in golden:
        ids = tok(row["text"], add_special_tokens=False)["input_ids"]
        if ids != row["ids"]:
            problems.append(f"{row['text']!r}: {ids} != {row['ids']}")
        elif tok.decode(ids) != row["decoded"]:
            problems.append(f"{row['text']!r} decodes as {tok.decode(ids)!r}, not {row['decoded']!r}")
    prompts.clear()
    status = "ok" if not problems else "FAILED"
    print(f"folder {folder}: {status} ({len(golden)} encodings, {type(tok).__name__})")
    for p in problems[:10]:
        print("  " + p)
    failed = failed or bool(problems)
sys.exit(1 if failed else 0)
