"""Builds an exported model out of AllenAI's OLMo-core blocks and compares it with our twin.

usage: olmo_core_parity.py HF_DIR TOPOLOGY [HF_DIR TOPOLOGY ...]

HF_DIR is a folder written by `siamese export` (a stock LlamaForCausalLM for `pre`, a stock
Olmo2ForCausalLM for `reordered`, our modeling_siamese.py otherwise); TOPOLOGY is the one it
was exported from (pre, lns, reordered, peri or ngpt). The folder is loaded with transformers
(the twin) and the same model is built with OLMo-core's TransformerConfig.llama_like and the
block class of the topology (default, default_scaled, reordered_norm, peri_norm: RMSNorm,
SwiGLU, RoPE, no biases), or for ngpt with TransformerConfig.ngpt_like (the normalized block,
attention, feed-forward and LM head; L2 Q/K norms), every weight copied in. Both run one batch on the CPU in float32;
the logits and the gradient of every parameter of sum(logits * R), R a fixed random tensor,
must agree to 1e-5 relative (max |a - b| / max |b|). The twin is itself checked against the
C++ model's logits to 1e-4 (tests/export/hf_export_test.cpp, HfExport.*), so the chain
C++ == twin == OLMo-core is what this shows. As a control, a topology whose block has the
parameters of OLMo-core's plain `default` block (lns, reordered) must NOT match that block.
Several pairs are checked in one process (importing transformers and OLMo-core is most of the
cost), each ending in a `case TOPOLOGY: ok` or `case TOPOLOGY: FAILED` line.

OLMo-core (ai2-olmo-core, scripts/requirements-olmo-core.txt) lives in a folder of its own,
$SIAMESE_OLMO_CORE (default ~/.cache/siamese/olmo-core; scripts/setup.sh installs it), put
ahead of the project's environment on sys.path so that torch and transformers stay the
project's. Exits non-zero on a mismatch and when OLMo-core is missing: a skip would hide a
broken install.
"""
import os
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

TOLERANCE = 1e-5
BLOCKS = {"pre": "default", "lns": "default_scaled", "reordered": "reordered_norm", "peri": "peri_norm",
          "ngpt": "normalized"}

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from olmo_core_import import olmo_core

olmo_core_package, feed_forward, transformer, version = olmo_core(
    "olmo_core_parity", "olmo_core", "olmo_core.nn.feed_forward", "olmo_core.nn.transformer", "olmo_core.version")
FeedForwardConfig = feed_forward.FeedForwardConfig
TransformerConfig = transformer.TransformerConfig
VERSION = version.VERSION
print(f"OLMo-core {VERSION} from {os.path.dirname(olmo_core_package.__file__)}")


class Mismatch(Exception):
    pass


def fail(message):
    raise Mismatch(message)


def relative(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def check(folder, topology):
    """Whether the twin in `folder` and OLMo-core's blocks of `topology` agree."""
    if topology not in BLOCKS:
        fail(f"no OLMo-core block for topology {topology!r} (one of {sorted(BLOCKS)})")
    twin = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32)
    cfg = twin.config
    print(f"twin: {type(twin).__name__}")

    # The model's shape, and for each OLMo-core parameter the twin's parameter (and rows of it)
    # that holds the same weight.
    if cfg.model_type == "siamese":
        c = cfg.siamese
        if c["residual"] != topology:
            fail(f"{folder} holds a {c['residual']} model, not {topology}")
        wanted = {"layer_norm_type": "rms", "layer_norm_with_affine": True, "bias_for_layer_norm": False,
                  "activation_type": "swiglu", "rope": True, "include_bias": False, "clip_qkv": None,
                  "scale_logits": False, "embedding_layer_norm": False, "use_query_norm": False,
                  "use_key_norm": False, "use_value_norm": False}
        for key, value in wanted.items():
            if c.get(key) != value:
                fail(f"OLMo-core's llama_like blocks need {key} = {value}, the model has {c.get(key)}")
        d, n_heads, n_kv, n_layers = c["d_model"], c["n_heads"], c["n_kv_heads"], c["n_layers"]
        inner, eps, theta = c["mlp_hidden_size"] // 2, c["layer_norm_eps"], c["rope_theta"]
        qk_norm, tied = c["attention_layer_norm"], c["weight_tying"]
        kv = n_kv * (d // n_heads)
        names = {"embeddings.weight": ("wte.weight", None), "lm_head.norm.weight": ("topology.ln_f.weight", None)}
        if topology == "ngpt":
            if tied:
                fail("OLMo-core's normalized transformer refuses tied embeddings: export an untied ngpt model")
            del names["lm_head.norm.weight"]
            names["lm_head.sz"] = ("topology.sz", None)
        if not tied:
            names["lm_head.w_out.weight"] = ("ff_out.weight", None)
        for l in range(n_layers):
            o, a, m, t = f"blocks.{l}.", f"blocks.{l}.attn.", f"blocks.{l}.mlp.", f"topology.blocks.{l}."
            names.update({
                o + "attention.w_q.weight": (a + "att_proj.weight", (0, d)),
                o + "attention.w_k.weight": (a + "att_proj.weight", (d, d + kv)),
                o + "attention.w_v.weight": (a + "att_proj.weight", (d + kv, d + 2 * kv)),
                o + "attention.w_out.weight": (a + "attn_out.weight", None),
                # ff_proj holds the value half, then the gate half: w3 and w1 in OLMo-core.
                o + "feed_forward.w3.weight": (m + "ff_proj.weight", (0, inner)),
                o + "feed_forward.w1.weight": (m + "ff_proj.weight", (inner, 2 * inner)),
                o + "feed_forward.w2.weight": (m + "ff_out.weight", None),
                o + "attention_norm.weight": (t + "attn_norm.weight", None),
                o + "feed_forward_norm.weight": (t + "ff_norm.weight", None),
            })
            if qk_norm:
                names[o + "attention.q_norm.weight"] = (a + "q_norm.weight", None)
                names[o + "attention.k_norm.weight"] = (a + "k_norm.weight", None)
            if topology == "peri":
                names[o + "post_attention_norm.weight"] = (t + "attn_out_norm.weight", None)
                names[o + "post_feed_forward_norm.weight"] = (t + "ff_out_norm.weight", None)
            if topology == "ngpt":  # no norms; learned scales: OLMo-core's sw1 is the gate's, sw3 the value's
                del names[o + "attention_norm.weight"], names[o + "feed_forward_norm.weight"]
                names.update({o + "attn_alpha": (t + "attn_alpha", None), o + "mlp_alpha": (t + "ff_alpha", None),
                              o + "attention.sq": (t + "sq", None), o + "attention.sk": (t + "sk", None),
                              o + "feed_forward.sw1": (t + "sv", None), o + "feed_forward.sw3": (t + "su", None)})
    elif cfg.model_type in ("llama", "olmo2"):
        stock_topology = "pre" if cfg.model_type == "llama" else "reordered"
        if stock_topology != topology:
            fail(f"{folder} holds a stock {cfg.model_type} model, which is {stock_topology}, not {topology}")
        if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
            fail("OLMo-core's llama_like blocks have no biases")
        d, n_heads, n_kv, n_layers = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, \
            cfg.num_hidden_layers
        inner, eps, tied = cfg.intermediate_size, cfg.rms_norm_eps, cfg.tie_word_embeddings
        rope = getattr(cfg, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(cfg, "rope_theta", None))
        if rope.get("rope_type", "default") != "default":
            fail(f"RoPE type {rope['rope_type']} has no OLMo-core counterpart here")
        qk_norm = cfg.model_type == "olmo2"
        names = {"embeddings.weight": ("model.embed_tokens.weight", None),
                 "lm_head.norm.weight": ("model.norm.weight", None)}
        if not tied:
            names["lm_head.w_out.weight"] = ("lm_head.weight", None)
        # Llama's two norms are the inputs' (input_layernorm, post_attention_layernorm: before the
        # MLP); Olmo2's are the outputs' (post_attention_layernorm, post_feedforward_layernorm).
        norms = (("input_layernorm", "post_attention_layernorm") if cfg.model_type == "llama"
                 else ("post_attention_layernorm", "post_feedforward_layernorm"))
        for l in range(n_layers):
            o, h = f"blocks.{l}.", f"model.layers.{l}."
            names.update({
                o + "attention.w_q.weight": (h + "self_attn.q_proj.weight", None),
                o + "attention.w_k.weight": (h + "self_attn.k_proj.weight", None),
                o + "attention.w_v.weight": (h + "self_attn.v_proj.weight", None),
                o + "attention.w_out.weight": (h + "self_attn.o_proj.weight", None),
                o + "feed_forward.w1.weight": (h + "mlp.gate_proj.weight", None),
                o + "feed_forward.w3.weight": (h + "mlp.up_proj.weight", None),
                o + "feed_forward.w2.weight": (h + "mlp.down_proj.weight", None),
                o + "attention_norm.weight": (h + norms[0] + ".weight", None),
                o + "feed_forward_norm.weight": (h + norms[1] + ".weight", None),
            })
            if qk_norm:
                names[o + "attention.q_norm.weight"] = (h + "self_attn.q_norm.weight", None)
                names[o + "attention.k_norm.weight"] = (h + "self_attn.k_norm.weight", None)
    else:
        fail(f"no mapping for a {cfg.model_type} folder")

    if float(theta) != int(theta):
        fail(f"OLMo-core's RoPEConfig takes an integer theta, the model has {theta}")
    twin_params = dict(twin.named_parameters())
    vocab = twin_params[names["embeddings.weight"][0]].shape[0]
    print(f"{topology}: d_model {d}, {n_heads} heads ({n_kv} kv), {n_layers} layers, SwiGLU {inner}, "
          f"vocab {vocab}, eps {eps}, theta {theta}, qk_norm {qk_norm}, tied {tied}")

    def olmo_core_model(block):
        if block == "normalized":
            config = TransformerConfig.ngpt_like(d_model=d, vocab_size=vocab, n_layers=n_layers, n_heads=n_heads,
                                                 n_kv_heads=n_kv, rope_theta=int(theta))
            config.block.feed_forward.hidden_size = inner
        else:
            config = TransformerConfig.llama_like(
                d_model=d, vocab_size=vocab, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
                qk_norm=qk_norm, layer_norm_eps=eps, rope_theta=int(theta), block_name=block,
                feed_forward=FeedForwardConfig(hidden_size=inner, bias=False), tie_word_embeddings=tied)
        model = config.build(init_device="cpu")
        params = dict(model.named_parameters())
        if set(params) != set(names):
            fail(f"OLMo-core's {block} model has parameters {sorted(set(params) - set(names))} that the twin "
                 f"lacks and lacks {sorted(set(names) - set(params))}")
        with torch.no_grad():
            for name, p in params.items():
                source, rows = names[name]
                w = twin_params[source]
                p.copy_(w if rows is None else w[rows[0]:rows[1]])
        return model

    used = {source for source, _ in names.values()}
    if used != set(twin_params):
        fail(f"twin parameters not mapped to OLMo-core: {sorted(set(twin_params) - used)}")

    torch.manual_seed(0)
    ids = torch.randint(vocab, (2, 16))

    def run(model, params):
        """Logits, and the gradient of sum(logits * R) for each name of `params`."""
        model.zero_grad()
        logits = model(ids)
        logits = logits.logits if hasattr(logits, "logits") else logits
        r = torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))
        (logits * r).sum().backward()
        return logits.detach(), {name: p.grad.clone() for name, p in params.items()}

    reference = olmo_core_model(BLOCKS[topology])
    scale = {name: b.ln_scale.item() for name, b in reference.blocks.items() if hasattr(b, "ln_scale")}
    if scale:
        print("OLMo-core's ln_scale per block:", ", ".join(f"{k}: {v:.6g}" for k, v in scale.items()))
    twin.train(False)
    reference.train(False)
    twin_logits, twin_grads = run(twin, twin_params)
    ref_logits, ref_grads = run(reference, dict(reference.named_parameters()))
    logits_err = relative(twin_logits, ref_logits)
    grad_err, worst = 0.0, ""
    for name, (source, rows) in names.items():
        g = twin_grads[source] if rows is None else twin_grads[source][rows[0]:rows[1]]
        if ref_grads[name].abs().max() == 0:
            fail(f"OLMo-core's gradient of {name} is zero: the comparison would say nothing")
        err = relative(g, ref_grads[name])
        if err >= grad_err:
            grad_err, worst = err, name
    print(f"{topology} vs OLMo-core {BLOCKS[topology]}: logits max rel err {logits_err:.3g}, "
          f"gradients max rel err {grad_err:.3g} ({worst}), {len(names)} parameters")
    ok = logits_err < TOLERANCE and grad_err < TOLERANCE

    if topology in ("lns", "reordered"):
        control_logits, _ = run(olmo_core_model("default"), {})
        control_err = relative(twin_logits, control_logits)
        print(f"control: {topology} vs OLMo-core default (Pre-Norm): logits max rel err {control_err:.3g}")
        ok = ok and control_err > 1e-2
    return ok


pairs = sys.argv[1:]
if not pairs or len(pairs) % 2:
    sys.exit("usage: olmo_core_parity.py HF_DIR TOPOLOGY [HF_DIR TOPOLOGY ...]")
failed = 0
for folder, topology in zip(pairs[::2], pairs[1::2]):
    try:
        ok = check(folder, topology)
    except Mismatch as e:
        print(f"olmo_core_parity: {e}")
        ok = False
    print(f"case {topology}: {'ok' if ok else 'FAILED'}", flush=True)
    failed += not ok
sys.exit(1 if failed else 0)
