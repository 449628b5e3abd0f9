"""An independent PyTorch GPT-2, written from the GPT-2 architecture
(Radford et al. 2019: pre-LayerNorm blocks, learned absolute positions, GeLU
with the tanh approximation, biases everywhere, tied LM head) and the field
names of Hugging Face's GPT2Config, with fivefold's tensor names (model.h),
so that compare.py can load fivefold's weights by name. Not derived from
fivefold's C code, and not from transformers (which is not needed).

    cfg = config_from_dict(json.load(open("gpt2.json")))
    model = GPT2Model(cfg); init_weights(model)
    logits, losses = model(tokens, targets)
"""
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def _f32(x):
    return float(np.float32(x))


@dataclass
class GPT2Config:
    model_type: str = "gpt2"
    vocab_size: int = 0
    hidden_size: int = 0
    num_layers: int = 0
    num_heads: int = 0
    intermediate_size: int = 0
    max_position_embeddings: int = 1024
    layer_norm_eps: float = _f32(1e-5)
    tie_word_embeddings: bool = True
    init_std: float = _f32(0.02)
    # What the MoE-aware comparison code asks of every config.
    num_experts: int = 0
    is_moe_layer: list = field(default_factory=list)

    @property
    def head_dim(self):
        return self.hidden_size // self.num_heads


def config_from_dict(d):
    """GPT2Config field names; null counts as absent (n_inner: 4 n_embd)."""
    d = {k: v for k, v in d.items() if v is not None}
    c = GPT2Config()
    c.vocab_size = int(d["vocab_size"])
    c.hidden_size = int(d["n_embd"])
    c.num_layers = int(d["n_layer"])
    c.num_heads = int(d["n_head"])
    c.intermediate_size = int(d.get("n_inner", 4 * c.hidden_size))
    c.max_position_embeddings = int(d.get("n_positions", 1024))
    c.layer_norm_eps = _f32(d.get("layer_norm_epsilon", 1e-5))
    c.tie_word_embeddings = bool(d.get("tie_word_embeddings", True))
    c.init_std = _f32(d.get("initializer_range", 0.02))
    act = d.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"activation_function {act!r}: only the tanh GeLU is modelled")
    c.is_moe_layer = [False] * c.num_layers
    return c


class LayerNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


class Attention(nn.Module):
    """Causal multi-head attention, scale 1/sqrt(head_dim), no RoPE."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg.hidden_size
        self.H, self.D = cfg.num_heads, cfg.head_dim
        for w in ("wq", "wk", "wv"):
            setattr(self, w, nn.Parameter(torch.empty(C, C)))
        for b in ("bq", "bk", "bv", "bo"):
            setattr(self, b, nn.Parameter(torch.empty(C)))
        self.wo = nn.Parameter(torch.empty(C, C))

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.H, self.D
        q = F.linear(x, self.wq, self.bq).view(B, T, H, D).transpose(1, 2)
        k = F.linear(x, self.wk, self.bk).view(B, T, H, D).transpose(1, 2)
        v = F.linear(x, self.wv, self.bv).view(B, T, H, D).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return F.linear(att.transpose(1, 2).reshape(B, T, C), self.wo, self.bo)


class MLP(nn.Module):
    def __init__(self, C, Fdim):
        super().__init__()
        self.w_fc = nn.Parameter(torch.empty(Fdim, C))
        self.b_fc = nn.Parameter(torch.empty(Fdim))
        self.w_proj = nn.Parameter(torch.empty(C, Fdim))
        self.b_proj = nn.Parameter(torch.empty(C))

    def forward(self, x):
        return F.linear(F.gelu(F.linear(x, self.w_fc, self.b_fc), approximate="tanh"), self.w_proj, self.b_proj)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Table(nn.Module):
    def __init__(self, rows, C):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, C))


class GPT2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = Table(cfg.vocab_size, cfg.hidden_size)
        self.pos_embed = Table(cfg.max_position_embeddings, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.final_norm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps)
        if not cfg.tie_word_embeddings:
            self.lm_head = Table(cfg.vocab_size, cfg.hidden_size)
        self.last_moe_stats = []

    @staticmethod
    def is_bias(name):
        return name.rsplit(".", 1)[-1] in ("bias", "bq", "bk", "bv", "bo", "b_fc", "b_proj")

    def no_weight_decay(self, name):
        """Norm weights and every bias are not decayed."""
        return name.endswith("norm.weight") or self.is_bias(name)

    def forward(self, tokens, targets=None):
        T = tokens.shape[1]
        x = self.embed.weight[tokens] + self.pos_embed.weight[:T][None]
        for layer in self.layers:
            x = layer(x)
        h = self.final_norm(x)
        head = self.embed.weight if self.cfg.tie_word_embeddings else self.lm_head.weight
        logits = h @ head.t()
        zero = x.new_zeros(())
        losses = {"lm": None, "aux": zero, "z": zero, "total": zero}
        if targets is not None:
            lm = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)
            losses["lm"] = lm
            losses["total"] = lm
        return logits, losses


def init_weights(model, seed=0):
    """Matrices ~ N(0, init_std), norm weights 1, biases 0 (not fivefold's
    numbers: comparisons load fivefold's weights)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif model.is_bias(name):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * model.cfg.init_std)
    return model


def expected_param_shapes(cfg):
    C, V, Fd = cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size
    shapes = {"embed.weight": [V, C], "pos_embed.weight": [cfg.max_position_embeddings, C]}
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        for norm in ("attn_norm", "mlp_norm"):
            shapes[p + norm + ".weight"] = [C]
            shapes[p + norm + ".bias"] = [C]
        for w in ("wq", "wk", "wv", "wo"):
            shapes[p + "attn." + w] = [C, C]
        for b in ("bq", "bk", "bv", "bo"):
            shapes[p + "attn." + b] = [C]
        shapes[p + "mlp.w_fc"] = [Fd, C]
        shapes[p + "mlp.b_fc"] = [Fd]
        shapes[p + "mlp.w_proj"] = [C, Fd]
        shapes[p + "mlp.b_proj"] = [C]
    shapes["final_norm.weight"] = [C]
    shapes["final_norm.bias"] = [C]
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = [V, C]
    return shapes
