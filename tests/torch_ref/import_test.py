#!/usr/bin/python3
"""Hugging Face import test: a model directory written here, independently of
fivefold's C code, must import (`fivefold import --format hf`) into a model
whose logits equal the PyTorch model's.

For one case it builds the PyTorch reference (reference.py / gpt2_reference.py,
fivefold's tensor names) with random weights everywhere (norms and biases
too), rounds every weight to bfloat16, and writes what a Hugging Face
checkpoint of that model holds, from the Hugging Face layouts alone: the
config.json of the family (written by hand), tensors renamed and reshaped
(gate_proj / up_proj halves, Mixtral's w1 / w3 / w2 experts, Qwen2-MoE's
experts and gated shared expert, GPT-2's Conv1D weights stored [in, out] and
its fused c_attn, its causal-mask buffers), stored as BF16 in two shards with
model.safetensors.index.json (safetensors_io.py, no `safetensors` package).
Then it imports the directory, computes fivefold's logits on a fixed token
sequence (tests/tools/export_logits on the run directory) and compares them
with the reference's, computed in float64 from the same bf16 weights.

Qwen2-MoE multiplies its shared expert by sigmoid(shared_expert_gate . x);
fivefold's shared expert is ungated, so the directory has a zero gate (the
factor 1/2) and a shared down_proj that is twice the reference's.

Cases: llama, qwen2, mixtral, qwen2_moe, gpt2 (tied, "transformer." names),
gpt2_untied (the original checkpoints' names without the prefix), and
memory: the peak resident memory `fivefold import` reports for a 4.5 M
parameter model stays below 1.5 float32 copies above its start-up.
--self-check writes the directory deliberately wrong (k and v swapped in
GPT-2's c_attn, gate and up swapped in the SwiGLU families) and passes only
when the comparison catches it.

usage: import_test.py --fivefold BIN --export-logits BIN --case NAME[,NAME...] [--self-check]
Exit 0 pass, 1 fail, 77 skipped (no PyTorch).
"""
import argparse
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("SKIP (missing dependency: python3-torch): PyTorch is not installed; run scripts/install-deps.sh")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
import safetensors_io  # noqa: E402

torch.set_default_dtype(torch.float64)

DECODER = {"vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 48, "max_position_embeddings": 64,
           "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu", "initializer_range": 0.2,
           "torch_dtype": "bfloat16", "bos_token_id": None, "eos_token_id": None}
GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 256, "n_embd": 32,
        "n_layer": 2, "n_head": 4, "n_positions": 64, "n_ctx": 64, "n_inner": None,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "initializer_range": 0.2,
        "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "summary_type": "cls_index",
        "torch_dtype": "bfloat16"}
CASES = {
    "llama": dict(DECODER, model_type="llama", architectures=["LlamaForCausalLM"], tie_word_embeddings=False,
                  attention_bias=False, mlp_bias=False, rope_scaling=None, pretraining_tp=1),
    "qwen2": dict(DECODER, model_type="qwen2", architectures=["Qwen2ForCausalLM"], tie_word_embeddings=True,
                  use_sliding_window=False, sliding_window=4096, max_window_layers=2),
    "mixtral": dict(DECODER, model_type="mixtral", architectures=["MixtralForCausalLM"],
                    tie_word_embeddings=False, num_local_experts=4, num_experts_per_tok=2,
                    intermediate_size=24, router_aux_loss_coef=0.02, output_router_logits=False,
                    router_jitter_noise=0.0, sliding_window=None),
    "qwen2_moe": dict(DECODER, model_type="qwen2_moe", architectures=["Qwen2MoeForCausalLM"],
                      tie_word_embeddings=False, num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=24, shared_expert_intermediate_size=16, norm_topk_prob=False,
                      decoder_sparse_step=1, mlp_only_layers=[1], use_sliding_window=False,
                      router_aux_loss_coef=0.001),
    "gpt2": dict(GPT2),
    "gpt2_untied": dict(GPT2, tie_word_embeddings=False),
}
TOKENS = list(b"In the beginning God created the heaven and the earth.")
# The memory case: about 4.5 M parameters (18 MB in float32, 9 MB as BF16).
BIG = dict(DECODER, model_type="llama", vocab_size=2048, hidden_size=384, num_attention_heads=6,
           num_key_value_heads=6, intermediate_size=768, tie_word_embeddings=False)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def reference_config(hf):
    d = dict(hf)
    d.pop("architectures", None)
    if d["model_type"] in ("qwen2", "qwen2_moe"):
        d["qkv_bias"] = True  # part of the Qwen2 architecture
    return reference.config_from_dict(d)


def random_model(cfg):
    """Every parameter random (norms around 1), rounded to bf16."""
    model = reference.build_model(cfg, seed=3, dtype=torch.float64)
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            p.copy_(1.0 + 0.2 * noise if name.endswith("norm.weight") else 0.2 * noise)
            p.copy_(p.to(torch.bfloat16).to(torch.float64))
    return model


def swiglu_tensors(out, prefix, gate_up, down, names, mistake):
    half = gate_up.shape[0] // 2
    gate, up = gate_up[:half], gate_up[half:]
    if mistake:
        gate, up = up, gate
    out[f"{prefix}.{names[0]}.weight"] = gate
    out[f"{prefix}.{names[1]}.weight"] = up
    out[f"{prefix}.{names[2]}.weight"] = down


def decoder_tensors(sd, hf, cfg, mistake):
    out = {"model.embed_tokens.weight": sd["embed.weight"], "model.norm.weight": sd["final_norm.weight"]}
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    mixtral = hf["model_type"] == "mixtral"
    for i in range(cfg.num_layers):
        p, o = f"model.layers.{i}", f"layers.{i}"
        out[f"{p}.input_layernorm.weight"] = sd[f"{o}.attn_norm.weight"]
        out[f"{p}.post_attention_layernorm.weight"] = sd[f"{o}.mlp_norm.weight"]
        for ours, theirs in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "o")):
            out[f"{p}.self_attn.{theirs}_proj.weight"] = sd[f"{o}.attn.w{ours}"]
            if f"{o}.attn.b{ours}" in sd:
                out[f"{p}.self_attn.{theirs}_proj.bias"] = sd[f"{o}.attn.b{ours}"]
        if not cfg.is_moe_layer[i]:
            swiglu_tensors(out, f"{p}.mlp", sd[f"{o}.mlp.w_gate_up"], sd[f"{o}.mlp.w_down"],
                           ("gate_proj", "up_proj", "down_proj"), mistake)
            continue
        block = "block_sparse_moe" if mixtral else "mlp"
        out[f"{p}.{block}.gate.weight"] = sd[f"{o}.moe.router"]
        names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
        for e in range(cfg.num_experts):
            swiglu_tensors(out, f"{p}.{block}.experts.{e}", sd[f"{o}.moe.experts.w_gate_up"][e],
                           sd[f"{o}.moe.experts.w_down"][e], names, mistake)
        if cfg.shared_expert_intermediate_size > 0:
            # sigmoid(0) = 1/2 times a doubled down_proj: the ungated shared expert
            swiglu_tensors(out, f"{p}.mlp.shared_expert", sd[f"{o}.moe.shared.w_gate_up"],
                           2 * sd[f"{o}.moe.shared.w_down"], ("gate_proj", "up_proj", "down_proj"), mistake)
            out[f"{p}.mlp.shared_expert_gate.weight"] = torch.zeros(1, cfg.hidden_size)
    return out


def gpt2_tensors(sd, cfg, prefix, mistake):
    """GPT-2's Conv1D stores weights [in, out]; c_attn is q, k, v side by side."""
    T = cfg.max_position_embeddings
    out = {prefix + "wte.weight": sd["embed.weight"], prefix + "wpe.weight": sd["pos_embed.weight"],
           prefix + "ln_f.weight": sd["final_norm.weight"], prefix + "ln_f.bias": sd["final_norm.bias"]}
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    for i in range(cfg.num_layers):
        p, o = f"{prefix}h.{i}", f"layers.{i}"
        for theirs, ours in (("ln_1", "attn_norm"), ("ln_2", "mlp_norm")):
            out[f"{p}.{theirs}.weight"] = sd[f"{o}.{ours}.weight"]
            out[f"{p}.{theirs}.bias"] = sd[f"{o}.{ours}.bias"]
        order = ("q", "v", "k") if mistake else ("q", "k", "v")
        out[f"{p}.attn.c_attn.weight"] = torch.cat([sd[f"{o}.attn.w{x}"] for x in order], 0).t()
        out[f"{p}.attn.c_attn.bias"] = torch.cat([sd[f"{o}.attn.b{x}"] for x in order], 0)
        out[f"{p}.attn.c_proj.weight"] = sd[f"{o}.attn.wo"].t()
        out[f"{p}.attn.c_proj.bias"] = sd[f"{o}.attn.bo"]
        out[f"{p}.mlp.c_fc.weight"] = sd[f"{o}.mlp.w_fc"].t()
        out[f"{p}.mlp.c_fc.bias"] = sd[f"{o}.mlp.b_fc"]
        out[f"{p}.mlp.c_proj.weight"] = sd[f"{o}.mlp.w_proj"].t()
        out[f"{p}.mlp.c_proj.bias"] = sd[f"{o}.mlp.b_proj"]
        # the causal mask buffer older GPT-2 checkpoints carry
        out[f"{p}.attn.bias"] = torch.ones(T, T).tril().view(1, 1, T, T).to(torch.float32)
    return out


def write_directory(path, hf, tensors):
    """config.json and two BF16 shards with their index."""
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf, f, indent=2)
    names = list(tensors)
    halves = (names[: len(names) // 2], names[len(names) // 2:])
    weight_map, total = {}, 0
    for k, part in enumerate(halves):
        shard = f"model-{k + 1:05d}-of-00002.safetensors"
        chunk = {}
        for n in part:
            t = tensors[n].contiguous()
            chunk[n] = t if t.dtype == torch.float32 else t.to(torch.bfloat16)
            total += chunk[n].numel() * chunk[n].element_size()
            weight_map[n] = shard
        safetensors_io.save(os.path.join(path, shard), chunk, {"format": "pt"})
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def memory_case(work):
    """Peak resident memory of an import, above the process's own start-up,
    stays below 1.5 float32 copies of the model: one copy plus a tensor of
    scratch, never two (what reading it whole, or a model with gradients,
    would take)."""
    cfg = reference_config(BIG)
    shapes = reference.expected_param_shapes(cfg)
    gen = torch.Generator().manual_seed(5)
    sd = {n: (0.02 * torch.randn(s, generator=gen, dtype=torch.float64)) for n, s in shapes.items()}
    tensors = decoder_tensors(sd, BIG, cfg, False)
    params = sum(t.numel() for t in sd.values())
    hf_dir = os.path.join(work, "hf")
    write_directory(hf_dir, BIG, tensors)
    del sd, tensors
    def peak_of(model_dir, out_dir):
        rc, out = run([args_fivefold[0], "import", "--format", "hf", "--model", model_dir, "--out", out_dir])
        print(out.strip())
        m = re.search(r"peak resident memory ([0-9.]+) MB", out)
        if rc != 0 or not m:
            fail("fivefold import exited %d without its peak memory" % rc)
        return float(m.group(1)) * 1e6

    # start-up and libraries: a tiny model's import
    tiny = CASES["llama"]
    tiny_cfg = reference_config(tiny)
    write_directory(os.path.join(work, "tiny"), tiny, decoder_tensors(
        {k: v.detach() for k, v in random_model(tiny_cfg).named_parameters()}, tiny, tiny_cfg, False))
    start = peak_of(os.path.join(work, "tiny"), os.path.join(work, "tiny-run"))
    peak = peak_of(hf_dir, os.path.join(work, "run"))
    copy = 4 * params
    print("import of %d parameters (%.1f MB as float32): peak RSS %.1f MB, %.1f MB at start-up"
          % (params, copy / 1e6, peak / 1e6, start / 1e6))
    if peak - start > 1.5 * copy:
        fail("the import held %.2f float32 copies of the model" % ((peak - start) / copy))
    print("PASS: the import held %.2f float32 copies of the model" % ((peak - start) / copy))
    return 0


args_fivefold = []


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def one_case(args, name):
    """Writes, imports and compares one case; fails the test on a mismatch."""
    hf = CASES[name]
    cfg = reference_config(hf)
    model = random_model(cfg)
    sd = {k: v.detach() for k, v in model.named_parameters()}
    if hf["model_type"] == "gpt2":
        tensors = gpt2_tensors(sd, cfg, "" if name == "gpt2_untied" else "transformer.", args.self_check)
    else:
        tensors = decoder_tensors(sd, hf, cfg, args.self_check)
    work = tempfile.mkdtemp(prefix="fivefold-import-")
    try:
        hf_dir, run_dir = os.path.join(work, "hf"), os.path.join(work, "run")
        write_directory(hf_dir, hf, tensors)
        rc, out = run([args.fivefold, "import", "--format", "hf", "--model", hf_dir, "--out", run_dir])
        print(out.strip())
        if rc != 0:
            fail("%s: fivefold import exited %d" % (name, rc))
        if "BF16" not in out or "2 files" not in out:
            fail("%s: the import does not report reading two BF16 shards" % name)
        logits_file = os.path.join(work, "logits.safetensors")
        rc, out = run([args.export_logits, "--checkpoint", run_dir, "--tokens", ",".join(map(str, TOKENS)),
                       "--out", logits_file])
        if rc != 0:
            fail("%s: export_logits failed: %s" % (name, out))
        ours = safetensors_io.load(logits_file)[0]["logits"].to(torch.float64)
        with torch.no_grad():
            theirs = model(torch.tensor([TOKENS]))[0][0]
        diff = (ours - theirs).abs().max().item()
        scale = theirs.abs().max().item()
        tol = 2e-5 * max(1.0, scale)
        print("%s logits: max |fivefold - PyTorch| = %.3g (tolerance %.3g), max |logit| %.3g"
              % (name, diff, tol, scale))
        if args.self_check:
            if diff <= tol:
                fail("%s: the deliberately wrong directory was not caught" % name)
            print("PASS (self-check): %s: the wrong layout was caught" % name)
        elif diff > tol:
            fail("%s: fivefold's logits after import differ from the PyTorch model's" % name)
        else:
            print("PASS: %s imported from BF16 shards computes the PyTorch model's logits" % name)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fivefold", required=True)
    ap.add_argument("--export-logits", required=True)
    ap.add_argument("--case", required=True,
                    help="comma-separated: %s, or memory" % ", ".join(sorted(CASES)))
    ap.add_argument("--self-check", action="store_true")
    args = ap.parse_args()
    args_fivefold.append(args.fivefold)
    if args.case == "memory":
        work = tempfile.mkdtemp(prefix="fivefold-import-")
        try:
            return memory_case(work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    names = args.case.split(",")
    for name in names:
        if name not in CASES:
            fail("unknown case %r (expected %s)" % (name, ", ".join(sorted(CASES))))
    # One process for all cases: PyTorch starts once.
    for name in names:
        one_case(args, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
