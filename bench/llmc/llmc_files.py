"""Writes, into a scratch directory, the files llm.c's train_gpt2.c main()
reads, from fivefold's own data, so that llm.c can be run offline on the same
weights and tokens as fivefold (llm.c's own scripts would download them):

  gpt2_124M.bin   the checkpoint: 256 int32 header (magic 20240326, version 3,
                  maxT, V, L, NH, C, padded V), then the float32 parameters
                  in train_gpt2.c's order: wte [Vp, C] (rows past V zero),
                  wpe [maxT, C], ln1w/ln1b [L, C], qkvw [L, 3C, C], qkvb
                  [L, 3C], attprojw [L, C, C], attprojb [L, C], ln2w/ln2b
                  [L, C], fcw [L, 4C, C], fcb [L, 4C], fcprojw [L, C, 4C],
                  fcprojb [L, C], lnfw/lnfb [C]. Its matrices are
                  [out, in], as fivefold's are, and qkv is q, k, v stacked,
                  so every tensor is a byte copy of fivefold's.
  dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin
                  token files: 256 int32 header (magic 20240520, version 1,
                  count), then uint16 tokens. Both hold the same B * T + 1
                  tokens, so llm.c's loader (which shuffles its batches)
                  trains on that one batch every step, as fivefold does on a
                  shard of exactly B windows.
The tokenizer file (gpt2_tokenizer.bin) is left out: train_gpt2.c only
warns without it and needs it only to print samples, at step 20, after the
steps timed here.

Standard library only. usage:
  llmc_files.py INIT.safetensors MODEL.json TOKENS.bin B T OUT_DIR
  llmc_files.py --cut SHARD N OUT.bin   (a fivefold shard of SHARD's first N tokens)
(INIT: fivefold's parameters by name, tests/tools/model_dump's init.safetensors;
TOKENS: a fivefold token shard whose first B * T + 1 tokens are used.)
"""
import json
import os
import struct
import sys

PADDED_MULTIPLE = 128  # llm.c pads the vocabulary to a multiple of 128


def read_safetensors(path):
    """name -> (dtype, shape, bytes)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = (meta["dtype"], meta["shape"], data[a:b])
    return out


def write_checkpoint(path, tensors, model):
    V, C, L, NH = model["vocab_size"], model["n_embd"], model["n_layer"], model["n_head"]
    maxT = model.get("n_positions", 1024)
    Vp = (V + PADDED_MULTIPLE - 1) // PADDED_MULTIPLE * PADDED_MULTIPLE
    if not model.get("tie_word_embeddings", True):
        raise SystemExit("llmc_files: llm.c's GPT-2 ties the LM head to wte; this model does not")

    def get(name, shape):
        dtype, got, raw = tensors[name]
        if dtype != "F32" or list(got) != list(shape):
            raise SystemExit(f"llmc_files: {name}: expected F32 {shape}, got {dtype} {got}")
        return raw

    def per_layer(fmt):
        return lambda shape: b"".join(get(fmt.format(i), shape) for i in range(L))

    header = [20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248
    parts = [get("embed.weight", [V, C]) + bytes(4 * (Vp - V) * C), get("pos_embed.weight", [maxT, C]),
             per_layer("layers.{}.attn_norm.weight")([C]), per_layer("layers.{}.attn_norm.bias")([C]),
             b"".join(get(f"layers.{i}.attn.w{x}", [C, C]) for i in range(L) for x in "qkv"),
             b"".join(get(f"layers.{i}.attn.b{x}", [C]) for i in range(L) for x in "qkv"),
             per_layer("layers.{}.attn.wo")([C, C]), per_layer("layers.{}.attn.bo")([C]),
             per_layer("layers.{}.mlp_norm.weight")([C]), per_layer("layers.{}.mlp_norm.bias")([C]),
             per_layer("layers.{}.mlp.w_fc")([4 * C, C]), per_layer("layers.{}.mlp.b_fc")([4 * C]),
             per_layer("layers.{}.mlp.w_proj")([C, 4 * C]), per_layer("layers.{}.mlp.b_proj")([C]),
             get("final_norm.weight", [C]), get("final_norm.bias", [C])]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for p in parts:
            f.write(p)


def read_tokens(path, count):
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:8] != b"FFTOKEN1":
            raise SystemExit(f"llmc_files: {path}: not a fivefold token shard")
        _, dtype, total, _ = struct.unpack("<IIQI", head[8:28])
        if dtype != 1 or total < count:
            raise SystemExit(f"llmc_files: {path}: expected at least {count} uint16 tokens, got {total} (dtype {dtype})")
        return struct.unpack(f"<{count}H", f.read(2 * count))


def write_tokens(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def cut_shard(src, n, dst):
    with open(src, "rb") as f:
        head = f.read(64)
    _, _, _, vocab = struct.unpack("<IIQI", head[8:28])
    tokens = read_tokens(src, n)
    with open(dst, "wb") as f:
        h = b"FFTOKEN1" + struct.pack("<IIQI", 1, 1, n, vocab)
        f.write(h + bytes(64 - len(h)))
        f.write(struct.pack(f"<{n}H", *tokens))


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--cut":
        cut_shard(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    if len(sys.argv) != 7:
        raise SystemExit(__doc__)
    init, model_json, shard, B, T, out = sys.argv[1:]
    with open(model_json) as f:
        model = json.load(f)
    write_checkpoint(os.path.join(out, "gpt2_124M.bin"), read_safetensors(init), model)
    tokens = read_tokens(shard, int(B) * int(T) + 1)
    if max(tokens) >= model["vocab_size"]:
        raise SystemExit(f"llmc_files: token {max(tokens)} is outside the vocabulary {model['vocab_size']}")
    data = os.path.join(out, "dev", "data", "tinyshakespeare")
    os.makedirs(data, exist_ok=True)
    for split in ("train", "val"):
        write_tokens(os.path.join(data, f"tiny_shakespeare_{split}.bin"), tokens)


if __name__ == "__main__":
    main()
