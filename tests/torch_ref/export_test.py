#!/usr/bin/python3
"""Hugging Face export test: `fivefold export --format hf` must write a model
directory that the Hugging Face Llama / Mixtral architectures compute exactly
what fivefold computes.

For one case (a tiny model config) it trains a few steps with `fivefold
train` on a small byte-level corpus (which writes a checkpoint), exports it,
and then reads the exported directory with its own code only: config.json
with json, model.safetensors with json + torch.frombuffer, tokenizer.json with
json and the GPT-2 byte <-> unicode table. From those it rebuilds the model
following the Hugging Face modeling definitions (RMSNorm, rotate_half RoPE,
grouped-query attention, SwiGLU MLP, Mixtral's sparse MoE block: softmax ->
top-k -> renormalise) in float64 and compares its logits on a fixed token
sequence with fivefold's own (tests/tools/export_logits, model_logits on the
checkpoint).

Cases: dense_untied, dense_tied (Llama; the tied one with a head_dim that is
not hidden/heads), mixtral, mixtral_topk_then_softmax (Mixtral), and
refuse_shared: an MoE model with a shared expert and a dense layer must be
refused with a message naming both. --self-check makes the reader
deliberately wrong (gate/up swapped in the MoE case, interleaved instead of
rotate_half RoPE in the dense case) and passes only when the comparison
catches it.

usage: export_test.py --fivefold BIN --export-logits BIN --case NAME [--self-check]
Exit 0 pass, 1 fail, 77 skipped (no PyTorch).
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("SKIP (missing dependency: python3-torch): PyTorch is not installed; run scripts/install-deps.sh")
    sys.exit(77)

torch.set_default_dtype(torch.float64)

BASE = {
    "model_type": "fivefold", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
    "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
    # Large initial weights make every part of the network move the logits
    # well above the comparison tolerance, so a wrong layout cannot hide.
    "initializer_range": 0.2,
}
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
       "moe_aux_loss_coeff": 0.01}
CASES = {
    "dense_untied": dict(BASE, tie_word_embeddings=False),
    "dense_tied": dict(BASE, tie_word_embeddings=True, head_dim=12, num_key_value_heads=1),
    "mixtral": dict(BASE, tie_word_embeddings=False, norm_topk_prob=True, **MOE),
    "mixtral_topk_then_softmax": dict(BASE, tie_word_embeddings=True, moe_router_order="topk_then_softmax",
                                      norm_topk_prob=False, **MOE),
    "refuse_shared": dict(BASE, tie_word_embeddings=False, shared_expert_intermediate_size=16,
                          moe_layer_freq=2, **MOE),
}
PROMPT = b"And God said, Let there be light: and there was light.\n"


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    return p.returncode, p.stdout


def must_run(cmd, **kw):
    rc, out = run(cmd, **kw)
    if rc != 0:
        fail("command failed (exit %d): %s\n%s" % (rc, " ".join(cmd), out))
    return out


# ---- making a checkpoint with fivefold itself ----

def corpus_text():
    verses = ["In the beginning God created the heaven and the earth.",
              "And the earth was without form, and void; and darkness was upon the face of the deep.",
              "And the evening and the morning were the first day.",
              "And God saw the light, that it was good: and God divided the light from the darkness."]
    return "".join("%d:%d %s\n" % (1 + i // 4, i, verses[i % 4]) for i in range(400))


def make_checkpoint(fivefold, work, model_cfg):
    with open(os.path.join(work, "corpus.txt"), "w") as f:
        f.write(corpus_text())
    must_run([fivefold, "tokenize", "--byte-level", "--input", os.path.join(work, "corpus.txt"),
              "--out", os.path.join(work, "data"), "--val-fraction", "0.1"])
    run_dir = os.path.join(work, "run")
    config = {
        "model": model_cfg,
        "training": {"micro_batch_size": 4, "seq_len": 32, "steps": 4, "lr": 0.01, "warmup_steps": 1,
                     "log_interval": 1, "eval_interval": 0, "eval_batches": 1, "threads": 1,
                     "peak_gflops": 100},
        "data": {"train": "data/train.bin", "val": "data/val.bin"},
        "checkpoint": {"interval": 4},
        "out": "run",
    }
    path = os.path.join(work, "run.json")
    with open(path, "w") as f:
        json.dump(config, f, indent=1)
    must_run([fivefold, "train", "--config", path, "--no-progress"])
    return run_dir


# ---- an independent reader of the exported directory ----

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
          "I32": torch.int32, "I64": torch.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        buf = bytearray(data[8 + n + begin:8 + n + end])
        t = torch.frombuffer(buf, dtype=DTYPES[info["dtype"]]) if buf else torch.zeros(0)
        tensors[name] = t.reshape(info["shape"])
    return tensors, meta


def gpt2_bytes_to_unicode():
    """The GPT-2 table: printable Latin-1 bytes stand for themselves, the rest
    for code points 256, 257, ... in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def check_byte_level_tokenizer(path):
    with open(path) as f:
        tok = json.load(f)
    model = tok.get("model", {})
    if model.get("type") != "BPE":
        fail("tokenizer.json: model.type is %r, expected 'BPE'" % model.get("type"))
    vocab = model.get("vocab", {})
    if len(vocab) != 256:
        fail("tokenizer.json: %d vocabulary entries, expected the 256 bytes" % len(vocab))
    for b, s in gpt2_bytes_to_unicode().items():
        if vocab.get(s) != b:
            fail("tokenizer.json: byte %d (%r) has id %r, expected %d" % (b, s, vocab.get(s), b))
    if model.get("merges"):
        fail("tokenizer.json: a byte-level model's tokenizer must have no merges")
    if (tok.get("pre_tokenizer") or {}).get("type") != "ByteLevel":
        fail("tokenizer.json: pre_tokenizer is not ByteLevel")


def expected_names(cfg):
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not cfg.get("tie_word_embeddings", False):
        names.add("lm_head.weight")
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        names |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
        names |= {p + "self_attn.%s_proj.weight" % x for x in "qkvo"}
        if cfg["model_type"] == "mixtral":
            names.add(p + "block_sparse_moe.gate.weight")
            for e in range(cfg["num_local_experts"]):
                names |= {p + "block_sparse_moe.experts.%d.w%d.weight" % (e, k) for k in (1, 2, 3)}
        else:
            names |= {p + "mlp.%s_proj.weight" % x for x in ("gate", "up", "down")}
    return names


class Reference:
    """The Hugging Face Llama / Mixtral forward pass, written from the
    architecture definitions, in float64."""

    def __init__(self, cfg, weights, mistake=None):
        self.cfg, self.mistake = cfg, mistake
        self.w = {k: v.to(torch.float64) for k, v in weights.items()}
        self.experts_used = set()

    def rms_norm(self, x, weight):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.cfg["rms_norm_eps"]) * weight

    def rope(self, x, positions):
        # x [T, H, D]
        D = x.shape[-1]
        inv_freq = 1.0 / (self.cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
        angles = positions[:, None] * inv_freq[None, :]  # [T, D/2]
        if self.mistake == "interleaved_rope":  # pairs (2i, 2i+1): the other common convention
            cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
            x1, x2 = x[..., 0::2], x[..., 1::2]
            return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        half = D // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # rotate_half
        return x * cos + rotated * sin

    def attention(self, x, p):
        cfg, w = self.cfg, self.w
        T = x.shape[0]
        H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        D = cfg.get("head_dim") or cfg["hidden_size"] // H
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(T, H, D)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(T, Hkv, D)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(T, Hkv, D)
        pos = torch.arange(T, dtype=torch.float64)
        q, k = self.rope(q, pos), self.rope(k, pos)
        k = k.repeat_interleave(H // Hkv, dim=1)  # query head h uses kv head h // (H / Hkv)
        v = v.repeat_interleave(H // Hkv, dim=1)
        scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(D)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        out = torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(T, H * D)
        return out @ w[p + "self_attn.o_proj.weight"].T

    def swiglu(self, x, gate, up, down):
        if self.mistake == "swap_gate_up":
            gate, up = up, gate
        return (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T

    def mlp(self, x, p):
        w = self.w
        return self.swiglu(x, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                           w[p + "mlp.down_proj.weight"])

    def sparse_moe(self, x, p):
        w, k = self.w, self.cfg["num_experts_per_tok"]
        probs = (x @ w[p + "block_sparse_moe.gate.weight"].T).softmax(-1)
        top_w, top_i = probs.topk(k, dim=-1)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            for j in range(k):
                e = int(top_i[t, j])
                self.experts_used.add((p, e))
                q = p + "block_sparse_moe.experts.%d." % e
                out[t] += top_w[t, j] * self.swiglu(x[t:t + 1], w[q + "w1.weight"], w[q + "w3.weight"],
                                                    w[q + "w2.weight"])[0]
        return out

    def logits(self, ids):
        cfg, w = self.cfg, self.w
        x = w["model.embed_tokens.weight"][ids]
        for i in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d." % i
            x = x + self.attention(self.rms_norm(x, w[p + "input_layernorm.weight"]), p)
            h = self.rms_norm(x, w[p + "post_attention_layernorm.weight"])
            x = x + (self.sparse_moe(h, p) if cfg["model_type"] == "mixtral" else self.mlp(h, p))
        x = self.rms_norm(x, w["model.norm.weight"])
        head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
        return x @ head.T


def check_config(cfg, model_cfg):
    moe = "num_experts" in model_cfg
    want = {
        "architectures": ["MixtralForCausalLM" if moe else "LlamaForCausalLM"],
        "model_type": "mixtral" if moe else "llama",
        "vocab_size": model_cfg["vocab_size"], "hidden_size": model_cfg["hidden_size"],
        "num_hidden_layers": model_cfg["num_hidden_layers"],
        "num_attention_heads": model_cfg["num_attention_heads"],
        "num_key_value_heads": model_cfg["num_key_value_heads"],
        "intermediate_size": model_cfg["moe_intermediate_size"] if moe else model_cfg["intermediate_size"],
        "tie_word_embeddings": model_cfg["tie_word_embeddings"], "hidden_act": "silu",
        "rope_theta": model_cfg["rope_theta"], "rms_norm_eps": model_cfg["rms_norm_eps"],
        "max_position_embeddings": model_cfg["max_position_embeddings"],
    }
    if "head_dim" in model_cfg:
        want["head_dim"] = model_cfg["head_dim"]
    if moe:
        want["num_local_experts"] = model_cfg["num_experts"]
        want["num_experts_per_tok"] = model_cfg["num_experts_per_tok"]
    for key, value in want.items():
        if cfg.get(key) != value:
            fail("config.json: %s is %r, expected %r" % (key, cfg.get(key), value))


def compare(export_dir, logits_file, model_cfg, mistake):
    with open(os.path.join(export_dir, "config.json")) as f:
        cfg = json.load(f)
    check_config(cfg, model_cfg)
    weights, meta = read_safetensors(os.path.join(export_dir, "model.safetensors"))
    if meta.get("format") != "pt":
        fail("model.safetensors: __metadata__.format is %r, expected 'pt'" % meta.get("format"))
    names = expected_names(cfg)
    if set(weights) != names:
        fail("model.safetensors: unexpected tensors %s, missing %s" % (sorted(set(weights) - names),
                                                                         sorted(names - set(weights))))
    check_byte_level_tokenizer(os.path.join(export_dir, "tokenizer.json"))

    ours, _ = read_safetensors(logits_file)
    ids = ours["tokens"].to(torch.int64)
    if ids.tolist() != list(PROMPT[:len(ids)]):
        fail("export_logits ran on other tokens than the prompt's bytes")
    model = Reference(cfg, weights, mistake)
    ref = model.logits(ids)
    got = ours["logits"].to(torch.float64)
    if got.shape != ref.shape:
        fail("logits shape %s vs reference %s" % (tuple(got.shape), tuple(ref.shape)))
    scale = ref.abs().max().item()
    spread = ref.std(dim=-1).mean().item()
    diff = (got - ref).abs().max().item()
    tol = 2e-5 * max(1.0, scale)
    print("logits: max |fivefold - reference| = %.3g (tolerance %.3g), max |logit| %.3g, "
          "mean spread over the vocabulary %.3g" % (diff, tol, scale, spread))
    if spread < 0.05:
        fail("the logits barely vary (spread %.3g): the comparison would prove nothing" % spread)
    if cfg["model_type"] == "mixtral":
        per_layer = {}
        for p, e in model.experts_used:
            per_layer.setdefault(p, set()).add(e)
        if any(len(s) < 2 for s in per_layer.values()):
            fail("every token chose the same experts: routing is not exercised")
    return diff <= tol


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fivefold", required=True)
    ap.add_argument("--export-logits", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--self-check", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    fivefold, tool = os.path.abspath(args.fivefold), os.path.abspath(args.export_logits)
    model_cfg = CASES[args.case]
    work = tempfile.mkdtemp(prefix="fivefold-export-test-")
    try:
        run_dir = make_checkpoint(fivefold, work, model_cfg)
        out_dir = os.path.join(work, "hf")
        rc, out = run([fivefold, "export", "--format", "hf", "--checkpoint", run_dir, "--out", out_dir])
        print(out.strip())
        if args.case == "refuse_shared":
            if rc != 1:
                fail("exporting a model with a shared expert exited %d, expected 1" % rc)
            for needle in ("fivefold export:", "cannot be represented", "Mixtral", "shared expert",
                           "dense layers mixed with MoE layers (layer 1;", "docs/export.md"):
                if needle not in out:
                    fail("the refusal does not say %r" % needle)
            if os.path.exists(os.path.join(out_dir, "model.safetensors")):
                fail("a refused export still wrote model.safetensors")
            print("PASS: the unrepresentable MoE was refused")
            return 0
        if rc != 0:
            fail("fivefold export failed")
        logits_file = os.path.join(work, "logits.safetensors")
        tokens = ",".join(str(b) for b in PROMPT[:40])
        must_run([tool, "--checkpoint", run_dir, "--tokens", tokens, "--out", logits_file])
        mistake = None
        if args.self_check:
            mistake = "swap_gate_up" if "num_experts" in model_cfg else "interleaved_rope"
        match = compare(out_dir, logits_file, model_cfg, mistake)
        if args.self_check:
            if match:
                fail("self-check: the reader with %s still matched fivefold's logits" % mistake)
            print("PASS (self-check): a reader with %s is caught" % mistake)
        elif not match:
            fail("the exported model's logits differ from fivefold's")
        else:
            print("PASS: the exported %s model computes fivefold's logits" % args.case)
        return 0
    finally:
        if args.keep:
            print("work directory: " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
