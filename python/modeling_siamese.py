# The siamese model for Hugging Face transformers (AutoModelForCausalLM with
# trust_remote_code=True). `siamese export` copies this file into every exported folder
# whose topology no stock transformers class computes; config.json's "siamese" entry holds
# the model settings, resolved (kv heads, MLP width and norm biases already decided), and
# the weights keep the C++ parameter names, so the module tree below mirrors
# src/model/transformer.cpp and src/model/topologies/*.cpp one to one.
# Keep it in step with them: tests/export/hf_parity.py compares logits and greedy tokens
# for every topology.
import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast


class SiameseConfig(PretrainedConfig):
    model_type = "siamese"

    def __init__(self, siamese=None, **kwargs):
        self.siamese = siamese or {}
        # Tying lives in the model (the head reads wte); transformers must not tie again.
        kwargs["tie_word_embeddings"] = False
        super().__init__(**kwargs)


class Norm(nn.Module):
    """OLMo's RMSNorm (x * rsqrt(mean(x^2) + eps)), LayerNorm, or the point-wise DyT
    (weight * tanh(alpha x) + bias) and Derf (weight * erf(alpha x + shift) + bias), with an
    optional affine weight and bias: `kind` is layer_norm_type."""

    def __init__(self, kind, dim, eps, affine, bias):
        super().__init__()
        self.kind, self.dim, self.eps = kind, dim, eps
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None
        self.bias = nn.Parameter(torch.zeros(dim)) if affine and bias else None
        pointwise = kind in ("dyt", "derf")
        self.alpha = nn.Parameter(torch.ones(1)) if pointwise else None
        self.shift = nn.Parameter(torch.zeros(1)) if kind == "derf" else None

    def forward(self, x):
        if self.kind not in ("rms", "dyt", "derf"):
            return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)
        if self.kind == "rms":
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        else:
            h = self.alpha * x
            h = torch.tanh(h) if self.kind == "dyt" else torch.erf(h + self.shift)
        if self.weight is not None:
            h = h * self.weight
        h = h.to(x.dtype)
        return h + self.bias if self.bias is not None else h


def make_norm(c, dim, affine=None):
    """The norm every part of the model builds from the config (src/model/norm.cpp)."""
    affine = c["layer_norm_with_affine"] if affine is None else affine
    return Norm(c["layer_norm_type"], dim, c["layer_norm_eps"], affine, c["bias_for_layer_norm"])


def rotate_half(t):
    a, b = t.chunk(2, -1)
    return torch.cat((-b, a), -1)


def attention_window(c, layer):  # model.sliding_window_pattern: keys a query reads, or None
    pattern = c.get("sliding_window_pattern") or []
    w = pattern[layer % len(pattern)] if pattern else -1
    return None if w < 0 else w


class Attention(nn.Module):
    def __init__(self, c, window=None):
        super().__init__()
        self.window = window
        d, self.n_heads, self.n_kv = c["d_model"], c["n_heads"], c["n_kv_heads"]
        self.hd = d // self.n_heads
        self.softmax_mult = 1.0  # model.parametrization's factor, set by the model
        kv = self.n_kv * self.hd
        self.att_proj = nn.Linear(d, d + 2 * kv, bias=c["include_bias"])
        self.attn_out = nn.Linear(d, d, bias=c["include_bias"])
        self.clip = c["clip_qkv"]
        self.full_width = c["attention_layer_norm"]
        def norm(dim):
            return make_norm(c, dim, c["attention_layer_norm_with_affine"])

        self.q_norm = self.k_norm = self.v_norm = None
        if self.full_width:
            self.q_norm, self.k_norm = norm(d), norm(kv)
        if c["use_query_norm"]:
            self.q_norm = norm(self.hd)
        if c["use_key_norm"]:
            self.k_norm = norm(self.hd)
        if c["use_value_norm"]:
            self.v_norm = norm(self.hd)
        self.rope = c["rope"]
        self.theta = c["rope_theta"]
        self.hooks = None  # the topology's sublayer hooks (nGPT, dca)

    def project(self, x):  # att_proj, or each of the three inputs by its rows (hooks' separate_qkv)
        if self.hooks is None or not self.hooks.separate_qkv:
            return self.att_proj(x)
        sizes = [x.shape[-1], self.n_kv * self.hd, self.n_kv * self.hd]
        w = self.att_proj.weight.split(sizes)
        b = (None,) * 3 if self.att_proj.bias is None else self.att_proj.bias.split(sizes)
        return torch.cat([F.linear(x[i], w[i], b[i]) for i in range(3)], -1)

    def forward(self, x):
        B, T, d = x.shape[-3:]
        qkv = self.project(x)
        if self.clip is not None:
            qkv = qkv.clamp(-self.clip, self.clip)
        kv = self.n_kv * self.hd
        q, k, v = qkv.split([d, kv, kv], -1)
        if self.full_width:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.hooks is not None:
            q, k = self.hooks.qk(q, k)
        q = q.view(B, T, self.n_heads, self.hd).transpose(1, 2)
        k = k.view(B, T, self.n_kv, self.hd).transpose(1, 2)
        v = v.view(B, T, self.n_kv, self.hd).transpose(1, 2)
        if not self.full_width:
            if self.q_norm is not None:
                q = self.q_norm(q)
            if self.k_norm is not None:
                k = self.k_norm(k)
        if self.v_norm is not None:
            v = self.v_norm(v)
        if self.rope:
            inv_freq = 1.0 / torch.pow(
                self.theta, torch.arange(0, self.hd, 2, dtype=torch.float32, device=x.device) / self.hd)
            angles = torch.outer(torch.arange(T, dtype=torch.float32, device=x.device), inv_freq)
            emb = torch.cat((angles, angles), -1)
            sin, cos = emb.sin().to(q.dtype), emb.cos().to(q.dtype)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if self.n_kv != self.n_heads:
            k = k.repeat_interleave(self.n_heads // self.n_kv, 1)
            v = v.repeat_interleave(self.n_heads // self.n_kv, 1)
        scale = self.hooks.softmax_scale if self.hooks is not None else None
        if self.softmax_mult != 1.0:  # model.parametrization away from its base shape
            scale = (scale if scale is not None else 1.0 / math.sqrt(self.hd)) * self.softmax_mult
        if self.window is None:
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        else:
            i = torch.arange(T, device=x.device)
            band = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - self.window)
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=band, scale=scale)
        return self.attn_out(ctx.transpose(1, 2).reshape(B, T, d))


class Mlp(nn.Module):
    """Dense: ff_out(act(ff_proj(x))). block_type moe (src/model/mlp.h): OLMoE's router, softmax
    in float32, the top moe_top_k probabilities (rescaled to sum 1 with moe_norm_topk_prob)
    weighting stacked SwiGLU experts, ff_proj / ff_out then being the optional shared expert.
    Without moe_dropless an expert keeps its earliest int(moe_capacity_factor * tokens *
    top_k / experts) assignments (assignment = token * top_k + slot) and drops the rest."""

    def __init__(self, c):
        super().__init__()
        self.act = c["activation_type"]
        d, hidden = c["d_model"], c["mlp_hidden_size"]
        inner = hidden // 2 if self.act == "swiglu" else hidden
        moe = c["block_type"] == "moe"
        self.ff_proj = self.ff_out = self.router = None
        if not moe or c["moe_shared_expert"]:
            self.ff_proj = nn.Linear(d, hidden, bias=c["include_bias"])
            self.ff_out = nn.Linear(inner, d, bias=c["include_bias"])
        if moe:
            n = c["moe_num_experts"]
            self.top_k, self.norm_topk = c["moe_top_k"], c["moe_norm_topk_prob"]
            self.capacity_factor = None if c["moe_dropless"] else c["moe_capacity_factor"]
            self.router = nn.Linear(d, n, bias=False)
            self.experts = nn.Module()
            self.experts.ff_proj = nn.Parameter(torch.empty(n, hidden, d))
            self.experts.ff_out = nn.Parameter(torch.empty(n, d, inner))
        self.hooks = None  # the topology's sublayer hooks (nGPT)

    def activate(self, h):
        if self.act == "swiglu":
            value, gate = h.chunk(2, -1)
            if self.hooks is not None:
                value, gate = self.hooks.swiglu(value, gate)
            return F.silu(gate) * value
        return F.gelu(h) if self.act == "gelu" else F.relu(h)

    def forward(self, x):
        if self.router is None:
            return self.ff_out(self.activate(self.ff_proj(x)))
        flat = x.reshape(-1, x.shape[-1])
        logits = self.router(flat)
        top_p, top_e = F.softmax(logits, -1, dtype=torch.float).topk(self.top_k, -1)
        if self.norm_topk:
            top_p = top_p / top_p.sum(-1, keepdim=True)
        weight_of, expert_of = top_p.to(logits.dtype).reshape(-1), top_e.reshape(-1)
        n = self.experts.ff_proj.shape[0]
        capacity = expert_of.numel()
        if self.capacity_factor is not None:
            capacity = int(self.capacity_factor * expert_of.numel() / n)
        out = torch.zeros_like(flat)
        for e in range(n):
            a = (expert_of == e).nonzero().squeeze(1)[:capacity]
            if a.numel() == 0:
                continue
            rows = a // self.top_k
            h = F.linear(self.activate(F.linear(flat[rows], self.experts.ff_proj[e])), self.experts.ff_out[e])
            out = out.index_add(0, rows, (h * weight_of[a, None]).to(out.dtype))
        if self.ff_proj is not None:
            out = out + self.ff_out(self.activate(self.ff_proj(flat)))
        return out.reshape(x.shape)


class Block(nn.Module):
    def __init__(self, c, window=None):
        super().__init__()
        self.attn, self.mlp = Attention(c, window), Mlp(c)


# ---- Topologies: begin(emb) -> streams, enter(streams, s) -> F's input, leave, finish. ----
# s = 2 * layer + (0 attention, 1 MLP). Parameters live under topology.blocks.{l}.<name>
# and topology.<name>, the C++ names.


class Topology(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.blocks = nn.ModuleList(nn.Module() for _ in range(c["n_layers"]))

    def norm(self, dim=None):
        return make_norm(self.c, dim or self.c["d_model"])

    def block_norm(self, l, name):
        self.blocks[l].add_module(name, self.norm())
        return getattr(self.blocks[l], name)

    def block_param(self, l, name, init):
        self.blocks[l].register_parameter(name, nn.Parameter(init))

    def bp(self, l, name):
        return getattr(self.blocks[l], name)

    def sub_norm(self, s, prefix=""):  # attn_norm / ff_norm of sublayer s
        return self.bp(s // 2, ("attn" if s % 2 == 0 else "ff") + prefix)

    def sublayer_hooks(self, l):  # what block l's attention and MLP do differently
        return None

    def scale_logits(self, logits):
        return logits


class Pre(Topology):
    def __init__(self, c, emb_norm=False):
        super().__init__(c)
        for l in range(c["n_layers"]):
            self.block_norm(l, "attn_norm")
            self.block_norm(l, "ff_norm")
        self.ln_f = self.norm()
        # pre_embednorm: a parameter-free RMSNorm on the embeddings.
        self.emb_norm = Norm("rms", c["d_model"], c["layer_norm_eps"], False, False) if emb_norm else None

    def begin(self, e):
        return [self.emb_norm(e) if self.emb_norm is not None else e]

    def enter(self, st, s):
        return self.sub_norm(s, "_norm")(st[0])

    def leave(self, st, f, s):
        st[0] = st[0] + f

    def finish(self, st):
        return self.ln_f(st[0])


class Post(Topology):  # also DeepNorm (alpha) and Mix-LN's first layers
    def __init__(self, c, alpha=1.0):
        super().__init__(c)
        self.alpha = alpha
        for l in range(c["n_layers"]):
            self.block_norm(l, "attn_norm")
            self.block_norm(l, "ff_norm")

    def begin(self, e):
        return [e]

    def enter(self, st, s):
        return st[0]

    def leave(self, st, f, s):
        st[0] = self.sub_norm(s, "_norm")(st[0] + f if self.alpha == 1.0 else self.alpha * st[0] + f)

    def finish(self, st):
        return st[0]


class ResiDual(Post):
    def __init__(self, c):
        super().__init__(c)
        self.ln_d_f = self.norm()

    def begin(self, e):
        return [e, torch.zeros_like(e)]

    def leave(self, st, f, s):
        st[1] = st[1] + f
        st[0] = self.sub_norm(s, "_norm")(st[0] + f)

    def finish(self, st):
        return st[0] + self.ln_d_f(st[1])


class Peri(Pre):
    def __init__(self, c):
        super().__init__(c)
        for l in range(c["n_layers"]):
            self.block_norm(l, "attn_out_norm")
            self.block_norm(l, "ff_out_norm")

    def leave(self, st, f, s):
        st[0] = st[0] + self.sub_norm(s, "_out_norm")(f)


class Reordered(Pre):  # OLMo-2: the norm on each sublayer's output
    def enter(self, st, s):
        return st[0]

    def leave(self, st, f, s):
        st[0] = st[0] + self.sub_norm(s, "_norm")(f)


class LayerNormScaling(Pre):
    def enter(self, st, s):
        return self.sub_norm(s, "_norm")(st[0]) * (1.0 / math.sqrt(s // 2 + 1))


class MixLN(Pre):
    def __init__(self, c):
        super().__init__(c)
        self.post_layers = math.floor(c["mixln_alpha"] * c["n_layers"])

    def enter(self, st, s):
        return st[0] if s // 2 < self.post_layers else self.sub_norm(s, "_norm")(st[0])

    def leave(self, st, f, s):
        st[0] = self.sub_norm(s, "_norm")(st[0] + f) if s // 2 < self.post_layers else st[0] + f


class Hybrid(Topology):  # star: HybridNorm* (first block Pre-Norm)
    def __init__(self, c, star=False):
        super().__init__(c)
        self.star = star
        if star:
            self.block_norm(0, "attn_norm")
        for l in range(c["n_layers"]):
            self.block_norm(l, "ff_norm")
        self.ln_f = self.norm()

    def begin(self, e):
        return [e]

    def enter(self, st, s):
        if self.star and s < 2:
            return self.sub_norm(s, "_norm")(st[0])
        if s % 2 == 1:
            st[0] = self.bp(s // 2, "ff_norm")(st[0])
        return st[0]

    def leave(self, st, f, s):
        st[0] = st[0] + f

    def finish(self, st):
        return self.ln_f(st[0])


def add_weighted(streams, w, f):  # h_i += w_i f (hyper_streams.h), w: [.., n]
    w = w.unsqueeze(-1)
    for i in range(len(streams)):
        streams[i] = streams[i] + w.select(-2, i) * f


class HyperConnections(Topology):
    def __init__(self, c):
        super().__init__(c)
        n, d = c["hc_rate"], c["d_model"]
        self.n, self.dynamic = n, c["hc_dynamic"]
        for s in range(2 * c["n_layers"]):
            l, p = s // 2, ("attn_hc_" if s % 2 == 0 else "ff_hc_")
            self.block_norm(l, "attn_norm" if s % 2 == 0 else "ff_norm")
            alpha = torch.zeros(n, 1 + n)
            alpha[s % n, 0] = 1.0
            alpha[:, 1:] = torch.eye(n)
            self.block_param(l, p + "alpha", alpha)
            self.block_param(l, p + "beta", torch.ones(n))
            if self.dynamic:
                self.block_norm(l, p + "norm")
                self.block_param(l, p + "w_alpha", torch.zeros(d, 1 + n))
                self.block_param(l, p + "w_beta", torch.zeros(d, 1))
                self.block_param(l, p + "s_alpha", torch.full((1,), 0.01))
                self.block_param(l, p + "s_beta", torch.full((1,), 0.01))
        self.ln_f = self.norm()
        self.pending_beta = None

    def begin(self, e):
        return [e] * self.n

    def enter(self, st, s):
        l, p = s // 2, ("attn_hc_" if s % 2 == 0 else "ff_hc_")
        h = torch.stack(st, -2)
        alpha, beta = self.bp(l, p + "alpha"), self.bp(l, p + "beta")
        if self.dynamic:
            hn = self.bp(l, p + "norm")(h)
            alpha = alpha + self.bp(l, p + "s_alpha") * torch.tanh(hn @ self.bp(l, p + "w_alpha"))
            beta = beta + self.bp(l, p + "s_beta") * torch.tanh(hn @ self.bp(l, p + "w_beta")).squeeze(-1)
        inp = (alpha[..., 0].unsqueeze(-2) @ h).squeeze(-2)
        mixed = alpha[..., 1:].transpose(-1, -2) @ h
        st[:] = list(mixed.unbind(-2))
        self.pending_beta = beta
        return self.sub_norm(s, "_norm")(inp)

    def leave(self, st, f, s):
        add_weighted(st, self.pending_beta, f)

    def finish(self, st):
        return self.ln_f(sum(st[1:], st[0]))


class ManifoldStreams(Topology):
    """mHC / mHC-lite (src/model/topologies/manifold_streams.h): the arithmetic of transformers'
    DeepseekV4HyperConnection and DeepseekV4HyperHead; `mixing` turns the m logits into comb."""

    def __init__(self, c, m):
        super().__init__(c)
        n, d = c["hc_rate"], c["d_model"]
        self.n, self.m = n, m
        for s in range(2 * c["n_layers"]):
            l, p = s // 2, ("attn_mhc_" if s % 2 == 0 else "ff_mhc_")
            self.block_norm(l, "attn_norm" if s % 2 == 0 else "ff_norm")
            self.block_param(l, p + "fn", torch.zeros(2 * n + m, n * d))
            self.block_param(l, p + "base", torch.zeros(2 * n + m))
            self.block_param(l, p + "scale", torch.ones(3))
        self.mhc_head_fn = nn.Parameter(torch.zeros(n, n * d))
        self.mhc_head_base = nn.Parameter(torch.zeros(n))
        self.mhc_head_scale = nn.Parameter(torch.ones(1))
        self.ln_f = self.norm()
        self.pending_post = None

    def flat_rms(self, h):
        x = h.flatten(-2)
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.c["layer_norm_eps"])

    def begin(self, e):
        return [e] * self.n

    def enter(self, st, s):
        l, p = s // 2, ("attn_mhc_" if s % 2 == 0 else "ff_mhc_")
        fn, base, scale = (self.bp(l, p + k) for k in ("fn", "base", "scale"))
        h = torch.stack(st, -2)
        hw = h.to(fn.dtype)
        n, m, eps = self.n, self.m, self.c["mhc_eps"]
        z = F.linear(self.flat_rms(hw), fn).split([n, n, m], -1)
        b = base.split([n, n, m])
        pre = torch.sigmoid(z[0] * scale[0] + b[0]) + eps
        post = self.c["mhc_post_scale"] * torch.sigmoid(z[1] * scale[1] + b[1])
        comb = self.mixing(z[2] * scale[2] + b[2])
        inp = (pre.unsqueeze(-1) * hw).sum(-2).to(h.dtype)
        st[:] = list((comb.transpose(-1, -2) @ hw).to(h.dtype).unbind(-2))
        self.pending_post = post
        return self.sub_norm(s, "_norm")(inp)

    def leave(self, st, f, s):
        add_weighted(st, self.pending_post, f)

    def finish(self, st):
        h = torch.stack(st, -2)
        hw = h.to(self.mhc_head_fn.dtype)
        mixes = F.linear(self.flat_rms(hw), self.mhc_head_fn)
        pre = torch.sigmoid(mixes * self.mhc_head_scale + self.mhc_head_base) + self.c["mhc_eps"]
        return self.ln_f((pre.unsqueeze(-1) * hw).sum(-2).to(h.dtype))


class Mhc(ManifoldStreams):  # Sinkhorn-Knopp as DeepseekV4HyperConnection runs it
    def __init__(self, c):
        super().__init__(c, c["hc_rate"] ** 2)

    def mixing(self, logits):
        n, eps = self.n, self.c["mhc_eps"]
        comb = torch.softmax(logits.unflatten(-1, (n, n)), -1) + eps
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
        for _ in range(self.c["mhc_sinkhorn_iters"] - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + eps)
            comb = comb / (comb.sum(-2, keepdim=True) + eps)
        return comb


class MhcLite(ManifoldStreams):  # comb = sum_k softmax(logits)_k P_k over the n! permutations
    def __init__(self, c):
        # lexicographic, as std::next_permutation; the matrices are built where the logits are
        # (transformers builds the module on the meta device)
        perm_list = list(itertools.permutations(range(c["hc_rate"])))
        super().__init__(c, len(perm_list))
        self.perm_list = perm_list

    def mixing(self, logits):
        n = self.n
        perms = torch.zeros(len(self.perm_list), n * n, dtype=logits.dtype, device=logits.device)
        for k, p in enumerate(self.perm_list):
            for i in range(n):
                perms[k, i * n + p[i]] = 1.0
        return (torch.softmax(logits, -1) @ perms).unflatten(-1, (n, n))


class AttnRes(Topology):
    """Attention Residuals, Full and Block (src/model/topologies/attnres.cpp): sublayer s reads
    LN_s(sum_i softmax_i(w_s . RMSNorm(v_i)) v_i) over the embeddings, the completed blocks'
    summed outputs and the current block's partial sum; the head the same with its own query."""

    def __init__(self, c):
        super().__init__(c)
        d = c["d_model"]
        for l in range(c["n_layers"]):
            self.block_norm(l, "attn_norm")
            self.block_norm(l, "ff_norm")
            if l > 0:  # sublayer 0 reads the embeddings alone
                self.block_param(l, "attn_res_query", torch.zeros(d))
            self.block_param(l, "ff_res_query", torch.zeros(d))
        self.res_query_f = nn.Parameter(torch.zeros(d))
        self.ln_f = self.norm()
        self.block_size = max(c["attnres_block_size"], 1)
        self.open_block = False  # whether the last source is the current block's partial sum

    def aggregate(self, st, q):
        eps = self.c["layer_norm_eps"]
        logits = torch.stack([(v @ q) * torch.rsqrt(v.square().mean(-1) + eps) for v in st], -1)
        a = torch.softmax(logits, -1)
        return sum(a[..., i, None] * v for i, v in enumerate(st))

    def begin(self, e):
        self.open_block = False
        return [e.to(self.res_query_f.dtype)]

    def enter(self, st, s):
        if s == 0:
            return self.sub_norm(s, "_norm")(st[0])
        q = self.bp(s // 2, ("attn" if s % 2 == 0 else "ff") + "_res_query")
        return self.sub_norm(s, "_norm")(self.aggregate(st, q))

    def leave(self, st, f, s):
        v = f.to(self.res_query_f.dtype)
        if self.open_block:
            st[-1] = st[-1] + v
        else:
            st.append(v)
        self.open_block = (s + 1) % self.block_size != 0

    def finish(self, st):
        return self.ln_f(self.aggregate(st, self.res_query_f))


class Speedrun(Topology):
    """The speedrun residual recipe (src/model/topologies/speedrun.cpp, after nanochat's GPT.forward):
    x0 = RMS(emb); block l reads x = r_l x + a_l x0, then Pre-Norm sublayers; the x after block
    L // 2 is kept, and the head reads LN_f(x - b x_mid)."""

    def __init__(self, c):
        super().__init__(c)
        for l in range(c["n_layers"]):
            self.block_norm(l, "attn_norm")
            self.block_norm(l, "ff_norm")
            self.block_param(l, "resid_lambda", torch.ones(1))
            self.block_param(l, "x0_lambda", torch.zeros(1))
        self.backout_lambda = nn.Parameter(torch.zeros(1))
        self.ln_f = self.norm()
        self.emb_norm = Norm("rms", c["d_model"], c["layer_norm_eps"], False, False)

    def begin(self, e):
        x0 = self.emb_norm(e)
        return [x0, x0]

    def enter(self, st, s):
        if s % 2 == 0:
            st[0] = self.bp(s // 2, "resid_lambda") * st[0] + self.bp(s // 2, "x0_lambda") * st[1]
        return self.sub_norm(s, "_norm")(st[0])

    def leave(self, st, f, s):
        st[0] = st[0] + f
        if s == 2 * (self.c["n_layers"] // 2) + 1:
            st.append(st[0])

    def finish(self, st):
        x = st[0] - self.backout_lambda * st[2] if len(st) > 2 else st[0]
        return self.ln_f(x)


def x_placement(name, c, l, attn):
    """Where the X stream meets a sublayer (siamese.cpp's x_placement): X's enter norm, whether
    it replaces X, the factor on X's input, whether the fused input is normalized, the weight
    on X before the add and the norm on F's output that X absorbs."""
    f = "attn" if attn else "ff"
    post = {"norm": f + "_norm", "replaces": True}
    pre = {"norm": f + "_norm", "replaces": False}
    if name == "post" or (name == "mixln" and l < math.floor(c["mixln_alpha"] * c["n_layers"])):
        p = post
    elif name == "hybrid" or (name == "hybrid_star" and l > 0):
        p = {"norm": None, "input_norm": False} if attn else post
    elif name == "deepnorm":
        p = {**post, "weight": (2.0 * c["n_layers"]) ** 0.25}
    elif name == "peri":
        p = {**pre, "out_norm": f + "_out_norm"}
    elif name == "lns":
        p = {**pre, "scale": 1.0 / math.sqrt(l + 1)}
    elif name == "reordered":
        p = {"norm": None, "out_norm": f + "_norm"}
    elif name in ("pre", "mixln", "hybrid_star"):
        p = pre
    else:
        raise ValueError(f"siamese.x_stream {name!r} is not a placement SiameseNorm gives X")
    defaults = {"norm": None, "replaces": False, "scale": 1.0, "input_norm": True, "weight": 1.0, "out_norm": None}
    return {**defaults, **p}


class Siamese(Topology):  # SiameseNorm: Pre-Norm stream Y + stream X placed as x_stream
    def __init__(self, c, x_stream):
        super().__init__(c)
        sc = c["siamese"]
        self.gamma = sc["gamma"]
        for l in range(c["n_layers"]):
            if self.gamma:
                self.block_param(l, "c1", torch.ones(c["d_model"]))
        self.inv_depth = [1.0 / math.sqrt(2.0 * (l + 1)) if sc["depth_scaling"] else 1.0
                          for l in range(c["n_layers"])]
        self.ln_f, self.ln_y_f, self.ln_final_f = self.norm(), self.norm(), self.norm()
        self.place, self.x_norm, self.y_norm, self.input_norm, self.out_norm = [], [], [], [], []
        for s in range(2 * c["n_layers"]):
            l, f = s // 2, "attn" if s % 2 == 0 else "ff"
            p = x_placement(x_stream, c, l, s % 2 == 0)
            self.place.append(p)
            self.x_norm.append(self.block_norm(l, p["norm"]) if p["norm"] else None)
            self.y_norm.append(self.block_norm(l, f + "_y_norm"))
            fused = sc["fused_input_norm"] and p["input_norm"]
            self.input_norm.append(self.block_norm(l, f + "_input_norm") if fused else None)
            self.out_norm.append(self.block_norm(l, p["out_norm"]) if p["out_norm"] else None)

    def begin(self, e):
        return [e, e]

    def enter(self, st, s):
        p, l = self.place[s], s // 2
        x = self.x_norm[s](st[0]) if self.x_norm[s] is not None else st[0]
        y = self.y_norm[s](st[1])
        if p["replaces"]:
            st[0] = x
        if p["scale"] != 1.0:
            x = x * p["scale"]
        fused = (y + x * self.bp(l, "c1") if self.gamma else x + y) if s % 2 == 0 else x + y
        return self.input_norm[s](fused) if self.input_norm[s] is not None else fused

    def leave(self, st, f, s):
        p = self.place[s]
        x_term = self.out_norm[s](f) if self.out_norm[s] is not None else f
        st[0] = st[0] * p["weight"] + x_term * self.inv_depth[s // 2]
        st[1] = st[1] + f

    def finish(self, st):
        return self.ln_final_f(self.ln_f(st[0]) + self.ln_y_f(st[1]))


def l2_normalize(x):
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.promote_types(x.dtype, torch.float32))
    return x / norm.to(x.dtype)


class SublayerHooks:
    """What a topology changes inside a block's sublayers (sublayer_hooks.h); these defaults
    change nothing."""

    softmax_scale = None
    separate_qkv = False  # attention's input is [3, B, T, d]: queries', keys' and values' inputs

    def qk(self, q, k):
        return q, k

    def swiglu(self, value, gate):
        return value, gate


class NormalizedHooks(SublayerHooks):
    """nGPT's attention and MLP (src/model/topologies/ngpt.cpp, sublayer_hooks)."""

    def __init__(self, topo, l, softmax_scale):
        self.topo, self.l, self.softmax_scale = topo, l, softmax_scale

    def qk(self, q, k):
        sq, sk, r = self.topo.bp(self.l, "sq"), self.topo.bp(self.l, "sk"), self.topo.sqrt_d
        return (l2_normalize(q) * (sq * r)).to(q.dtype), (l2_normalize(k) * (sk * r)).to(k.dtype)

    def swiglu(self, value, gate):
        su, sv = self.topo.bp(self.l, "su"), self.topo.bp(self.l, "sv")
        return (value * su).to(value.dtype), (gate * (sv * self.topo.sqrt_d)).to(gate.dtype)


class Normalized(Topology):  # nGPT: x = Norm(x + alpha (Norm(F(x)) - x)), scaled q/k, SwiGLU, logits
    def __init__(self, c):
        super().__init__(c)
        d = c["d_model"]
        self.sqrt_d = math.sqrt(d)
        kv, inner = c["n_kv_heads"] * (d // c["n_heads"]), c["mlp_hidden_size"] // 2
        for l in range(c["n_layers"]):
            for name, size in (("attn_alpha", d), ("ff_alpha", d), ("sq", d), ("sk", kv)):
                self.block_param(l, name, torch.full((size,), 1.0 / self.sqrt_d))
            self.block_param(l, "su", torch.ones(inner))
            self.block_param(l, "sv", torch.ones(inner))
        self.sz = nn.Parameter(torch.full((c["embedding_size"],), 1.0 / self.sqrt_d))

    def sublayer_hooks(self, l):
        return NormalizedHooks(self, l, math.sqrt(self.c["d_model"] // self.c["n_heads"]))

    def begin(self, e):
        return [e]

    def enter(self, st, s):
        return st[0]

    def leave(self, st, f, s):
        alpha = (self.bp(s // 2, "attn_alpha" if s % 2 == 0 else "ff_alpha") * (0.05 * self.sqrt_d)).abs()
        st[0] = l2_normalize(st[0] + alpha * (l2_normalize(f) - st[0]))

    def finish(self, st):
        return st[0]

    def scale_logits(self, logits):
        return logits * (self.sz * self.sqrt_d).to(logits.dtype)


class SeparateInputs(SublayerHooks):
    separate_qkv = True


class DeepCrossAttention(Topology):
    """DeepCrossAttention (src/model/topologies/dca.cpp, after the package deep-cross-attention):
    block l's query, key and value inputs are GRN_o(Y) = sum_i y_i (relu(w_o . N(y_i)) + b_o,i)
    over the first and last k earlier outputs (y_0 the embeddings), each normalized; the block
    outputs a + MLP(N(a + q)) with a the attention's output; the head reads LN_f(GRN_f(Y))."""

    def __init__(self, c):
        super().__init__(c)
        d, self.k = c["d_model"], c["dca_past_layers"]
        for l in range(c["n_layers"]):
            for name in ("grn_norm", "q_input_norm", "k_input_norm", "v_input_norm", "ff_norm"):
                self.block_norm(l, name)
            self.block_param(l, "grn_weight", torch.zeros(3, d))
            self.block_param(l, "grn_bias", torch.ones(3, min(l + 1, 2 * self.k), d))
        self.grn_norm_f = self.norm()
        self.grn_weight_f = nn.Parameter(torch.zeros(1, d))
        self.grn_bias_f = nn.Parameter(torch.ones(1, min(c["n_layers"] + 1, 2 * self.k), d))
        self.ln_f = self.norm()
        self.carry = None  # the MLP's input a + q, from the attention's enter to the MLP's

    def sublayer_hooks(self, l):
        return SeparateInputs()

    @staticmethod
    def combine(st, norm, w, b):  # [outputs, B, T, d]
        y = torch.stack(st)
        a = torch.relu(norm(y) @ w.t())
        return torch.einsum("nbto,nbtd->obtd", a, y) + torch.einsum("ond,nbtd->obtd", b, y)

    def begin(self, e):
        return [e.to(self.grn_weight_f.dtype)]

    def enter(self, st, s):
        blk = self.blocks[s // 2]
        if s % 2 == 1:
            return blk.ff_norm(self.carry)
        q, k, v = self.combine(st, blk.grn_norm, blk.grn_weight, blk.grn_bias)
        self.carry = q
        return torch.stack((blk.q_input_norm(q), blk.k_input_norm(k), blk.v_input_norm(v)))

    def leave(self, st, f, s):
        f = f.to(self.grn_weight_f.dtype)
        if s % 2 == 0:
            self.carry = self.carry + f
            st.append(f)
            return
        st[-1] = st[-1] + f
        if len(st) > 2 * self.k:
            del st[self.k]

    def finish(self, st):
        return self.ln_f(self.combine(st, self.grn_norm_f, self.grn_weight_f, self.grn_bias_f)[0])


TOPOLOGIES = {
    "pre": Pre,
    "pre_embednorm": lambda c: Pre(c, emb_norm=True),
    "post": Post,
    "deepnorm": lambda c: Post(c, alpha=(2.0 * c["n_layers"]) ** 0.25),
    "residual": ResiDual,
    "peri": Peri,
    "mixln": MixLN,
    "hybrid": Hybrid,
    "hybrid_star": lambda c: Hybrid(c, star=True),
    "hc": HyperConnections,
    "post_pre": lambda c: Siamese(c, "post"),
    "hybrid_pre": lambda c: Siamese(c, "hybrid"),
    "siamese": lambda c: Siamese(c, c["siamese"]["x_stream"] or "post"),
    "reordered": Reordered,
    "lns": LayerNormScaling,
    "ngpt": Normalized,
    "mhc": Mhc,
    "mhc_lite": MhcLite,
    "attnres": AttnRes,
    "speedrun": Speedrun,
    "dca": DeepCrossAttention,
}


class SiameseForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = SiameseConfig
    base_model_prefix = "siamese"  # no submodule has this name: weights load as named
    main_input_name = "input_ids"

    def __init__(self, config):
        super().__init__(config)
        c = config.siamese
        d = c["d_model"]
        self.c = c
        self.wte = nn.Embedding(c["embedding_size"], d)
        self.wpe = None if c["rope"] else nn.Embedding(c["max_sequence_length"], d)
        self.emb_norm = None
        if c["embedding_layer_norm"]:
            self.emb_norm = make_norm(c, d)
        self.blocks = nn.ModuleList(Block(c, attention_window(c, l)) for l in range(c["n_layers"]))
        self.topology = TOPOLOGIES[c["residual"]](c)
        self.mult = {"softmax": 1.0, "branch": 1.0, "logits": 1.0, **c.get("multipliers", {})}
        for l, block in enumerate(self.blocks):
            block.attn.hooks = block.mlp.hooks = self.topology.sublayer_hooks(l)
            block.attn.softmax_mult = self.mult["softmax"]
        self.ff_out = None if c["weight_tying"] else nn.Linear(d, c["embedding_size"], bias=c["include_bias"])
        self.post_init()

    def _init_weights(self, module):
        pass  # every weight comes from the exported file

    def get_input_embeddings(self):
        return self.wte

    def prepare_inputs_for_generation(self, input_ids, **kwargs):
        # No KV cache here: every step reads the whole sequence.
        return {"input_ids": input_ids}

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        T = input_ids.shape[1]
        x = self.wte(input_ids)
        if self.emb_norm is not None:
            x = self.emb_norm(x)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=input_ids.device))
        topo = self.topology
        st = topo.begin(x)
        for s in range(2 * self.c["n_layers"]):
            block = self.blocks[s // 2]
            f = (block.attn if s % 2 == 0 else block.mlp)(topo.enter(st, s))
            if self.mult["branch"] != 1.0:
                f = f * self.mult["branch"]
            topo.leave(st, f, s)
        h = topo.finish(st)
        logits = F.linear(h, self.wte.weight) if self.ff_out is None else self.ff_out(h)
        if self.c["scale_logits"]:
            logits = logits / math.sqrt(self.c["d_model"])
        if self.mult["logits"] != 1.0:
            logits = logits * self.mult["logits"]
        logits = topo.scale_logits(logits)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
        return CausalLMOutputWithPast(loss=loss, logits=logits)
