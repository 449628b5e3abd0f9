"""An independent PyTorch implementation of fivefold's transformer, written
from the documents (src/model/model.h, docs/moe-semantics.md, the kernel
headers in src/kern/) rather than from the C code. It serves as the reference
that the C forward, backward and optimizer are compared against
(compare.py), and as the PyTorch baseline that benchmarks time.

    cfg = config_from_dict(json.load(open("model.json")))
    model = build_model(cfg, seed=0)            # random init, model.h names
    logits, losses = model(tokens, targets)     # losses: lm, aux, z, total

model_type "gpt2" configs get the GPT-2 of gpt2_reference.py instead
(make_model / build_model / load_config dispatch on the config).

Parameter names (model.named_parameters()) are exactly fivefold's tensor
names, so state dicts move between the two by name. The MoE layer is written
plainly (a loop over experts with index masks) to stay easy to check against
docs/moe-semantics.md; it is also how common PyTorch MoE code is written.
"""
import json
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import gpt2_reference


def _f32(x):
    """fivefold stores config floats in float32; use the same value here."""
    return float(np.float32(x))


@dataclass
class RefConfig:
    model_type: str = "fivefold"
    vocab_size: int = 0
    hidden_size: int = 0
    num_layers: int = 0
    num_heads: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    intermediate_size: int = 0
    rope_theta: float = 10000.0
    rms_norm_eps: float = _f32(1e-5)
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # q/k/v projection biases (qkv_bias, or attention_bias)
    o_bias: bool = False  # output projection bias (Llama's attention_bias)
    max_position_embeddings: int = 2048
    init_std: float = _f32(0.02)
    num_experts: int = 0
    top_k: int = 2
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    is_moe_layer: list = field(default_factory=list)
    router_score: str = "softmax"  # or "sigmoid"
    router_order: str = "softmax_then_topk"  # or "topk_then_softmax"
    norm_topk_prob: bool = True
    topk_scaling_factor: float = 1.0
    aux_loss_coeff: float = 0.0
    z_loss_coeff: float = 0.0
    capacity_factor: float = 0.0  # <= 0: dropless
    drop_policy: str = "probs"  # or "position"
    pad_to_capacity: bool = False


def config_from_dict(d):
    """Reads a config the way src/model/config.c does: Hugging Face field
    names plus fivefold's moe_* options; null counts as absent."""
    d = {k: v for k, v in d.items() if v is not None}
    if d.get("model_type") == "gpt2":
        return gpt2_reference.config_from_dict(d)
    c = RefConfig()
    c.model_type = d.get("model_type", "fivefold")
    c.vocab_size = int(d["vocab_size"])
    c.hidden_size = int(d["hidden_size"])
    c.num_layers = int(d["num_hidden_layers"])
    c.num_heads = int(d["num_attention_heads"])
    c.num_kv_heads = int(d.get("num_key_value_heads", c.num_heads))
    c.head_dim = int(d.get("head_dim", c.hidden_size // c.num_heads))
    c.intermediate_size = int(d.get("intermediate_size", 0))
    # Absent rope_theta / rms_norm_eps take the Hugging Face class default of
    # the model type (LlamaConfig, MixtralConfig, Qwen2MoeConfig).
    hf_theta = 1e6 if c.model_type in ("mixtral", "qwen2_moe") else 10000.0
    hf_eps = 1e-6 if c.model_type in ("llama", "qwen2", "qwen2_moe") else 1e-5
    c.rope_theta = _f32(d.get("rope_theta", hf_theta))
    c.rms_norm_eps = _f32(d.get("rms_norm_eps", hf_eps))
    c.tie_word_embeddings = bool(d.get("tie_word_embeddings", False))
    c.o_bias = bool(d.get("attention_bias", False))
    c.qkv_bias = bool(d.get("qkv_bias", False)) or c.o_bias
    c.max_position_embeddings = int(d.get("max_position_embeddings", 2048))
    c.init_std = _f32(d.get("initializer_range", 0.02))
    if "num_experts" in d and "num_local_experts" in d and d["num_experts"] != d["num_local_experts"]:
        raise ValueError("num_experts and num_local_experts disagree")
    c.num_experts = int(d.get("num_experts", d.get("num_local_experts", 0)))
    c.top_k = int(d.get("num_experts_per_tok", 2))
    c.moe_intermediate_size = int(d.get("moe_intermediate_size", c.intermediate_size))
    c.shared_expert_intermediate_size = int(d.get("shared_expert_intermediate_size", 0))
    c.norm_topk_prob = bool(d.get("norm_topk_prob", c.model_type != "qwen2_moe"))
    c.router_score = d.get("moe_router_score_function", "softmax")
    c.router_order = d.get("moe_router_order", "softmax_then_topk")
    c.drop_policy = d.get("moe_token_drop_policy", "probs")
    c.topk_scaling_factor = _f32(d.get("moe_router_topk_scaling_factor", 1.0))
    c.aux_loss_coeff = _f32(d.get("moe_aux_loss_coeff", d.get("router_aux_loss_coef", 0.0)))
    c.z_loss_coeff = _f32(d.get("moe_z_loss_coeff", 0.0))
    c.capacity_factor = _f32(d.get("moe_expert_capacity_factor", 0.0))
    c.pad_to_capacity = bool(d.get("moe_pad_expert_input_to_capacity", False))
    L = c.num_layers
    if "moe_layer_pattern" in d:
        c.is_moe_layer = [bool(x) for x in d["moe_layer_pattern"]]
        if len(c.is_moe_layer) != L:
            raise ValueError("moe_layer_pattern needs one entry per layer")
    elif c.num_experts == 0:
        c.is_moe_layer = [False] * L
    elif "moe_layer_freq" in d:
        k = int(d["moe_layer_freq"])
        c.is_moe_layer = [i % k == 0 for i in range(L)]
    else:
        step = int(d.get("decoder_sparse_step", 1))
        only = set(int(i) for i in d.get("mlp_only_layers", []))
        c.is_moe_layer = [(i + 1) % step == 0 and i not in only for i in range(L)]
    if c.num_experts == 0:
        c.is_moe_layer = [False] * L
    for name, value, allowed in (
        ("moe_router_score_function", c.router_score, ("softmax", "sigmoid")),
        ("moe_router_order", c.router_order, ("softmax_then_topk", "topk_then_softmax")),
        ("moe_token_drop_policy", c.drop_policy, ("probs", "position")),
    ):
        if value not in allowed:
            raise ValueError(f"{name}: unknown value {value!r}")
    return c


def load_config(path):
    with open(path) as f:
        return config_from_dict(json.load(f))


# ---------------------------------------------------------------- layers


class RMSNorm(nn.Module):
    """out = x / sqrt(mean(x^2) + eps) * w (src/kern/rmsnorm.h)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def swiglu(h):
    """h [..., 2F]: gate = first F columns, up = last F (src/kern/swiglu.h)."""
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


def rope_cos_sin(T, D, theta, dtype, device):
    """Hugging Face rotate_half convention: element i pairs with i + D/2 and
    rotates by pos * theta^(-2i/D) (src/kern/rope.h)."""
    inv_freq = theta ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2.0 / D)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [T, D/2]
    angles = torch.cat([angles, angles], dim=-1)  # [T, D]
    return angles.cos().to(dtype=dtype, device=device), angles.sin().to(dtype=dtype, device=device)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class Attention(nn.Module):
    """Causal GQA: query head h reads kv head h // (Hq / Hkv); scale
    1/sqrt(D); RoPE on q and k (src/kern/attention.h)."""

    def __init__(self, cfg):
        super().__init__()
        C, D = cfg.hidden_size, cfg.head_dim
        self.Hq, self.Hkv, self.D, self.theta = cfg.num_heads, cfg.num_kv_heads, D, cfg.rope_theta
        self.wq = nn.Parameter(torch.empty(self.Hq * D, C))
        self.wk = nn.Parameter(torch.empty(self.Hkv * D, C))
        self.wv = nn.Parameter(torch.empty(self.Hkv * D, C))
        self.wo = nn.Parameter(torch.empty(C, self.Hq * D))
        # Projection biases (Qwen2's q/k/v, Llama's attention_bias), added
        # before RoPE as part of the projection.
        self.bq = nn.Parameter(torch.empty(self.Hq * D)) if cfg.qkv_bias else None
        self.bk = nn.Parameter(torch.empty(self.Hkv * D)) if cfg.qkv_bias else None
        self.bv = nn.Parameter(torch.empty(self.Hkv * D)) if cfg.qkv_bias else None
        self.bo = nn.Parameter(torch.empty(C)) if cfg.o_bias else None

    def forward(self, x):
        B, T, _ = x.shape
        D = self.D
        q = F.linear(x, self.wq, self.bq).view(B, T, self.Hq, D)
        k = F.linear(x, self.wk, self.bk).view(B, T, self.Hkv, D)
        v = F.linear(x, self.wv, self.bv).view(B, T, self.Hkv, D)
        cos, sin = rope_cos_sin(T, D, self.theta, x.dtype, x.device)
        cos, sin = cos[None, :, None, :], sin[None, :, None, :]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.Hq // self.Hkv
        q = q.transpose(1, 2)  # [B, Hq, T, D]
        k = k.transpose(1, 2).repeat_interleave(group, dim=1)
        v = v.transpose(1, 2).repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        out = scores.softmax(dim=-1) @ v  # [B, Hq, T, D]
        out = out.transpose(1, 2).reshape(B, T, self.Hq * D)
        return F.linear(out, self.wo, self.bo)


class DenseMLP(nn.Module):
    """SwiGLU MLP; also the shared expert of an MoE layer."""

    def __init__(self, C, Fdim):
        super().__init__()
        self.w_gate_up = nn.Parameter(torch.empty(2 * Fdim, C))
        self.w_down = nn.Parameter(torch.empty(C, Fdim))

    def forward(self, x):
        return swiglu(x @ self.w_gate_up.t()) @ self.w_down.t()


class Experts(nn.Module):
    def __init__(self, E, C, Fe):
        super().__init__()
        self.w_gate_up = nn.Parameter(torch.empty(E, 2 * Fe, C))
        self.w_down = nn.Parameter(torch.empty(E, C, Fe))


def topk_lower_index_first(values, k):
    """Top-k in descending value order, ties broken by the lower index."""
    return torch.sort(values, dim=-1, descending=True, stable=True).indices[..., :k]


class MoE(nn.Module):
    """docs/moe-semantics.md, step by step."""

    def __init__(self, cfg):
        super().__init__()
        C, E = cfg.hidden_size, cfg.num_experts
        self.cfg = cfg
        self.router = nn.Parameter(torch.empty(E, C))
        self.experts = Experts(E, C, cfg.moe_intermediate_size)
        if cfg.shared_expert_intermediate_size > 0:
            self.shared = DenseMLP(C, cfg.shared_expert_intermediate_size)
        else:
            self.shared = None

    def route(self, z):
        """Routing weights w [N, k], experts idx [N, k] and the aux-loss
        distribution q [N, E] from router logits z [N, E] (steps 2-3)."""
        cfg, k = self.cfg, self.cfg.top_k
        if cfg.router_score == "softmax":
            q = z.softmax(dim=-1)
            if cfg.router_order == "softmax_then_topk":
                idx = topk_lower_index_first(q, k)
                w = q.gather(1, idx)
                if cfg.norm_topk_prob:
                    w = w / w.sum(dim=-1, keepdim=True)
            else:
                idx = topk_lower_index_first(z, k)
                w = z.gather(1, idx).softmax(dim=-1)
        else:
            s = torch.sigmoid(z)
            idx = topk_lower_index_first(s, k)
            w = s.gather(1, idx)
            if k > 1:
                w = w / w.sum(dim=-1, keepdim=True)
            q = s / s.sum(dim=-1, keepdim=True)
        return w * cfg.topk_scaling_factor, idx, q

    def capacity_keep_mask(self, w, idx):
        """kept [N, k] bool after the capacity rule (step 5)."""
        cfg = self.cfg
        N, k = idx.shape
        E = cfg.num_experts
        kept = torch.ones(N, k, dtype=torch.bool, device=idx.device)
        if not cfg.capacity_factor > 0:
            return kept, 0
        capacity = math.ceil(N * k * cfg.capacity_factor / E)
        wd = w.detach()
        for e in range(E):
            n_idx, j_idx = (idx == e).nonzero(as_tuple=True)  # row-major: (n, j) order
            if n_idx.numel() <= capacity:
                continue
            if cfg.drop_policy == "probs":
                order = torch.sort(wd[n_idx, j_idx], descending=True, stable=True).indices
            else:
                order = torch.arange(n_idx.numel(), device=idx.device)
            drop = order[capacity:]
            kept[n_idx[drop], j_idx[drop]] = False
        return kept, capacity

    def forward(self, x):
        """x [N, C] -> (out [N, C], aux, z_loss, stats)."""
        cfg = self.cfg
        N, C = x.shape
        E, k = cfg.num_experts, cfg.top_k
        # The router runs in fp32 even under bf16 autocast, as in Megatron-Core
        # (and fivefold's bf16): a bf16 router would flip near-tied top-k
        # choices. In fp32 both the cast and the disabled autocast are no-ops.
        with torch.autocast("cpu", enabled=False):
            z = x.float() @ self.router.float().t()
        w, idx, q = self.route(z)
        counts = torch.bincount(idx.reshape(-1), minlength=E)
        zero = x.new_zeros(())
        aux = zero
        if cfg.aux_loss_coeff > 0:
            f = counts.to(x.dtype) / (N * k)
            aux = cfg.aux_loss_coeff * E * (f * q.mean(dim=0)).sum()
        z_loss = zero
        if cfg.z_loss_coeff > 0:
            z_loss = cfg.z_loss_coeff * torch.logsumexp(z, dim=-1).pow(2).mean()
        kept, capacity = self.capacity_keep_mask(w, idx)
        # pad_to_capacity only changes buffer shapes in fivefold; nothing to do.
        out = torch.zeros_like(x)
        Fe = cfg.moe_intermediate_size
        for e in range(E):
            n_idx, j_idx = ((idx == e) & kept).nonzero(as_tuple=True)
            if n_idx.numel() == 0:
                continue
            h = x[n_idx] @ self.experts.w_gate_up[e].t()  # [n_e, 2Fe]
            a = F.silu(h[:, :Fe]) * h[:, Fe:]
            y = a @ self.experts.w_down[e].t()  # [n_e, C]
            # Under bf16 autocast the expert GEMMs return bf16 while the
            # combine accumulates in x's dtype; in fp32 the cast is a no-op.
            out = out.index_add(0, n_idx, (y * w[n_idx, j_idx].unsqueeze(1)).to(out.dtype))
        if self.shared is not None:
            out = out + self.shared(x)
        stats = {"counts": counts, "dropped": int((~kept).sum()), "capacity": capacity}
        return out, aux, z_loss, stats


class Block(nn.Module):
    def __init__(self, cfg, is_moe):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if is_moe:
            self.moe = MoE(cfg)
        else:
            self.mlp = DenseMLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        h = self.mlp_norm(x)
        if hasattr(self, "moe"):
            B, T, C = h.shape
            out, aux, z_loss, stats = self.moe(h.reshape(B * T, C))
            return x + out.view(B, T, C), aux, z_loss, stats
        return x + self.mlp(h), None, None, None


class Embedding(nn.Module):
    def __init__(self, V, C):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(V, C))


class FivefoldModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg, cfg.is_moe_layer[i]) for i in range(cfg.num_layers))
        self.final_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if not cfg.tie_word_embeddings:
            self.lm_head = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.last_moe_stats = []

    def no_weight_decay(self, name):
        """Norm weights and biases are not decayed (ParamTensor.no_weight_decay)."""
        return name.endswith("norm.weight") or self.is_bias(name)

    @staticmethod
    def is_bias(name):
        return name.rsplit(".", 1)[-1] in ("bq", "bk", "bv", "bo")

    def forward(self, tokens, targets=None):
        """tokens [B, T] int64 -> logits [B, T, V] and losses
        {"lm", "aux", "z", "total"} (lm is None without targets)."""
        x = self.embed.weight[tokens]
        aux = x.new_zeros(())
        z_loss = x.new_zeros(())
        self.last_moe_stats = []
        for layer in self.layers:
            x, a, zl, stats = layer(x)
            if stats is not None:
                aux = aux + a
                z_loss = z_loss + zl
                self.last_moe_stats.append(stats)
        h = self.final_norm(x)
        head = self.embed.weight if self.cfg.tie_word_embeddings else self.lm_head.weight
        logits = h @ head.t()
        losses = {"lm": None, "aux": aux, "z": z_loss, "total": aux + z_loss}
        if targets is not None:
            flat = logits.reshape(-1, logits.shape[-1])
            tgt = targets.reshape(-1)
            valid = tgt >= 0
            picked = flat[valid].gather(1, tgt[valid].unsqueeze(1)).squeeze(1)
            lm = (torch.logsumexp(flat[valid], dim=-1) - picked).mean()
            losses["lm"] = lm
            losses["total"] = lm + aux + z_loss
        return logits, losses


def make_model(cfg):
    """The reference network of cfg (a RefConfig or a GPT2Config), uninitialised."""
    if isinstance(cfg, gpt2_reference.GPT2Config):
        return gpt2_reference.GPT2Model(cfg)
    return FivefoldModel(cfg)


def init_weights(model, seed=0):
    """Random init like fivefold's (matrices ~ N(0, init_std), norms = 1),
    though not the same numbers: comparisons load fivefold's weights."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if model.is_bias(name):
                p.zero_()
            elif model.no_weight_decay(name):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * model.cfg.init_std)
    return model


def build_model(cfg, seed=0, dtype=torch.float32, device="cpu"):
    """cfg: a RefConfig or a config dict (HF config.json fields)."""
    if isinstance(cfg, dict):
        cfg = config_from_dict(cfg)
    model = make_model(cfg)
    if isinstance(cfg, gpt2_reference.GPT2Config):
        gpt2_reference.init_weights(model, seed)
    else:
        init_weights(model, seed)
    return model.to(dtype=dtype, device=device)


def expected_param_shapes(cfg):
    """model.h's table of tensor names and shapes, for cross-checking."""
    if isinstance(cfg, gpt2_reference.GPT2Config):
        return gpt2_reference.expected_param_shapes(cfg)
    C, V, D = cfg.hidden_size, cfg.vocab_size, cfg.head_dim
    shapes = {"embed.weight": [V, C]}
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        shapes[p + "attn_norm.weight"] = [C]
        shapes[p + "attn.wq"] = [cfg.num_heads * D, C]
        shapes[p + "attn.wk"] = [cfg.num_kv_heads * D, C]
        shapes[p + "attn.wv"] = [cfg.num_kv_heads * D, C]
        shapes[p + "attn.wo"] = [C, cfg.num_heads * D]
        if cfg.qkv_bias:
            shapes[p + "attn.bq"] = [cfg.num_heads * D]
            shapes[p + "attn.bk"] = [cfg.num_kv_heads * D]
            shapes[p + "attn.bv"] = [cfg.num_kv_heads * D]
        if cfg.o_bias:
            shapes[p + "attn.bo"] = [C]
        shapes[p + "mlp_norm.weight"] = [C]
        if cfg.is_moe_layer[i]:
            E, Fe, Fs = cfg.num_experts, cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size
            shapes[p + "moe.router"] = [E, C]
            shapes[p + "moe.experts.w_gate_up"] = [E, 2 * Fe, C]
            shapes[p + "moe.experts.w_down"] = [E, C, Fe]
            if Fs > 0:
                shapes[p + "moe.shared.w_gate_up"] = [2 * Fs, C]
                shapes[p + "moe.shared.w_down"] = [C, Fs]
        else:
            shapes[p + "mlp.w_gate_up"] = [2 * cfg.intermediate_size, C]
            shapes[p + "mlp.w_down"] = [C, cfg.intermediate_size]
    shapes["final_norm.weight"] = [C]
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = [V, C]
    return shapes
